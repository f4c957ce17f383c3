"""OTLP protobuf written straight from the fast provider's spans, on the export thread.

:class:`WireEncoder` turns one ended :class:`~asynctrace._fast.FastSpan` into
the wire bytes of an OTLP ``Span`` (varints, fixed64 times, length-delimited
fields, in field order), with the span limits and value checks applied as
the SDK's ``BoundedAttributes`` applies them, and :func:`request_bytes` puts
encoded spans together into an ``ExportTraceServiceRequest``, grouped by
resource and instrumentation scope as OpenTelemetry's ``encode_spans`` groups
them. No ``ReadableSpan`` and no protobuf message object is made: field tags
are constants, the resource's and each scope's bytes are made once, and the
``KeyValue`` bytes of short string attributes are kept for reuse.

A span name that is not a string is written as its ``str()`` (``None`` as
the empty name). Values OpenTelemetry's encoder cannot encode (a string with a lone surrogate,
an integer outside int64) leave their attribute out, as that encoder does;
they are counted (:attr:`WireEncoder.skipped`) and logged once. A value
nested deeper than protobuf parsers read is left out as well, and counted as
dropped. Anything
unusual (other types, nested or mixed sequences, bad keys) is cleaned by
``BoundedAttributes`` itself first, so the result is what the SDK path sends.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from opentelemetry.attributes import BoundedAttributes

from .._fast import FastSpan, Scope, SpanLimits
from ._convert import finish_event
from ._otlp_values import (
    EVENT_ATTRIBUTE,
    RESOURCE_ATTRIBUTE,
    SCOPE_ATTRIBUTE,
    SMALL,
    AttributeEncoder,
    varint,
)
from ._otlp_values import length_delimited as _ld

__all__ = ["EncodedSpan", "WireEncoder", "request_bytes"]

_TIMES = struct.Struct("<BBBQBQ")  # kind (6), start (7) and end (8) of a Span, tags included
_EVENT_TIME = struct.Struct("<BQ")
_IDS = struct.Struct(">HQQHQ")  # trace_id (1) and span_id (2)
_PARENT = struct.Struct(">HQ")  # parent_span_id (4)
_LOW_64 = (1 << 64) - 1
_UNSET_TAIL = {  # an empty status (15) and the flags (16), by whether the parent is remote
    False: b"\x7a\x00\x85\x01\x00\x01\x00\x00",
    True: b"\x7a\x00\x85\x01\x00\x03\x00\x00",
}
_FLAGS = {False: b"\x85\x01\x00\x01\x00\x00", True: b"\x85\x01\x00\x03\x00\x00"}
_LINK_FLAGS = {False: b"\x35\x00\x01\x00\x00", True: b"\x35\x00\x03\x00\x00"}  # field 6
_NAMES = 4096  # span names whose field is kept


class EncodedSpan(NamedTuple):
    """One span's bytes and the resource and scope frames it goes between."""

    resource: tuple[bytes, bytes]
    """``ResourceSpans`` before and after its ``scope_spans``."""
    scope: tuple[bytes, bytes]
    """``ScopeSpans`` before and after its ``spans``."""
    data: bytes
    """The ``spans`` field of ``ScopeSpans``: tag, length, ``Span``."""


_new_encoded = tuple.__new__


def request_bytes(spans: Sequence[EncodedSpan]) -> bytes:
    """An ``ExportTraceServiceRequest``: *spans* grouped by resource, then scope, in order.

    Example:
        >>> request_bytes([])
        b''
    """
    groups: dict[tuple[bytes, bytes], dict[tuple[bytes, bytes], list[bytes]]] = {}
    last_resource: Any = None
    last_scope: Any = None
    last: list[bytes] = []
    for resource, scope, data in spans:
        if resource is not last_resource or scope is not last_scope:
            last = groups.setdefault(resource, {}).setdefault(scope, [])
            last_resource, last_scope = resource, scope
        last.append(data)
    out = []
    for (resource_head, resource_tail), scopes in groups.items():
        parts = [resource_head]
        for (scope_head, scope_tail), datas in scopes.items():
            parts.append(_ld(b"\x12", scope_head + b"".join(datas) + scope_tail))
        parts.append(resource_tail)
        out.append(_ld(b"\x0a", b"".join(parts)))
    return b"".join(out)


