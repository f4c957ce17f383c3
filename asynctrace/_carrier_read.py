"""Incoming carriers read as the W3C Trace Context spec says.

``traceparent`` (version 00 exactly; a later version by its first four
fields), ``tracestate`` (discarded whole past 32 members or 8,192
characters, or when a member is malformed), and the three headers' values
found in a plain or multi-value mapping, or anything with ``get``, whatever
the names' case. What cannot be read is counted, never raised.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import trace

from ._carrier_stats import _count as count_refusal
from ._carriers import BAGGAGE, PLAIN_CONTEXT, TRACEPARENT, TRACESTATE

__all__ = ["parse_traceparent", "parse_tracestate", "read_carrier"]

# A version-00 traceparent is 55 characters; later versions may append fields.
_MAX_TRACEPARENT: Final = 512
# The combined tracestate OpenTelemetry's propagator reads (longer ones are discarded).
_MAX_TRACESTATE: Final = 8192
_KEY = r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER: Final = re.compile(rf"({_KEY})=({_VALUE})")
# OpenTelemetry's pattern, less the optional whitespace around it, which is stripped first:
# a future version's "-..." and a trailing blank run could otherwise split a long run of
# blanks two ways, and backtrack quadratically over it.
_TRACEPARENT: Final = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\r\n]*)?"
)
# Read, version 00: the sampled flag, plus the random flag of Trace Context Level 2 (which
# a Level 1 reader ignores); every other bit is reserved and is not kept. A later
# version: the sampled flag only, which is all the spec lets a reader of 00 parse.
_FLAGS_00: Final = 0x03
_FLAGS_LATER: Final = 0x01
_FLAGS: Final = tuple(trace.TraceFlags(i) for i in range(4))
_NAMES: Final = {TRACEPARENT: 0, TRACESTATE: 1, BAGGAGE: 2}
_HEADER_NAMES: Final = (TRACEPARENT, TRACESTATE, BAGGAGE)
_BYTE_NAMES: Final = frozenset(name.encode() for name in _HEADER_NAMES)
# The common value (version 00, flags 00 to 0f, nothing around it), matched
# without groups: parse_traceparent's quick path.
_TRACEPARENT_00: Final = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-9a-f]")
_FLAGS_00_BY_HEX: Final = {f"0{d:x}": _FLAGS[d & _FLAGS_00] for d in range(16)}
_new_tuple: Final = tuple.__new__
_NO_STATE: Final = trace.DEFAULT_TRACE_STATE


def parse_traceparent(value: str) -> trace.SpanContext | None:
    """The remote span context of one ``traceparent`` value; ``None`` if it is not valid.

    W3C Trace Context Level 1: lower-case hex only; version ``ff``, all-zero
    ids and a version-00 value with anything after its flags are invalid; a
    later version is read for its first four fields, which must end the value
    or be followed by ``-``. Leading and trailing spaces and tabs are allowed.
    """
    if len(value) == 55 and PLAIN_CONTEXT and _TRACEPARENT_00.fullmatch(value) is not None:
        trace_id, span_id = int(value[3:35], 16), int(value[36:52], 16)
        if not trace_id or not span_id:
            return None
        # SpanContext(trace_id, span_id, True, flags) without its checks, which the
        # match and the test above have made (PLAIN_CONTEXT: its tuple layout is known).
        flags_00 = _FLAGS_00_BY_HEX[value[53:]]
        return _new_tuple(trace.SpanContext, (trace_id, span_id, True, flags_00, _NO_STATE, True))
    if len(value) > _MAX_TRACEPARENT:
        return None
    match = _TRACEPARENT.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    flags = int(flags_hex, 16) & (_FLAGS_00 if version == "00" else _FLAGS_LATER)
    return trace.SpanContext(trace_id, span_id, True, _FLAGS[flags])


def parse_tracestate(values: list[str]) -> trace.TraceState | None:
    """The ``tracestate`` of one or more header values, combined in order; ``None`` to discard.

    Empty members (and empty headers) are skipped, spaces and tabs around
    members allowed. The whole tracestate is discarded when a member is not
    W3C syntax, a key repeats, there are more than 32 members, or the
    combined value is over 8,192 characters (OpenTelemetry's limit).
    """
    if len(values) > 1 and sum(map(len, values)) + len(values) - 1 > _MAX_TRACESTATE:
        return None
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for header in values:
        if len(header) > _MAX_TRACESTATE:
            return None
        for raw in header.split(","):
            member = raw.strip(" \t")
            if not member:
                continue
            match = _MEMBER.fullmatch(member)
            if match is None:
                return None
            key = match.group(1)
            if key in seen or len(pairs) == 32:
                return None
            seen.add(key)
            pairs.append((key, match.group(2)))
    return trace.TraceState(pairs) if pairs else None


def read_carrier(carrier: object) -> tuple[list[str], list[str], list[str]] | None:
    """The ``traceparent``, ``tracestate`` and ``baggage`` values of *carrier*, in order.

    Header names are matched case-insensitively and every value is kept, so a
    repeated header is seen as repeated: a plain mapping (keys differing in
    case count as repeats), a multi-value mapping (``getall``, ``get_all`` or
    ``getlist``), or anything with ``get``. Only ``str`` values (subclasses
    included, read as plain ``str``) are read; any other value of one of the
    three headers but ``None`` is counted (``carrier_values_not_str``), and so
    is a ``bytes`` key naming one of them (``carrier_not_read``). ``None``
    for what is not a carrier, counted (``carrier_not_read``) unless it is
    ``None``: text, bytes, a list of pairs, an object without ``get``.
    """
    if carrier is None:
        return None
    if isinstance(carrier, (str, bytes, bytearray)):
        count_refusal("carrier_not_read")
        return None
    found: tuple[list[str], list[str], list[str]] = ([], [], [])
    if type(carrier) is dict or (
        isinstance(carrier, Mapping)
        and not hasattr(carrier, "getall")
        and not hasattr(carrier, "getlist")
    ):
        for key, value in carrier.items():
            if key.__class__ is str or isinstance(key, str):
                if 7 <= len(key) <= 11:
                    index = _NAMES.get(key)
                    if index is None:
                        index = _NAMES.get(key.lower())
                    if index is not None:
                        if value.__class__ is str:
                            found[index].append(value)
                        else:
                            _other_value(found[index], value)
            elif isinstance(key, (bytes, bytearray)) and bytes(key).lower() in _BYTE_NAMES:
                count_refusal("carrier_not_read")  # ASGI's raw header names, say: not read
        return found
    many: Callable[[str], Any] | None = None
    for method in ("getall", "get_all"):  # multidict, email.message.Message: (name, default)
        bound = getattr(carrier, method, None)
        if callable(bound):
            many = functools.partial(bound, default=None) if method == "getall" else bound
            break
    else:
        getlist = getattr(carrier, "getlist", None)  # starlette's Headers
        if callable(getlist):
            many = getlist
    if many is not None:
        for index, name in enumerate(_HEADER_NAMES):
            for value in many(name) or ():
                if value.__class__ is str:
                    found[index].append(value)
                else:
                    _other_value(found[index], value)
        return found
    getter = getattr(carrier, "get", None)
    if not callable(getter):
        count_refusal("carrier_not_read")  # a list of (name, value) pairs, say
        return None
    for index, name in enumerate(_HEADER_NAMES):
        value = getter(name)
        if value.__class__ is str:
            found[index].append(value)
        else:
            _other_value(found[index], value)
    return found


def _other_value(values: list[str], value: object) -> None:
    """Append a ``str`` subclass's text to *values*, as a plain ``str`` (its methods are
    not called); count any other value (bytes, say) and leave it out. ``None`` is what a
    ``get`` gives for a header that is not there: not counted."""
    if isinstance(value, str):
        values.append(str.__str__(value))
    elif value is not None:
        count_refusal("carrier_values_not_str")
