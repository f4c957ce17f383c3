"""Protocol-buffer wire primitives and OTLP attributes, written as OpenTelemetry writes them.

The pieces :mod:`._otlp_wire` builds spans from: varints, length-delimited
fields, OTLP's ``AnyValue`` and ``KeyValue``, and :class:`AttributeEncoder`,
which encodes an attribute mapping with the SDK's rules (``BoundedAttributes``:
count limit keeping the newest, string length limit, value cleaning) and
OpenTelemetry's encoder's handling of what it cannot encode (the attribute
is left out).

A value nested deeper than protobuf parsers read (:data:`MAX_DEPTH` message
levels in the request) is left out too, and counted as dropped: written, it
would make the whole request unreadable to the collector.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from .._fast._evict import STAMP_KEYS
from ._convert import bounded, uncut_stamps

__all__ = [
    "EVENT_ATTRIBUTE",
    "MAX_DEPTH",
    "RESOURCE_ATTRIBUTE",
    "SCOPE_ATTRIBUTE",
    "SMALL",
    "SPAN_ATTRIBUTE",
    "AttributeEncoder",
    "TooDeep",
    "any_value",
    "key_value",
    "length_delimited",
    "varint",
]

logger = logging.getLogger("asynctrace")

SMALL = [bytes((n,)) for n in range(128)]
"""The one-byte varints, 0 to 127."""

_DOUBLE = struct.Struct("<Bd")
_PLAIN = frozenset({str, bool, int, float})
_CACHED_LENGTH = 128  # string values up to this long have their KeyValue bytes kept
_CACHE_ENTRIES = 4096  # per cache; past it, new entries are not kept

MAX_DEPTH = 101
"""The deepest message level a request may hold, the request itself being level 1.

Protobuf parsers refuse more than 100 levels of nesting below the message they
parse (protobuf's default recursion limit; the Python runtime's, C++'s and
Java's): one value past it makes the whole ``ExportTraceServiceRequest``
unreadable. Each mapping in a value adds three levels (``KeyValueList``,
``KeyValue``, ``AnyValue``), each sequence two (``ArrayValue``, ``AnyValue``).
"""

# The level of an attribute's ``KeyValue`` in an ``ExportTraceServiceRequest`` (1).
RESOURCE_ATTRIBUTE = 4  # ResourceSpans (2), Resource (3)
SCOPE_ATTRIBUTE = 5  # ResourceSpans (2), ScopeSpans (3), InstrumentationScope (4)
SPAN_ATTRIBUTE = 5  # ResourceSpans (2), ScopeSpans (3), Span (4)
EVENT_ATTRIBUTE = 6  # ... Span (4), Event or Link (5)


class TooDeep(ValueError):
    """A value nested deeper than :data:`MAX_DEPTH` allows where it is written."""


def varint(n: int) -> bytes:
    """*n* (``>= 0``) as a base-128 varint.

    Example:
        >>> varint(300)
        b'\\xac\\x02'
    """
    if n < 128:
        return SMALL[n]
    out = bytearray()
    while n > 127:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: *tag*, the length of *body*, *body*.

    Example:
        >>> length_delimited(b"\\x0a", b"abc")
        b'\\n\\x03abc'
    """
    return tag + varint(len(body)) + body


_ld = length_delimited


def _int64(value: int) -> bytes:
    if value < 0:
        if value < -(1 << 63):
            raise ValueError(f"Value out of range: {value}")
        value += 1 << 64
    elif value >= 1 << 63:
        raise ValueError(f"Value out of range: {value}")
    return varint(value)


def _plain(value: Any, limit: int | None) -> bytes:
    """The ``AnyValue`` body of a str (cut to *limit*), bool, int or float (those classes)."""
    cls = value.__class__
    if cls is str:
        if limit is not None and len(value) > limit:
            value = value[:limit]
        return _ld(b"\x0a", value.encode())
    if cls is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if cls is int:
        return b"\x18" + _int64(value)
    return _DOUBLE.pack(0x21, value)


def any_value(value: Any, depth: int = SPAN_ATTRIBUTE + 1) -> bytes:
    """The ``AnyValue`` body of a cleaned value, as OpenTelemetry's ``_encode_value`` makes it.

    *depth* is the level of the ``AnyValue`` message in the request.

    Raises:
        TooDeep: a message of the value would be deeper than :data:`MAX_DEPTH`
            (a self-referential list included).
        ValueError: a string with a lone surrogate, an integer outside int64.
        TypeError: a type OpenTelemetry's encoder refuses too.

    Example:
        >>> any_value(True), any_value(None)
        (b'\\x10\\x01', b'')
    """
    if depth > MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH - 1} protobuf levels")
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _ld(b"\x0a", value.encode())
    if isinstance(value, int):
        return b"\x18" + _int64(value)
    if isinstance(value, float):
        return _DOUBLE.pack(0x21, value)
    if isinstance(value, bytes):
        return _ld(b"\x3a", value)
    if isinstance(value, (Sequence, Mapping)) and depth >= MAX_DEPTH:  # its container too deep
        raise TooDeep(f"nested deeper than {MAX_DEPTH - 1} protobuf levels")
    if isinstance(value, Sequence):
        depth += 2  # ArrayValue, then each item's AnyValue
        return _ld(b"\x2a", b"".join(_ld(b"\x0a", any_value(item, depth)) for item in value))
    if isinstance(value, Mapping):
        depth += 2  # KeyValueList, then each KeyValue
        pairs = (_ld(b"\x0a", key_value(str(k), v, depth)) for k, v in value.items())
        return _ld(b"\x32", b"".join(pairs))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def key_value(key: str, value: Any, depth: int = SPAN_ATTRIBUTE) -> bytes:
    """A ``KeyValue`` message body; *depth* is its level in the request (see :func:`any_value`).

    Example:
        >>> key_value("n", 1)
        b'\\n\\x01n\\x12\\x02\\x18\\x01'
    """
    # Too deep: any_value raises TooDeep. An empty key is not written.
    head = _ld(b"\x0a", key.encode()) if key else b""
    return head + _ld(b"\x12", any_value(value, depth + 1))


