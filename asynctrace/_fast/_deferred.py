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
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from .._forksafe import reinit_at_fork
from .._secret_words import _EXTRA_WORDS
from ._evict import STAMP_KEYS, keep_stamps
from ._pending import SEEN, resolve_long_urls
from ._span import _COUNTS, SPAN_TYPES, FastSpan, _copy_attributes, good_keys

__all__ = [
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
_warned_slow = False
WAIT_S = 1.0
"""How long a thread waits for another that is running the same span's function."""
_EVENTS = threading.Lock()  # makes a span's wake-up event, for the threads that wait
reinit_at_fork(_EVENTS)


class DeferredSpan(FastSpan):
    """A :class:`FastSpan` holding a function of further attributes until :func:`settle`.

    ``_claim`` is a one-item list: the thread that pops it runs the function
    (``list.pop`` is atomic); ``_settler`` is that thread, ``_done`` an event
    made by a thread that waits for it.
    """

    __slots__ = ("_claim", "_done", "_lazy", "_settler", "_urls_redacted")
    _lazy: LazyAttributes | None
    _urls_redacted: bool  # start_span(urls_redacted=True): its URL attributes are as given
    _claim: list[bool]
    _settler: int
    _done: threading.Event | None

    @property
    def attributes(self) -> Mapping[str, Any]:
        """The attributes as recorded (read-only), the deferred ones merged first."""
        settle_one(self)
        return MappingProxyType(self._attributes)

    def __repr__(self) -> str:
        return super().__repr__().replace("<FastSpan", "<DeferredSpan", 1)


SPAN_TYPES.add(DeferredSpan)


def settle(span: DeferredSpan) -> None:
    """Call *span*'s function, if no thread has, and merge what it returns.

    Returns once the attributes are merged. A thread that finds another
    running the function waits for it (at most :data:`WAIT_S`, then reads the
    span as it is); the thread running it (the function reading its own span,
    or a signal handler interrupting it) does not wait. Other spans never wait.
    """
    for _ in range(2):  # a second try: the function was interrupted and given back
        if span._lazy is None:
            return
        try:
            span._claim.pop()
        except IndexError:  # taken: wait for the thread that runs it
            if not _wait(span):
                return
            continue
        span._settler = threading.get_ident()
        if _run(span):
            return


def _run(span: DeferredSpan) -> bool:
    """Run the claimed function and merge; ``False`` if it was given back (interrupted)."""
    lazy = span._lazy
    done = True
    try:
        values = lazy() if lazy is not None else None
        if values:
            _merge(span, values)
    except (KeyboardInterrupt, SystemExit):
        if threading.current_thread() is threading.main_thread():
            done = False  # Ctrl-C or sys.exit where a hook read the span: another thread
            span._claim.append(True)  # (an export thread) settles it later
            raise
        report_failure(repr(span._name), None)
    except BaseException as exc:  # never the export thread's end (CancelledError, say)
        report_failure(repr(span._name), exc)
    finally:
        if done:
            if SEEN.long:  # (a value set by hand, or returned)
                resolve_long_urls(span)
            span._lazy = None  # after the merge: a reader that sees None sees it done
        span._settler = 0
        event = span._done  # (read after the above: a waiter that made it since sees them)
        if event is not None:
            event.set()
    return done


def _wait(span: DeferredSpan) -> bool:
    """Wait for the thread running *span*'s function; ``True``: try to claim it again."""
    global _warned_slow
    if getattr(span, "_settler", 0) == threading.get_ident():
        return False  # this thread runs it (the function reads its own span): as it is
    with _EVENTS:
        event = span._done
        if event is None:
            event = span._done = threading.Event()
    if span._lazy is None:  # (read after the event is there: see _run)
        return False
    if span._claim:  # given back meanwhile: claim it
        return True
    if not event.wait(WAIT_S):
        if not _warned_slow:
            _warned_slow = True
            logger.warning(
                "asynctrace: a lazy_attributes function has run for over %.1f s (span %r); "
                "the span is read without what it adds (further cases are not logged)",
                WAIT_S,
                span._name,
            )
        return False
    event.clear()
    return span._lazy is not None  # given back: claim it


def _merge(span: DeferredSpan, values: Mapping[str, Any]) -> None:
    """Merge *values* as the span's oldest attributes: a key it holds keeps its value,
    and past ``max_attributes`` they go first (the stamps never)."""
    values, bad = good_keys(values)
    stamps = STAMP_KEYS.intersection(values)
    trusted = span._urls_redacted and not _EXTRA_WORDS  # as start_span keeps them
    copied = _copy_attributes(values, False, not trusted)  # private copies; URLs redacted
    for key in stamps:  # asynctrace's, set by its rules only: not taken from here
        del copied[key]
    own = span._attributes
    new = {key: value for key, value in copied.items() if key not in own}
    lost = bad + len(stamps)
    limit = span._tracer._limits.max_attributes
    if new:
        snapshot = own.copy()
        merged = {key: value for key, value in snapshot.items() if key in STAMP_KEYS}
        merged.update(new)  # the function's keys the oldest after the stamps: their order
        merged.update(snapshot)  # decides what a later set past the limit evicts
        if limit is not None and len(merged) > limit:
            merged, left_out = keep_stamps(merged, limit)
            lost += left_out
        own.clear()
        own.update(merged)
    if lost:
        with _COUNTS:
            span._dropped = getattr(span, "_dropped", 0) + lost


def report_failure(where: str, exc: BaseException | None) -> None:
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
            settle(item)  # (long URLs too, unless it could not wait for another thread)
    elif cls not in SPAN_TYPES:
        return
    if SEEN.long:
        resolve_long_urls(item)
