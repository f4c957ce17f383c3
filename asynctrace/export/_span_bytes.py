"""About how many bytes a span takes encoded as OTLP: the retry buffer's byte bound.

Strings, bytes, arrays and maps are counted by their contents, anything
else by its size in memory, so that the bound holds whatever a value is.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["estimate_bytes"]

_SCALARS = frozenset({int, float, bool, type(None)})  # encoded in at most about 10 bytes
_MAX_DEPTH = 8  # nested arrays and maps counted item by item down to here, then as a whole


def _value_bytes(value: Any, depth: int = 0) -> int:
    """About the encoded bytes of an attribute value: every byte of a large one counted.

    Strings, bytes, arrays and maps (``kvlist``) by their contents, to
    :data:`_MAX_DEPTH` levels; deeper, and anything else, by its size in
    memory, so that the retry buffer's byte bound holds whatever the value.
    """
    kind = value.__class__
    if kind is str:
        return len(value) + 4
    if kind in _SCALARS:
        return 10
    if (kind is tuple or kind is list) and depth < _MAX_DEPTH:
        return 4 + sum(_value_bytes(item, depth + 1) for item in value)
    return _other_bytes(value, depth)


def _other_bytes(value: Any, depth: int) -> int:
    if isinstance(value, str):
        return len(value) + 4
    if isinstance(value, (bytes, bytearray)):
        return len(value) + 4
    if isinstance(value, memoryview):
        return value.nbytes + 4
    if depth < _MAX_DEPTH:
        if isinstance(value, (tuple, list)):
            return 4 + sum(_value_bytes(item, depth + 1) for item in value)
        if isinstance(value, Mapping):
            return 4 + sum(
                _value_bytes(key, depth + 1) + _value_bytes(item, depth + 1) + 4
                for key, item in value.items()
            )
    try:
        return max(10, sys.getsizeof(value))  # deep: its own size in memory, at least
    except Exception:  # a __sizeof__ that raises
        return 10


def estimate_bytes(span: Any) -> int:
    """About how many bytes *span* takes encoded as OTLP protobuf (an SDK ``ReadableSpan``).

    Example:
        >>> from opentelemetry.sdk.trace import ReadableSpan
        >>> estimate_bytes(ReadableSpan("step", attributes={"rl.iteration": 3})) > 60
        True
    """
    name = span.name
    size = 60 + (len(name) if isinstance(name, str) else 10)
    size += _trace_state_bytes(span.context)
    description = getattr(span.status, "description", None)
    if isinstance(description, str):
        size += len(description) + 4
    size += _attributes_bytes(span.attributes)
    for event in span.events or ():
        size += 24 + len(event.name) + _attributes_bytes(event.attributes)
    for link in span.links or ():
        size += 40 + _trace_state_bytes(link.context) + _attributes_bytes(link.attributes)
    return size


def _attributes_bytes(attributes: Any) -> int:
    return sum(len(key) + 4 + _value_bytes(value) for key, value in (attributes or {}).items())


def _trace_state_bytes(context: Any) -> int:
    """The ``trace_state`` field: ``key=value`` pairs joined by commas."""
    trace_state = getattr(context, "trace_state", None)
    if not trace_state:
        return 0
    return 4 + sum(len(key) + len(value) + 2 for key, value in trace_state.items())
