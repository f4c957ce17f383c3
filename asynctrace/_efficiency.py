"""Efficiency spans: waits charged to the idle/wasted buckets, and coalesced polls."""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Final

from opentelemetry.trace import Span

from ._builtin_groups import EFFICIENCY as EFFICIENCY_GROUP
from ._builtin_groups import PER_PROMPT as PER_PROMPT_GROUP
from ._cm import SyncAndAsync
from ._errors import ConfigurationError, report_internal_error
from ._forksafe import reinit_at_fork
from ._group_types import Bucket, validate_bucket
from ._scopes import SCOPES
from ._semconv import RL_EFFICIENCY_CATEGORY, RL_IDLE_POLLS
from ._span_context import finish
from ._span_noop import AMBIENT_SPAN, NOOP_CM, NoopSpanCM, mark_refused, take_refused
from ._span_rules import EFFICIENCY, Attributes
from ._span_start import start
from ._state import GATE

__all__ = [
    "PollWait",
    "efficiency_bucket",
    "efficiency_span",
    "set_efficiency_bucket",
    "start_efficiency_span",
]

# Category -> bucket. Keys ending in "/*" match a prefix; exact keys win, then
# the longest prefix; anything else is unbucketed.
_DEFAULT_TABLE: Final[dict[str, Bucket | None]] = {
    "idle/*": Bucket.IDLE,
    "wasted/*": Bucket.WASTED,
    # Collector-side loop waits and the initial buffer fill overlap productive
    # work of other processes in the same trace: bucketing them would charge
    # one stretch of wall clock twice.
    "idle/refit_event_wait": None,
    "idle/generation_limit_pause": None,
    "init/total": None,
}
_table: dict[str, Bucket | None] = dict(_DEFAULT_TABLE)
_cache: dict[str, tuple[str, Bucket | None]] = {}
_CACHE_MAX = 4096
_lock = threading.Lock()
reinit_at_fork(_lock)  # a lock held at fork() is made new in the child


def _validate_category(category: object, key: str, *, pattern: bool = False) -> str:
    """*category* checked; with *pattern*, a prefix pattern (a trailing ``"/*"``) too."""
    if not isinstance(category, str):
        body = ""
    elif pattern and category.endswith("/*"):
        body = category[:-2]
    else:
        body = category
    if (
        not isinstance(category, str)
        or not body.strip()
        or body.strip() != body
        or body.startswith("/")
        or body.endswith("/")
        or "*" in body  # no wildcard in a category: a key with one would match nothing
    ):
        form = " or a prefix pattern like 'stall/*'" if pattern else ""
        star = "no '*' but the pattern's trailing '/*'" if pattern else "no '*'"
        raise ConfigurationError(
            f"{key}: {category!r} is not accepted; accepted: a category like "
            f"'idle/buffer_starvation'{form} (non-empty, no surrounding whitespace or "
            f"slashes, {star})"
        )
    return category


def set_efficiency_bucket(category: str, bucket: Bucket | None) -> None:
    """Override the bucket of an efficiency *category* (``None``: unbucketed).

    *category* is exact (``"idle/refit_bubble"``) or a prefix pattern
    (``"stall/*"``). Declare a wait unbucketed when other processes in the same
    trace do productive work during it, so the wall clock is not charged twice.

    Example:
        >>> set_efficiency_bucket("stall/*", Bucket.IDLE)
        >>> set_efficiency_bucket("idle/warmup", None)
    """
    # A '*' is no part of a category (spans refuse it too): only the trailing '/*'.
    key = _validate_category(category, "set_efficiency_bucket(category)", pattern=True)
    validated = validate_bucket(bucket, "set_efficiency_bucket(bucket)", allow_none=True)
    with _lock:
        _table[key] = validated
        _cache.clear()


def efficiency_bucket(category: str) -> Bucket | None:
    """The bucket an efficiency span of *category* carries.

    Example:
        >>> efficiency_bucket("idle/buffer_starvation")
        <Bucket.IDLE: 'idle'>
        >>> efficiency_bucket("idle/refit_event_wait") is None
        True
    """
    return _lookup(category)[1]


