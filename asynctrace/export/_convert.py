"""Fast-provider spans to SDK ``ReadableSpan`` objects, on the export thread.

SDK exporters (OTLP, console, in-memory, a user's own) and SDK span
processors take ``ReadableSpan`` objects. The fast provider's spans are
turned into them here, off the hot path, with the span limits applied the
way the SDK applies them (``BoundedAttributes``: count, value length, value
checks), exception stack traces formatted, and the resource and
instrumentation scope the span was recorded with.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.status import Status, StatusCode

from .._fast import FastSpan, Scope, SpanEvent, SpanLimits
from .._redact import redact_text

__all__ = ["Converter", "finish_event"]

_UNSET = Status(StatusCode.UNSET)
_STACKTRACE = "exception.stacktrace"


def finish_event(event: SpanEvent) -> None:
    """Format a recorded exception's stack trace into its event, redacted (once; any thread)."""
    pending = event.exception
    if pending is None:
        return
    try:
        text = redact_text("".join(pending.format()), event.secrets)
    except Exception as exc:  # a broken __str__ in the chain, say
        text = f"<stack trace unavailable: {type(exc).__name__}>"
    event.attributes[_STACKTRACE] = text  # the key exists: no resize under a reader
    event.exception = None


class Converter:
    """Builds ``ReadableSpan`` objects from ended :class:`FastSpan` objects.

    Args:
        resource: the SDK resource every span carries.
        limits: the span limits to apply.
    """

    def __init__(self, resource: Resource, limits: SpanLimits) -> None:
        self.resource = resource
        self.limits = limits

    def scope(self, scope: Scope) -> InstrumentationScope:
        """The SDK scope for a tracer's :class:`Scope` (cached)."""
        found = scope.sdk  # kept on the scope: no cache that grows with get_tracer calls
        if found is None:
            found = scope.sdk = InstrumentationScope(
                scope.name, scope.version, scope.schema_url, scope.attributes
            )
        return found  # type: ignore[no-any-return]

    def readable(self, span: FastSpan) -> ReadableSpan:
        """The SDK view of an ended *span*."""
        limits = self.limits
        length = limits.max_attribute_length
        attributes = BoundedAttributes(limits.max_attributes, span._attributes, True, length)
        attributes.dropped += getattr(span, "_dropped", 0)
        context = span.get_span_context()
        parent = None
        if span._parent_id:
            parent = SpanContext(
                span._trace_id,
                span._parent_id,
                span._parent_remote,
                TraceFlags(span._flags),
                context.trace_state,
            )
        return ReadableSpan(
            name=span._name,
            context=context,
            parent=parent,
            resource=self.resource,
            attributes=attributes,
            events=self._events(span),
            links=self._links(span),
            kind=span._kind,
            status=span._status or _UNSET,
            start_time=span._start,
            end_time=span._end,
            instrumentation_scope=self.scope(span._tracer.scope),
        )

    def parent_context(self, span: ReadableSpan) -> Context | None:
        """A context holding *span*'s parent, for an SDK processor's ``on_start``."""
        if span.parent is None:
            return None
        return set_span_in_context(NonRecordingSpan(span.parent))

    def _events(self, span: FastSpan) -> Any:
        events = span._events
        limits = self.limits
        out: BoundedList[Event] = BoundedList(limits.max_events)
        if events:
            for event in events:
                finish_event(event)
                attrs = BoundedAttributes(
                    limits.max_event_attributes,
                    event.attributes,
                    True,
                    limits.max_event_attribute_length,
                )
                out.append(Event(event.name, attrs, event.timestamp))
        out.dropped += getattr(span, "_dropped_events", 0)
        return out

    def _links(self, span: FastSpan) -> Any:
        links = getattr(span, "_links", None)
        limits = self.limits
        out: BoundedList[Link] = BoundedList(limits.max_links)
        if links:
            for link in links:
                attrs = BoundedAttributes(
                    limits.max_link_attributes,
                    link.attributes,
                    True,
                    limits.max_event_attribute_length,
                )
                out.append(Link(link.context, attrs))
        out.dropped += getattr(span, "_dropped_links", 0)
        return out
