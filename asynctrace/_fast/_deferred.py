"""Spans whose caller hands some attributes as a function, called off the hot path.

``start_span(..., lazy_attributes=fn)`` on the fast provider starts a
:class:`DeferredSpan`: *fn* is kept, not called. :func:`settle` calls it once
and merges what it returns into the span's attributes. It runs on an export
thread, before the span's first export or conversion, or on the thread that
first reads the span's whole attributes (``span.attributes``), whichever comes
first. So an integration whose attributes cost a few microseconds to compute
(an HTTP client's redacted ``url.full``, ``server.address`` and ``server.port``
from the request's URL object) no longer pays them on the event loop.

Merged as set after the span's other attributes: a key the span already holds
(set later, by hand) is kept; URL attributes are redacted as on every span
(unless the span was started with ``urls_redacted=True``, as ``start_span``
keeps them as given then);
past ``max_attributes`` the oldest (but the stamps) are evicted and counted as
dropped, as :meth:`FastSpan.set_attribute` evicts. A function that raises is
logged once; its span is exported without what it would have added.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from .._secret_words import _EXTRA_WORDS
from .._url_attributes import URL_ATTRIBUTES
from ._pending import LOCK, SEEN, has_long_urls, resolve_long_urls
from ._span import (
    _COUNTS,
    SPAN_TYPES,
    FastSpan,
    _copy_attributes,
    _evict_past,
    good_keys,
)

__all__ = [
    "SEEN",
    "DeferredSpan",
    "LazyAttributes",
    "report_failure",
    "settle",
    "settle_batch",
    "settle_one",
]

logger = logging.getLogger("asynctrace")

LazyAttributes = Callable[[], Mapping[str, Any]]
"""What ``start_span(lazy_attributes=...)`` takes: called once, with no arguments."""

_warned = False


class DeferredSpan(FastSpan):
    """A :class:`FastSpan` holding a function of further attributes until :func:`settle`."""

    __slots__ = ("_lazy", "_urls_redacted")
    _lazy: LazyAttributes | None
    _urls_redacted: bool  # start_span(urls_redacted=True): its URL attributes are as given

    @property
    def attributes(self) -> Mapping[str, Any]:
        """The attributes as recorded (read-only), the deferred ones merged first."""
        settle_one(self)
        return MappingProxyType(self._attributes)

    def __repr__(self) -> str:
        return super().__repr__().replace("<FastSpan", "<DeferredSpan", 1)


SPAN_TYPES.add(DeferredSpan)


def settle(span: DeferredSpan) -> None:
    """Call *span*'s function, if it has not been called, and merge its attributes.

    Returns once the attributes are merged, on whichever thread called it first.
    """
    with LOCK:
        lazy = span._lazy
        if lazy is None:
            return
        try:
            values = lazy()
            if values:
                values, bad = good_keys(values)
                copied = _copy_attributes(values)  # private copies; URL attributes redacted
                if span._urls_redacted and not _EXTRA_WORDS:  # as start_span keeps them
                    for key in URL_ATTRIBUTES.intersection(values):
                        if values[key].__class__ is str:
                            copied[key] = values[key]
                own = span._attributes
                for key, value in copied.items():
                    if key not in own:  # one set by hand meanwhile is the newer
                        own[key] = value
                limit = span._tracer._limits.max_attributes
                if limit is not None and len(own) > limit:
                    _evict_past(span, own, limit)
                if bad:
                    with _COUNTS:
                        span._dropped = getattr(span, "_dropped", 0) + bad
        except Exception as exc:
            report_failure(repr(span._name), exc)
        finally:
            if SEEN.long:  # (a value set by hand, or returned)
                resolve_long_urls(span)
            span._lazy = None  # after the merge: a reader that sees None sees it done


def report_failure(where: str, exc: Exception) -> None:
    """A ``lazy_attributes`` function raised: logged once, nothing more (it adds nothing)."""
    global _warned
    if not _warned:
        _warned = True
        logger.warning(
            "asynctrace: a lazy_attributes function raised (span %s); the span is recorded "
            "without what it would have added (further failures are not logged)",
            where,
            exc_info=exc,
        )


def settle_batch(batch: list[Any]) -> None:
    """:func:`settle_one` each item of *batch* (an export queue's, not all of them spans)."""
    for item in batch:
        settle_one(item)


def settle_one(item: Any) -> None:
    """Do the work *item* (a span of any provider, or not a span) left to export time."""
    cls = item.__class__
    if cls is DeferredSpan:
        if item._lazy is not None:
            settle(item)
            return
    elif cls not in SPAN_TYPES:
        return
    if SEEN.long and has_long_urls(item._attributes):
        resolve_long_urls(item)