def _lookup(category: str) -> tuple[str, Bucket | None]:
    try:
        hit = _cache.get(category)
        if hit is not None:
            return hit
    except TypeError:  # unhashable (a list, say): no category, as the check below says
        pass
    _validate_category(category, "efficiency category")
    with _lock:
        if category in _table:
            bucket = _table[category]
        else:
            bucket = None
            best = -1
            for key, value in _table.items():
                if key.endswith("/*") and category.startswith(key[:-1]) and len(key) > best:
                    best, bucket = len(key), value
        result = ("rl." + category.replace("/", "."), bucket)
        if len(_cache) >= _CACHE_MAX:  # categories made up per call: bounded all the same
            _cache.clear()
        _cache[category] = result
    return result


def _gate_open() -> bool:
    enabled = GATE.enabled
    if not enabled:
        return False
    return (PER_PROMPT_GROUP if SCOPES.get().per_prompt else EFFICIENCY_GROUP) in enabled


def _start_wait(category: str, attributes: Attributes | None) -> Span | None:
    name, bucket = _lookup(category)
    attrs: dict[str, object] = dict(attributes) if attributes else {}
    attrs[RL_EFFICIENCY_CATEGORY] = category  # the bucket's reason: no caller's copy replaces it
    return start(name, EFFICIENCY_GROUP, EFFICIENCY, attrs, bucket)  # type: ignore[arg-type]


class _WaitSpan(SyncAndAsync[Span]):
    """An efficiency span for a ``with`` block; deliberately not made current.

    Entered once at a time: a ``with`` on an object already entered (nested on
    itself, or from another task) is reported and runs untraced, like a
    second entry of a ``managed_span``, and its exit does not end the span:
    each refused entry is noted in the context it was made in, so the first
    entry's exit, wherever it comes in the order, is the one that ends it.
    Once exited, the object can be entered again.
    """

    __slots__ = ("_attributes", "_category", "_entered", "_refused", "_span")

    def __init__(self, category: str, attributes: Attributes | None) -> None:
        self._category = category
        self._attributes = attributes
        self._span: Span | None = None
        self._entered = False  # the first entry is open
        self._refused = 0  # refused entries whose exits are still to come

    def __enter__(self) -> Span:
        if self._entered:
            return self._refuse()
        self._entered = True
        try:
            self._span = _start_wait(self._category, self._attributes)
        except Exception as exc:  # attributes that are not a mapping, say: never raised
            report_internal_error(("efficiency_span",), exc)
            self._span = None
        return self._span if self._span is not None else AMBIENT_SPAN

    def _refuse(self) -> Span:
        """A second ``with`` while entered: the disabled span; its exit will do nothing."""
        report_internal_error(
            ("reenter", "efficiency"),
            RuntimeError("this efficiency_span() was entered already; make a new one"),
            self._category,
        )
        self._refused += 1  # counted after the report, which raises in strict mode
        mark_refused(self)
        return AMBIENT_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._refused and take_refused(self):  # the exit of a refused entry
            self._refused -= 1
            return
        self._entered = False
        span, self._span = self._span, None
        if span is not None:
            finish(span, exc_type, exc)


def efficiency_span(
    category: str, *, attributes: Attributes | None = None
) -> _WaitSpan | NoopSpanCM:
    """Wrap a *wait* (not work) in a span charged to its category's bucket.

    The span is named ``rl.<category with / replaced by .>`` and carries
    ``rl.efficiency.category``. Its bucket comes from the category table
    (``idle/*`` → idle, ``wasted/*`` → wasted, overrides via
    :func:`set_efficiency_bucket`) and ignores :class:`bucket_scope`. It is not
    made current: a wait encloses no work. Gated on the ``efficiency`` group.

    Example:
        >>> with efficiency_span("idle/refit_bubble"):
        ...     pass  # waiting for weights
    """
    if not _gate_open():
        return NOOP_CM
    try:
        _lookup(category)
    except Exception as exc:  # never raise on the span path
        report_internal_error(("efficiency_span",), exc)  # one key: categories vary
        return NOOP_CM
    return _WaitSpan(category, attributes)


def _zero() -> int:
    return 0


def _reraise(exc: BaseException) -> int:
    raise exc


def _raising(exc: BaseException) -> Iterator[int]:
    """A counter that raises *exc* at its first poll, then is exhausted (the chain goes on)."""
    return map(_reraise, (exc,))


_POLL_LIMIT: Final = 2**62  # polls one wait can count: a C long on every 64-bit platform


