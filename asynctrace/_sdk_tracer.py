"""The SDK tracer :func:`asynctrace.get_tracer` hands out on the SDK provider.

OpenTelemetry's ``start_as_current_span`` records an exception that escapes
its block as the SDK records it: the message, the stack trace and a
``"<type>: <message>"`` status description, raw, a URL's token and all. The
fast provider's tracer records it redacted; this wrapper does the same for
the SDK's, so the tracer asynctrace hands out keeps asynctrace's rule on
either provider. Spans are the SDK's own; only the block's exit differs.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.util import types

from ._cm import otel_contextmanager
from ._errors import report_internal_error
from ._redact import exception_reason, redact_text, secrets_of

__all__ = ["RedactingTracer"]


class RedactingTracer(trace.Tracer):
    """An SDK tracer whose ``start_as_current_span`` records exceptions redacted."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        """The SDK tracer's own ``start_span``."""
        return self.tracer.start_span(*args, **kwargs)

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
        span = self.tracer.start_span(
            name, context, kind, attributes, links, start_time, record_exception,
            set_status_on_exception,
        )  # fmt: skip
        with trace.use_span(
            span, end_on_exit=end_on_exit, record_exception=False, set_status_on_exception=False
        ) as current:
            try:
                yield current
            except Exception as exc:
                if record_exception or set_status_on_exception:
                    _mark_error(current, exc, record_exception, set_status_on_exception)
                raise


def _mark_error(span: trace.Span, exc: Exception, record: bool, set_status: bool) -> None:
    """What ``use_span`` records of *exc* on an SDK span, redacted; never raises."""
    try:
        if not span.is_recording():
            return
        secrets = secrets_of(exc)
        if record:
            try:
                stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            except Exception as err:  # a broken __str__ in the chain, say
                stack = f"<stack trace unavailable: {type(err).__name__}>"
            span.record_exception(  # the SDK's event, its message and stack trace replaced
                exc,
                {
                    "exception.message": redact_text(_text(exc), secrets),
                    "exception.stacktrace": redact_text(stack, secrets),
                },
            )
        if set_status:
            span.set_status(Status(StatusCode.ERROR, exception_reason(type(exc), exc)))
    except Exception as err:
        report_internal_error(("exit", type(span).__name__), err)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"