class WireEncoder(AttributeEncoder):
    """Encodes ended fast-provider spans as OTLP protobuf, for one resource and limits.

    Args:
        resource: the resource every span carries (anything with ``attributes``
            and, optionally, ``schema_url``; an SDK ``Resource``).
        limits: the span limits to apply.

    Attributes:
        limits: the span limits applied.
        resource: the ``ResourceSpans`` frame every span of this encoder goes in.
        skipped: attribute values left out because they cannot be encoded.

    Example:
        >>> from asynctrace._fast import FastTracerProvider
        >>> provider = FastTracerProvider()
        >>> span = provider.get_tracer("demo").start_span("work", attributes={"items": 3})
        >>> span.end()
        >>> encoded = WireEncoder(None, provider.limits).encode(span)
        >>> len(request_bytes([encoded])) > 60
        True
    """

    def __init__(self, resource: Any, limits: SpanLimits) -> None:
        super().__init__()
        self.limits = limits
        attributes = getattr(resource, "attributes", None) or {}
        encoded = self.encode_mapping(attributes, b"\x0a", RESOURCE_ATTRIBUTE)
        schema_url = getattr(resource, "schema_url", "") or ""
        tail = _ld(b"\x1a", schema_url.encode()) if schema_url else b""
        self.resource = (_ld(b"\x0a", encoded), tail)
        self._names: dict[str, bytes] = {}

    def scope(self, scope: Scope) -> tuple[bytes, bytes]:
        """The ``ScopeSpans`` frame of a tracer's scope (made once, kept on the scope)."""
        found: tuple[bytes, bytes] | None = scope.otlp
        if found is None:
            body = _ld(b"\x0a", scope.name.encode()) if scope.name else b""
            if scope.version:
                body += _ld(b"\x12", scope.version.encode())
            cleaned = BoundedAttributes(attributes=scope.attributes, immutable=True)
            body += self.encode_mapping(cleaned, b"\x1a", SCOPE_ATTRIBUTE)
            tail = _ld(b"\x1a", scope.schema_url.encode()) if scope.schema_url else b""
            found = scope.otlp = (_ld(b"\x0a", body), tail)
        return found

    def encode(self, span: FastSpan) -> EncodedSpan:
        """The bytes of an ended *span*; raises only if its own strings cannot be encoded."""
        limits = self.limits
        trace_id = span._trace_id
        parts = [_IDS.pack(0x0A10, trace_id >> 64, trace_id & _LOW_64, 0x1208, span._span_id)]
        if span._state:
            state = ",".join(f"{key}={value}" for key, value in span._state.items())
            parts.append(_ld(b"\x1a", state.encode()))
        if span._parent_id:
            parts.append(_PARENT.pack(0x2208, span._parent_id))
        text = span._name
        if text.__class__ is not str:  # a name the span helpers did not check: its text
            text = str(text)
        name = self._names.get(text)
        if name is None:
            name = _ld(b"\x2a", text.encode()) if text else b""
            if len(self._names) < _NAMES:
                self._names[text] = name
        parts.append(name)
        parts.append(_TIMES.pack(0x30, span._kind._value_ + 1, 0x39, span._start, 0x41, span._end))
        # A copy (one C call, atomic under the GIL): a set_attribute() that races end() on
        # another thread may or may not be in it, but never changes the dict being read.
        attributes = span._attributes.copy()
        own = span._tracer._limits  # what the span was recorded under
        # Not _counted: a key that is not a non-empty string is dropped (and counted, as the
        # SDK counts it) whatever the limit, so a span below it may have dropped some.
        dropped: int = getattr(span, "_dropped", 0)
        if attributes:
            dropped += self.append_attributes(
                attributes, limits.max_attributes, b"\x4a", parts, limits.max_attribute_length
            )
        if dropped:
            parts.append(b"\x50" + varint(dropped))
        events, links = span._events, getattr(span, "_links", None)
        if events or links or own.max_events == 0 or own.max_links == 0:
            self._events_and_links(span, events, links, parts)
        status = span._status
        if status is None:
            parts.append(_UNSET_TAIL[span._parent_remote])
        else:
            code, description = status.status_code.value, status.description
            body = _ld(b"\x12", description.encode()) if description else b""
            if code:
                body += b"\x18" + SMALL[code]
            parts.append(_ld(b"\x7a", body) + _FLAGS[span._parent_remote])
        body = b"".join(parts)
        scope = span._tracer.scope
        return _new_encoded(
            EncodedSpan,
            (self.resource, scope.otlp or self.scope(scope), b"\x12" + varint(len(body)) + body),
        )

    def _events_and_links(
        self, span: FastSpan, events: Any, links: Any, parts: list[bytes]
    ) -> None:
        limits = self.limits
        length = limits.max_event_attribute_length  # events' and links': the general limit
        own = span._tracer._limits
        dropped = _counted(span, "_dropped_events", events, own.max_events)
        events, more = _bounded(list(events or ()), limits.max_events)
        for event in events:
            finish_event(event)
            body = [_EVENT_TIME.pack(0x09, event.timestamp)]
            event_name = event.name
            if event_name.__class__ is not str:
                event_name = str(event_name)
            if event_name:
                body.append(_ld(b"\x12", event_name.encode()))
            lost = self.append_attributes(
                event.attributes.copy(),
                limits.max_event_attributes,
                b"\x1a",
                body,
                length,
                EVENT_ATTRIBUTE,
            )
            if lost:
                body.append(b"\x20" + varint(lost))
            parts.append(_ld(b"\x5a", b"".join(body)))
        if dropped + more:
            parts.append(b"\x60" + varint(dropped + more))
        dropped = _counted(span, "_dropped_links", links, own.max_links)
        links, more = _bounded(list(links or ()), limits.max_links)
        for link in links:
            context = link.context
            body = [
                b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
                b"\x12\x08" + context.span_id.to_bytes(8, "big"),
            ]
            lost = self.append_attributes(
                link.attributes, limits.max_link_attributes, b"\x22", body, length, EVENT_ATTRIBUTE
            )
            if lost:
                body.append(b"\x28" + varint(lost))
            body.append(_LINK_FLAGS[bool(context.is_remote)])
            parts.append(_ld(b"\x6a", b"".join(body)))
        if dropped + more:
            parts.append(b"\x70" + varint(dropped + more))


def _counted(span: FastSpan, name: str, items: Any, limit: int | None) -> int:
    """The events or links *span* evicted past its *limit* (one below it never evicted any).

    The counters are set only when used, and reading an unset slot is slow.
    """
    if limit is None or len(items or ()) < limit:
        return 0
    return int(getattr(span, name, 0))


def _bounded(items: Sequence[Any], maxlen: int | None) -> tuple[Sequence[Any], int]:
    """The newest *maxlen* of *items* and how many older ones are dropped (``BoundedList``)."""
    if maxlen is None or len(items) <= maxlen:
        return items, 0
    return (items[len(items) - maxlen :] if maxlen else ()), len(items) - maxlen