class _Unusual(Exception):
    """Not a plain attribute: clean the whole mapping with ``BoundedAttributes``."""


class AttributeEncoder:
    """Encodes attribute mappings as ``KeyValue`` fields; keeps the bytes of common ones.

    Plain values (str, bool, int, float, and tuples of one of them) are
    encoded directly; a mapping holding anything else, or more than its count
    limit, is cleaned by ``BoundedAttributes`` first (a value it cannot clean,
    such as one whose ``str()`` raises, is left out alone and counted as
    dropped). A value that cannot be encoded is left out, counted in
    :attr:`skipped` and logged once; one nested too deeply (:class:`TooDeep`)
    is counted as dropped too.

    Example:
        >>> parts = []
        >>> AttributeEncoder().append_attributes({"n": 1}, None, b"\\x4a", parts, None)
        0
        >>> parts
        [b'J\\x07\\n\\x01n\\x12\\x02\\x18\\x01']
    """

    def __init__(self) -> None:
        self.skipped = 0
        """Attribute values left out because they cannot be encoded."""
        self._keys: dict[str, bytes] = {}
        self._strings: dict[tuple[str, str], bytes] = {}

    def append_attributes(
        self,
        attributes: Mapping[str, Any],
        maxlen: int | None,
        tag: bytes,
        parts: list[bytes],
        limit: int | None,
        depth: int = SPAN_ATTRIBUTE,
    ) -> int:
        """Append the fields (*tag*) of *attributes* to *parts*; how many were dropped.

        *maxlen* is the count limit and *limit* the string length limit
        (``None``: none); *depth* is the level of each ``KeyValue`` in the
        request (:data:`SPAN_ATTRIBUTE`, :data:`EVENT_ATTRIBUTE`).
        """
        if not attributes:
            return 0
        if maxlen is not None and len(attributes) > maxlen:
            return self._cleaned(attributes, maxlen, tag, parts, limit, depth)
        keys, strings = self._keys, self._strings
        start, skipped = len(parts), self.skipped
        for key, value in attributes.items():
            cls = value.__class__
            try:
                if cls is str and len(value) <= _CACHED_LENGTH:
                    pair = strings.get((key, value))
                    if pair is None:
                        pair = self._pair(key, value, limit, keys)
                        if len(strings) < _CACHE_ENTRIES:
                            strings[key, value] = pair
                elif cls in _PLAIN or (
                    cls is tuple and value and {item.__class__ for item in value} <= _PLAIN
                ):
                    pair = self._pair(key, value, limit, keys)
                else:
                    raise _Unusual
            except _Unusual:
                del parts[start:]
                self.skipped = skipped
                return self._cleaned(attributes, maxlen, tag, parts, limit, depth)
            except ValueError as exc:  # a lone surrogate, an int outside int64
                self._skip(key, exc)
                continue
            parts.append(tag + pair)
        return 0

    def encode_mapping(
        self, attributes: Mapping[str, Any], tag: bytes, depth: int = SPAN_ATTRIBUTE
    ) -> bytes:
        """The fields (*tag*) of cleaned *attributes*, as OpenTelemetry's encoder writes them.

        *depth* is the level of each ``KeyValue`` in the request.
        """
        return self._encoded(attributes, tag, depth)[0]

    def _encoded(self, attributes: Mapping[str, Any], tag: bytes, depth: int) -> tuple[bytes, int]:
        """:meth:`encode_mapping` and how many values it left out as too deep."""
        out = []
        deep = 0
        for key, value in attributes.items():
            try:
                out.append(_ld(tag, key_value(key, value, depth)))
            except TooDeep as exc:  # written, it would make the request unreadable
                deep += 1
                self._skip(key, exc)
            except Exception as exc:  # what OpenTelemetry's encoder leaves out
                self._skip(key, exc)
        return b"".join(out), deep

    def _pair(self, key: str, value: Any, limit: int | None, keys: dict[str, bytes]) -> bytes:
        """A ``KeyValue``'s length and bytes; *value* is plain or a tuple of one plain class."""
        if limit is not None and key in STAMP_KEYS:
            limit = None  # asynctrace's stamps are never cut: goodput reads them
        head = keys.get(key)
        if head is None:
            if key.__class__ is not str or not key:
                raise _Unusual
            head = _ld(b"\x0a", key.encode())
            if len(keys) < _CACHE_ENTRIES:
                keys[key] = head
        if value.__class__ is tuple:
            if len({item.__class__ for item in value}) > 1:
                raise _Unusual
            body = _ld(b"\x2a", b"".join(_ld(b"\x0a", _plain(item, limit)) for item in value))
        else:
            body = _plain(value, limit)
        pair = head + _ld(b"\x12", body)
        return varint(len(pair)) + pair

    def _cleaned(
        self,
        attributes: Mapping[str, Any],
        maxlen: int | None,
        tag: bytes,
        parts: list[bytes],
        limit: int | None,
        depth: int,
    ) -> int:
        """Clean with ``BoundedAttributes`` (the SDK's rules), then encode what it keeps.

        A value it cannot clean (a ``str()`` that raises, a list that holds
        itself) is left out alone and counted, as on the way to SDK spans.
        """
        cleaned = bounded(maxlen, attributes, limit)
        if limit is not None:  # the stamps whole again (BoundedAttributes cut them too)
            uncut_stamps(cleaned, attributes)
        data, deep = self._encoded(cleaned, tag, depth)
        parts.append(data)
        return cleaned.dropped + deep

    def _skip(self, key: str, exc: Exception) -> None:
        self.skipped += 1
        if self.skipped == 1:
            logger.warning(
                "asynctrace: the otlp exporter leaves out attribute %r, whose value cannot be "
                "encoded (%s); further ones are counted, not logged",
                key,
                exc,
            )
