"""Outgoing carriers: the current span's W3C ``traceparent`` and ``tracestate``.

With ``propagate_scopes`` on, ``baggage`` too (the scopes and the context's
baggage). The last carrier made is kept with what it was made of: a task's
requests under one parent send the same dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context

from ._baggage_out import encode
from ._errors import report_internal_error
from ._fast._span import SPAN_TYPES
from ._scopes import SCOPES
from ._state import GATE

__all__ = [
    "BAGGAGE",
    "CARRIER_KWARG",
    "ENV_BAGGAGE",
    "ENV_TRACEPARENT",
    "ENV_TRACESTATE",
    "LENS_CARRIER_KWARG",
    "PLAIN_CONTEXT",
    "TRACEPARENT",
    "TRACESTATE",
    "current_trace_carrier",
    "span_carrier",
]

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
BAGGAGE: Final = "baggage"
ENV_TRACEPARENT: Final = "TRACEPARENT"
ENV_TRACESTATE: Final = "TRACESTATE"
ENV_BAGGAGE: Final = "BAGGAGE"
CARRIER_KWARG: Final = "trace_carrier"
# nemo-lens's keyword (``traced_remote_call`` / ``ray_dispatch_with_context``),
# accepted too so that old and new actors interoperate during a migration.
LENS_CARRIER_KWARG: Final = "_otel_carrier"
_CARRIER_KWARGS: Final = (CARRIER_KWARG, LENS_CARRIER_KWARG)
_get_current = otel_context.get_current
_NO_SCOPES: Final = object()  # the scope key of a carrier made with propagate_scopes off
# The last carrier made and what it was made of: the OpenTelemetry context and the
# scope state, both immutable (a span made current, baggage set or a scope entered
# installs a new object), or _NO_SCOPES. A task's calls one after another under
# one parent (its HTTP requests, its Ray calls) all send the same carrier.
_last: tuple[object, object, dict[str, str]] = (object(), _NO_SCOPES, {})


def current_trace_carrier() -> dict[str, str]:
    """The current span context as a W3C carrier (``traceparent``/``tracestate``).

    No ``traceparent`` when there is no valid span context (nothing recording
    and no remote parent attached), so passing it on is always safe. With
    ``propagate_scopes`` on, a ``baggage`` entry carries the iteration,
    per-prompt, task and session scopes (under ``asynctrace.``) and the
    caller's own OpenTelemetry baggage, when there is any of either, with a
    span or without one (a per-prompt scope gates the far side's spans even
    when nothing records here); with it off, or with neither scopes nor
    baggage, the dict is empty when there is no span. Each call returns a
    new dict.

    Example:
        >>> current_trace_carrier()
        {}
    """
    global _last
    try:
        ctx = _get_current()
        scopes = SCOPES.get() if GATE.propagate_scopes else _NO_SCOPES
        last_ctx, last_scopes, carrier = _last
        if last_ctx is ctx and last_scopes is scopes:
            return carrier.copy()
        carrier = _span_fields(trace.get_current_span(ctx))
        if scopes is not _NO_SCOPES:
            value = _baggage_value(ctx)
            if value:
                carrier[BAGGAGE] = value
        _last = (ctx, scopes, carrier)
        return carrier.copy()
    except Exception as exc:
        report_internal_error(("current_trace_carrier",), exc)
        return {}


# Sent: the sampled flag only. Level 1 (which carriers follow) has no other flag, and a
# vendor must set the bits it does not define to zero.
_FLAGS_SENT: Final = 0x01


def _baggage_value(ctx: otel_context.Context) -> str:
    """The ``baggage`` value for *ctx*; ``""`` should making it fail (the carrier keeps
    its ``traceparent``: baggage the far side misses costs less than its parent)."""
    try:
        return encode(baggage.get_all(ctx))
    except Exception as exc:
        report_internal_error(("current_trace_carrier", "baggage"), exc)
        return ""


_HEX_BYTE: Final = tuple(f"{i:02x}" for i in range(256))
# The last trace id formatted, and its hex: requests of one step share a trace,
# so the carrier of each formats only its own span id. (A tuple swapped whole:
# threads see either the old pair or the new one.)
_last_trace: list[tuple[int, str]] = [(0, "")]


def _baggage_key() -> Any:
    """OpenTelemetry's context key for baggage, if it is where ``get_all`` reads it.

    ``baggage.set_baggage`` copies the whole baggage for every entry it adds, so
    a carrier's 180 entries, set one by one, copy 16,000 entries; with the key,
    they are set in one step. ``None`` (checked once, here) keeps the public calls.
    """
    key = getattr(baggage, "_BAGGAGE_KEY", None)
    if key is None:
        return None
    try:
        probe = otel_context.set_value(key, {"k": "v"}, otel_context.Context())
        return key if dict(baggage.get_all(probe)) == {"k": "v"} else None
    except Exception:
        return None


_BAGGAGE: Final = _baggage_key()


def _with_baggage(entries: Mapping[str, str], ctx: otel_context.Context) -> otel_context.Context:
    """*ctx* with *entries* added to its baggage, as ``set_baggage`` for each would add them."""
    if _BAGGAGE is None:
        for key, value in entries.items():
            ctx = baggage.set_baggage(key, value, ctx)
        return ctx
    merged = dict(baggage.get_all(ctx))
    merged.update(entries)
    return otel_context.set_value(_BAGGAGE, merged, ctx)


def _context_is_a_plain_tuple() -> bool:
    """Whether ``SpanContext`` is ``(trace_id, span_id, is_remote, flags, state, is_valid)``.

    Its properties cost a Python call each; unpacking the tuple is one C
    operation. Checked once, here; the properties are used if the layout ever
    differs.
    """
    state = trace.TraceState([("k", "v")])
    probe = trace.SpanContext(0xA, 0xB, True, trace.TraceFlags(1), state)
    return isinstance(probe, tuple) and tuple(probe) == (0xA, 0xB, True, 1, state, True)


PLAIN_CONTEXT: Final = _context_is_a_plain_tuple()


def span_carrier(span: trace.Span) -> dict[str, str]:
    """The W3C carrier that names *span* as the parent; ``{}`` if its context is invalid.

    For integrations that start a span without making it current (an HTTP
    client's request hook) and must send it as the parent. With
    ``propagate_scopes`` on, the current scopes travel in ``baggage`` too,
    as with :func:`current_trace_carrier`.

    Example:
        >>> span_carrier(trace.INVALID_SPAN)
        {}
    """
    carrier = _span_fields(span)
    if carrier and GATE.propagate_scopes:
        value = current_trace_carrier().get(BAGGAGE)  # the current scopes and baggage
        if value:
            carrier[BAGGAGE] = value
    return carrier


def _span_fields(span: trace.Span) -> dict[str, str]:
    """``traceparent``/``tracestate`` naming *span*; ``{}`` if its context is invalid."""
    if span.__class__ in SPAN_TYPES:  # a fast-provider span: its fields, no SpanContext made
        try:
            trace_id, span_id = span._trace_id, span._span_id  # type: ignore[attr-defined]
            flags, state = span._flags & _FLAGS_SENT, span._state  # type: ignore[attr-defined]
        except AttributeError:  # a managed_span() object not entered, or not sampled
            other = getattr(span, "_other", None)
            return {} if other is None else _span_fields(other)
        valid = True
    else:
        get_context = getattr(span, "get_span_context", None)
        if get_context is None:  # not a span (a context manager handed in by mistake)
            return {}
        ctx = get_context()
        if PLAIN_CONTEXT and ctx.__class__ is trace.SpanContext:
            trace_id, span_id, _, flags, state, valid = ctx
        else:
            if not ctx.is_valid:
                return {}
            trace_id, span_id, flags = ctx.trace_id, ctx.span_id, ctx.trace_flags
            state, valid = ctx.trace_state, True
        flags &= _FLAGS_SENT
    if not valid:
        return {}
    try:  # int.to_bytes().hex(): about twice as fast as a format spec, on every request
        last = _last_trace[0]
        if last[0] == trace_id:
            trace_hex = last[1]
        else:
            trace_hex = trace_id.to_bytes(16, "big").hex()
            _last_trace[0] = (trace_id, trace_hex)
        parent = f"{trace_hex}-{span_id.to_bytes(8, 'big').hex()}"
        flags_hex = _HEX_BYTE[flags]
    except (AttributeError, OverflowError, TypeError, IndexError):  # not a plain W3C value
        parent, flags_hex = f"{trace_id:032x}-{span_id:016x}", f"{flags:02x}"
    carrier = {TRACEPARENT: f"00-{parent}-{flags_hex}"}
    if state:
        carrier[TRACESTATE] = state.to_header()
    return carrier
