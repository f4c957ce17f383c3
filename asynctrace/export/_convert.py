"""Fast-provider spans to SDK ``ReadableSpan`` objects, on the export thread.

SDK exporters (OTLP, console, in-memory, a user's own) and SDK span
processors take ``ReadableSpan`` objects. The fast provider's spans are
turned into them here, off the hot path, with the span limits applied the
way the SDK applies them (``BoundedAttributes``: count, value length, value
checks), exception stack traces formatted, and the resource and
instrumentation scope the span was recorded with.

The converter reads a snapshot of each attribute dict, event list and link
list (a ``dict``/``list`` copy, atomic under the GIL): a write that races
``end()`` from another thread may or may not be recorded, but conversion
never fails for it. A value that cannot be cleaned (a ``__str__`` that
raises, say) is left out alone and counted as dropped, as the OTLP encoder
leaves it out.
"""

from __future__ import annotations

from collections.abc import Mapping
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

from .._exception_text import redact_exception_text
from .._fast import FastSpan, Scope, SpanEvent, SpanLimits
from .._fast._deferred import settle_one
from .._fast._evict import STAMP_KEYS
from .._fast._pending import SEEN as _SEEN
from .._span_errors import STACKTRACE as _STACKTRACE

__all__ = ["Converter", "bounded", "finish_event", "uncut_stamps"]

_UNSET = Status(StatusCode.UNSET)


def finish_event(event: SpanEvent) -> None:
    """Format a recorded exception's stack trace into its event, redacted (once; any thread)."""
    pending = event.exception
    if pending is None:
        return
    try:
        text = redact_exception_text("".join(pending.format()), event.secrets, tail=True)
    except Exception as exc:  # a broken __str__ in the chain, say
        text = f"<stack trace unavailable: {type(exc).__name__}>"
    if event.attributes.get(_STACKTRACE) == "":  # the placeholder only: never the caller's
        event.attributes[_STACKTRACE] = text  # the key exists: no resize under a reader
    event.exception = None


def bounded(
    maxlen: int | None, attributes: Mapping[str, Any], length: int | None
) -> BoundedAttributes:
    """``BoundedAttributes`` of a snapshot of *attributes*; values it cannot clean are dropped.

    What the SDK keeps (the newest *maxlen* values it can clean), with the same
    ``dropped`` count; but past *maxlen* only the newest are handed to it: handed
    the whole mapping, it logs a warning for every key it evicts (10,000
    attributes on an event: 9,872 lines on the export thread). The SDK's
    cleaning raises for the whole mapping if one value's ``str()`` raises: such
    a value is then left out alone, and counted in ``dropped``.
    """
    snapshot = dict(attributes)  # one C call: atomic against a writer on another thread
    over = len(snapshot) - maxlen if maxlen is not None and maxlen > 0 else 0
    # A key that is not a str may become one the mapping holds already (1 and "1"): only
    # the SDK's own pass over all of them then tells what it keeps. (A str subclass's
    # key is one with the equal str: no two such keys in one mapping.)
    if over > 0 and all(isinstance(key, str) for key in snapshot):
        newest = dict(list(snapshot.items())[over:])
        try:
            cleaned = BoundedAttributes(maxlen, newest, True, length)
        except Exception:
            pass
        else:
            if len(cleaned) == maxlen:  # all of them clean: what the SDK keeps
                cleaned.dropped += over
                return cleaned
        return _one_by_one(maxlen, snapshot, length)
    try:
        return BoundedAttributes(maxlen, snapshot, True, length)
    except Exception:
        return _one_by_one(maxlen, snapshot, length)


def _one_by_one(
    maxlen: int | None, snapshot: dict[str, Any], length: int | None
) -> BoundedAttributes:
    """:func:`bounded`, value by value from the newest (rare: some value cannot be cleaned,
    or one among the newest is dropped, so an older one takes its place)."""
    kept: list[tuple[str, Any]] = []
    lost = 0
    for key, value in reversed(snapshot.items()):
        if maxlen is not None and len(kept) >= maxlen:
            lost += 1
            continue
        try:
            alone = BoundedAttributes(None, {key: value}, True, length)
        except Exception:
            alone = None
        if alone is None or not len(alone):
            lost += 1
        else:
            kept.append((key, value))
    cleaned = BoundedAttributes(maxlen, dict(reversed(kept)), True, length)
    cleaned.dropped += lost
    return cleaned


def uncut_stamps(cleaned: BoundedAttributes, raw: Mapping[str, Any]) -> None:
    """Put back asynctrace's stamps (``rl.bucket``, ...) that a length limit cut in *cleaned*.

    A bucket or group cut to ``max_attribute_length`` would be another one (or
    none) for goodput: the stamps are never cut. Called only under a length limit.
    """
    stored = cleaned._dict
    for key in STAMP_KEYS.intersection(stored):
        value = raw.get(key)
        if value.__class__ is str and stored[key] != value:
            stored[key] = value


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

    def readable(self, span: FastSpan, cls: type[ReadableSpan] = ReadableSpan) -> ReadableSpan:
        """The SDK view of an ended *span* (a *cls*, a ``ReadableSpan`` subclass)."""
        if _SEEN.lazy or _SEEN.long:  # work the span left to export time
            settle_one(span)
        limits = self.limits
        length = limits.max_attribute_length
        raw = span._attributes
        attributes = bounded(limits.max_attributes, raw, length)
        if length is not None:
            uncut_stamps(attributes, raw)
        attributes.dropped += getattr(span, "_dropped", 0)
        context = span.get_span_context()
        parent = None
        if span._parent_id:
            flags: int | None = getattr(span, "_parent_flags", None)  # set when not the span's
            parent = SpanContext(
                span._trace_id,
                span._parent_id,
                span._parent_remote,
                TraceFlags(span._flags if flags is None else flags),
                context.trace_state,
            )
        name = span._name
        if name.__class__ is not str:  # a name the span helpers did not check: its text,
            name = str(name)  # as the chrome writer and the OTLP encoder write it
        return cls(
            name=name,
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
            for event in list(events):  # a snapshot, as of the attributes
                finish_event(event)
                attrs = bounded(
                    limits.max_event_attributes,
                    event.attributes,
                    limits.max_event_attribute_length,
                )
                name = event.name
                if name.__class__ is not str:
                    name = str(name)
                out.append(Event(name, attrs, event.timestamp))
        out.dropped += getattr(span, "_dropped_events", 0)
        return out

    def _links(self, span: FastSpan) -> Any:
        links = getattr(span, "_links", None)
        limits = self.limits
        out: BoundedList[Link] = BoundedList(limits.max_links)
        if links:
            for link in list(links):
                attrs = bounded(
                    limits.max_link_attributes,
                    link.attributes or {},
                    limits.max_event_attribute_length,
                )
                out.append(Link(link.context, attrs))
        out.dropped += getattr(span, "_dropped_links", 0)
        return out
