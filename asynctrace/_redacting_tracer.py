"""The SDK tracer asynctrace hands out: its spans record exceptions and URLs redacted."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util import types

from ._cm import otel_contextmanager
from ._span_errors import redacted_block
from ._span_redacting import PRE_REDACTED, redacting
from ._url_attributes import URL_ATTRIBUTES, redact_url_attributes

__all__ = ["RedactingTracer", "redacted_links", "redacting_tracer"]


def redacting_tracer(tracer: trace.Tracer) -> trace.Tracer:
    """*tracer* as a :class:`RedactingTracer` if it is the OpenTelemetry SDK's; else itself.

    The SDK's spans record what they are given; this tracer's spans redact their
    URL attributes and exceptions as the fast provider's do. A tracer of any other
    provider (asynctrace's fast one, which redacts by itself, a no-op one, a
    user's own) is left as it is.

    Example:
        >>> redacting_tracer(trace.NoOpTracer()).__class__.__name__
        'NoOpTracer'
    """
    if tracer.__class__.__module__.startswith("opentelemetry.sdk"):
        return RedactingTracer(tracer)
    return tracer


class RedactingTracer(trace.Tracer):
    """An SDK tracer whose spans record exceptions redacted (see
    :func:`~._span_redacting.redacting`).

    Its spans get the scope stamps from the provider's first span processor
    (:func:`~._sdk_stamps.stamp_started`), as every other tracer's spans on that provider do.
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        """The SDK tracer's ``start_span``; the span records exceptions redacted, and its
        URL attributes (links' too) are redacted as the fast provider's."""
        attributes = redact_url_attributes(attributes) if attributes else attributes
        links = redacted_links(links)
        PRE_REDACTED.on = True  # the first processor's on_start need not redact them again
        try:
            span = self.tracer.start_span(
                name, context, kind, attributes, links, start_time, record_exception,
                set_status_on_exception,
            )  # fmt: skip
        finally:
            PRE_REDACTED.on = False
        return redacting(span)

    @otel_contextmanager
    def start_as_current_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        """Start a span and make it current for the block (also a decorator)."""
        span = self.start_span(
            name, context, kind, attributes, links, start_time, record_exception,
            set_status_on_exception,
        )  # fmt: skip
        yield from redacted_block(span, end_on_exit, record_exception, set_status_on_exception)


def redacted_links(links: Sequence[Link] | None) -> Sequence[Link] | None:
    """*links* with their URL attributes redacted (a new list if any changed; an iterator
    of links, which one pass would use up, is made a list first)."""
    if links is not None and not isinstance(links, (list, tuple)):
        links = list(links)
    if not links:
        return links
    out: list[Link] | None = None
    for index, link in enumerate(links):
        attributes = link.attributes if link is not None else None
        if attributes and not URL_ATTRIBUTES.isdisjoint(attributes):
            if out is None:
                out = list(links)
            out[index] = Link(link.context, redact_url_attributes(attributes))
    return links if out is None else out