class PollWait(SyncAndAsync["PollWait"]):
    """One coalesced efficiency span over the starved iterations of a poll loop.

    Call :meth:`poll` once per starved iteration: the first call opens the span
    (its start time is that poll), later calls only count. :meth:`end` closes
    it with ``rl.idle.polls``; a wait that was never polled emits nothing. The
    span is never made current, so tasks created during the wait are not its
    children. Also a context manager. After :meth:`end` the object can be
    polled again for the next wait. ``poll`` is one callable for the object's
    whole life, so it may be saved in a local (``poll = wait.poll``) before or
    after the first call. A ``KeyboardInterrupt`` raised while the first poll
    opens the span propagates from that poll only; the next poll opens the
    wait. Not thread-safe: one owner per wait. Polled from two threads, it
    raises into neither: overlapping first polls share the wait (rarely, each
    opens a span, and one is never ended nor exported).

    Example:
        >>> wait = start_efficiency_span("idle/buffer_starvation")
        >>> for _ in range(3):
        ...     _ = wait.poll()
        >>> wait.end()
    """

    poll: Callable[[], int]
    """Count one starved iteration; returns the number of polls so far."""

    def __init__(
        self, category: str, attributes: Attributes | None = None, *, _enabled: bool = True
    ) -> None:
        self.category = category
        self._attributes = attributes
        self._span: Span | None = None
        self._polls: Iterator[int] | None = None  # the current wait's counter
        self._enabled = _enabled
        self.poll = self._new_poll() if _enabled else _zero

    def _new_poll(self) -> Callable[[], int]:
        # Polls are C-level: a chain over one counter per wait, whose iterable
        # of counters calls _open_wait when asked for the next counter -- at the
        # first poll of each wait. end() exhausts the counter, so the next poll
        # (through any saved reference) starts the next wait. No Python frame
        # runs on the other polls. The iterable is a plain call, not a
        # generator: two threads may be in it at once, and nothing is raised
        # through it (the chain would drop it and every later poll would stop).
        return itertools.chain.from_iterable(iter(self._open_wait, None)).__next__

    def _open_wait(self) -> Iterator[int]:
        """The next wait's counter, its span started (the first poll of a wait)."""
        polls = self._polls
        if polls is not None:  # another thread's first poll opened this wait: share it
            return polls
        self._polls = polls = iter(range(1, _POLL_LIMIT))  # claimed before the span starts
        try:
            self._span = _start_wait(self.category, self._attributes)
        except Exception as exc:  # pragma: no cover - _start_wait already contains errors
            report_internal_error(("poll",), exc)
        except BaseException as exc:  # Ctrl-C, SystemExit: raised by this poll alone
            self._polls = None  # no wait opened: the next poll opens it
            return _raising(exc)
        return polls

    @property
    def polls(self) -> int:
        """Polls counted in the current wait (0 before the first poll)."""
        polls = self._polls
        if polls is None:
            return 0
        return _POLL_LIMIT - 1 - operator.length_hint(polls)

    def end(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """Close the wait span (if any poll happened) with ``rl.idle.polls``."""
        counter = self._polls
        if counter is None:  # not polled since the last end()
            return
        self._polls = None
        polls = _POLL_LIMIT - 1 - operator.length_hint(counter)
        # Exhausted: the next poll, through any reference, asks for the next wait.
        counter.__setstate__(_POLL_LIMIT)  # type: ignore[attr-defined]
        span, self._span = self._span, None
        if span is None:
            return
        try:
            span.set_attribute(RL_IDLE_POLLS, polls)
        except Exception as err:
            report_internal_error(("poll_end",), err)
        finish(span, exc_type, exc)

    def __enter__(self) -> PollWait:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end(exc_type, exc)


_NOOP_WAIT: Final = PollWait("idle/disabled", _enabled=False)


def start_efficiency_span(category: str, *, attributes: Attributes | None = None) -> PollWait:
    """Start a coalesced wait for a poll loop; see :class:`PollWait`.

    Gated (on ``efficiency``, or ``per_prompt`` inside a per-prompt scope) at
    this call; a disabled wait is a shared object whose ``poll`` does nothing.

    Example:
        >>> wait = start_efficiency_span("idle/buffer_starvation")
        >>> while not wait.poll() >= 0:  # doctest: +SKIP
        ...     pass
        >>> wait.end()
    """
    if not _gate_open():
        return _NOOP_WAIT
    try:
        _lookup(category)
    except Exception as exc:  # never raise on the span path
        report_internal_error(("start_efficiency_span",), exc)
        return _NOOP_WAIT
    return PollWait(category, attributes)
