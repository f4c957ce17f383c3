"""Work a fast span leaves to the export threads, and the flags that say some may wait.

Two kinds, both done before a span's first export or conversion (and where
its ``attributes`` are read whole): a ``start_span(lazy_attributes=...)``
function (:mod:`._deferred`), and a URL attribute value too long to redact
where it is set. Redacting a URL attribute runs the text rules over it: a
megabyte of query pairs takes a third of a second, which no event loop can
pay. A ``str`` value longer than :data:`LONG_URL` characters set on a span
(at start, by ``set_attribute`` or ``set_attributes``, on an event or a
link) is kept as a :class:`LongUrl` holding it, redacted by :func:`resolve_long_urls` on an
export thread. A ``LongUrl`` an exporter somehow met unresolved is written
as its placeholder text, never as what it holds.
"""

from __future__ import annotations

from typing import Any

from .._url_attributes import redact_url_value

__all__ = [
    "LONG_URL",
    "SEEN",
    "LongUrl",
    "has_long_urls",
    "long_url",
    "redact_long_values",
    "resolve_long_urls",
]

LONG_URL = 4096
"""URL attribute values longer than this many characters are redacted off the hot path."""


class _Seen:
    """Whether any deferred work was ever made in this process, by kind (the export
    threads look for it only then)."""

    __slots__ = ("lazy", "long")

    def __init__(self) -> None:
        self.lazy = False
        self.long = False


SEEN = _Seen()


class LongUrl:
    """A URL attribute's value, too long to redact where it was set: redacted on export."""

    __slots__ = ("key", "raw")

    def __init__(self, key: str, raw: str) -> None:
        self.key = key
        self.raw = raw

    def __str__(self) -> str:
        return "<redaction pending>"  # never the text it holds

    __repr__ = __str__


_LONG_TYPES = frozenset({LongUrl})


def long_url(key: str, value: str) -> LongUrl:
    """*value* of the URL attribute *key*, kept for an export thread to redact."""
    SEEN.long = True
    return LongUrl(key, value)


def has_long_urls(attributes: dict[str, Any]) -> bool:
    """Whether *attributes* holds a :class:`LongUrl` (one pass in C)."""
    return not _LONG_TYPES.isdisjoint(map(type, attributes.values()))


def resolve_long_urls(span: Any) -> None:
    """Redact every :class:`LongUrl` value of *span*'s attributes, and of its events' and
    links', in place.

    No lock: two threads may both redact a value (the same result); a reader
    of a dict meanwhile sees each value either way, never the raw text.
    """
    own = span._attributes
    if own is not None and has_long_urls(own):
        redact_long_values(own)
    # (a live span's list may grow meanwhile; a managed span not entered has none yet)
    for event in tuple(getattr(span, "_events", None) or ()):
        if has_long_urls(event.attributes):
            redact_long_values(event.attributes)
    for link in tuple(getattr(span, "_links", None) or ()):
        attributes = link.attributes
        if attributes.__class__ is dict and has_long_urls(attributes):
            redact_long_values(attributes)


def redact_long_values(attributes: dict[str, Any]) -> dict[str, Any]:
    """*attributes* (changed in place) with every :class:`LongUrl` value redacted now."""
    for key, value in list(attributes.items()):
        if value.__class__ is LongUrl:
            redacted = redact_url_value(key, value.raw)
            if attributes.get(key) is value:  # else set again meanwhile (a live span): kept
                attributes[key] = redacted
    return attributes
