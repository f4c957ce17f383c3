"""Live goodput: the per-step record and the callbacks that receive it.

The runtime's rollup (:mod:`asynctrace.export._goodput_sink`, on an export
thread) turns each finished step into a :class:`StepGoodput`. Callbacks
registered with :func:`on_step_goodput` receive it on one background thread
of their own (``asynctrace-goodput-callbacks``), fed by a bounded queue: a
callback that raises is logged once and keeps being called; one that blocks
or is slow delays only the callbacks after it, never the program, and
records arriving while the queue is full are dropped and counted.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from ._forksafe import reinit_at_fork
from ._own_threads import leaving_signals
from ._rollup import BUCKETS, StepRow

__all__ = [
    "GoodputStats",
    "StepGoodput",
    "on_step_goodput",
    "remove_step_goodput",
    "step_numbers",
]

logger = logging.getLogger("asynctrace")

F = TypeVar("F", bound=Callable[..., Any])


def _seconds(us: float) -> float:
    return round(us / 1e6, 6)


_BUCKET_KEYS: Final = tuple(f"{bucket}_s" for bucket in BUCKETS)


def step_numbers(row: StepRow) -> dict[str, Any]:
    """A step's numbers as the command line prints them (seconds rounded to the µs).

    The one place they are computed: ``asynctrace goodput``'s rows and the
    live :class:`StepGoodput` records both come from here.

    Example:
        >>> row = StepRow("rl.step", 0, 3, "t", "s", 0.0, 2e6, [5e5, 2.5e5, 0.0, 0.0], 2)
        >>> step_numbers(row)["goodput"], step_numbers(row)["unattributed_s"]
        (0.25, 1.25)
    """
    wall = row.wall
    out: dict[str, Any] = {"wall_s": _seconds(wall)}
    for key, us in zip(_BUCKET_KEYS, row.sums, strict=True):
        out[key] = _seconds(us)
    out["unattributed_s"] = _seconds(row.unattributed)
    out["goodput"] = round(row.sums[0] / wall, 6) if wall > 0 else None
    out["stalled_s"] = _seconds(row.stalled)
    out["leaves"] = row.leaves
    out["parent_missing"] = row.parent_missing
    return out


@dataclass(frozen=True)
class StepGoodput:
    """One finished step: where its wall clock went.

    The numbers are those ``asynctrace goodput`` prints for the same spans
    (the same rollup computes both). Seconds are rounded to the microsecond.

    Attributes:
        name: the step span's name.
        iteration: its ``rl.iteration`` (``None`` if it carries none).
        rank: the rank of the process that recorded it.
        role: that process's role (``None``: a plain worker).
        trace_id: the step span's trace id (32 hex digits).
        span_id: its span id (16 hex digits).
        start_us: its start, µs since the epoch.
        wall_s: its duration.
        productive_s: seconds of its productive leaves, clipped to the step.
        overhead_s: the same for overhead.
        idle_s: the same for idle.
        wasted_s: the same for wasted.
        unattributed_s: ``wall_s`` minus the four buckets.
        goodput: ``productive_s / wall_s`` (``None`` for a zero wall time).
        stalled_s: event-loop stall seconds inside the step (in no bucket).
        leaves: bucketed leaf spans counted in it.
        parent_missing: its parent span never arrived (it was taken for a
            step at shutdown, or its wait was given up).
        spans: seconds in the step per leaf span name (they add up to the
            four buckets).
        violations: the accounting problems found on this step (``over-wall``).

    Example:
        >>> record = StepGoodput(name="rl.step", iteration=1, wall_s=2.0, productive_s=1.0,
        ...                      goodput=0.5)
        >>> record.scalars()["goodput/goodput"]
        0.5
    """

    name: str
    iteration: int | None = None
    rank: int = 0
    role: str | None = None
    trace_id: str = ""
    span_id: str = ""
    start_us: float = 0.0
    wall_s: float = 0.0
    productive_s: float = 0.0
    overhead_s: float = 0.0
    idle_s: float = 0.0
    wasted_s: float = 0.0
    unattributed_s: float = 0.0
    goodput: float | None = None
    stalled_s: float = 0.0
    leaves: int = 0
    parent_missing: bool = False
    spans: Mapping[str, float] = field(default_factory=dict)
    violations: tuple[str, ...] = ()

    @classmethod
    def from_row(
        cls, row: StepRow, *, rank: int = 0, role: str | None = None, violations: Any = ()
    ) -> StepGoodput:
        """The record of a rollup row.

        Example:
            >>> row = StepRow("rl.step", 0, 1, "ab", "cd", 0.0, 1e6, [4e5, 0.0, 0.0, 0.0], 1,
            ...               phases={"rl.gen": 4e5})
            >>> StepGoodput.from_row(row).spans
            {'rl.gen': 0.4}
        """
        fields: dict[str, Any] = {
            "name": row.name,
            "iteration": row.iteration,
            "rank": rank,
            "role": role,
            "trace_id": row.trace_id,
            "span_id": row.span_id,
            "start_us": row.start,
        }
        fields.update(step_numbers(row))
        fields["spans"] = {name: _seconds(us) for name, us in row.phases.items()}
        fields["violations"] = tuple(v.message for v in violations)
        if cls is not StepGoodput:
            return cls(**fields)
        # Every field, in their order: what the frozen __init__ stores, without its
        # nineteen object.__setattr__ calls (a record per step, on the export thread).
        record = object.__new__(cls)
        record.__dict__.update(fields)
        return record

    def to_dict(self) -> dict[str, Any]:
        """The record as plain data (one line of ``goodput-r{rank}.jsonl``).

        Example:
            >>> StepGoodput(name="rl.step", iteration=2).to_dict()["iteration"]
            2
        """
        return {
            "kind": "step",
            "name": self.name,
            "iteration": self.iteration,
            "rank": self.rank,
            "role": self.role,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "start_us": self.start_us,
            "wall_s": self.wall_s,
            **{f"{b}_s": getattr(self, f"{b}_s") for b in BUCKETS},
            "unattributed_s": self.unattributed_s,
            "goodput": self.goodput,
            "stalled_s": self.stalled_s,
            "leaves": self.leaves,
            "parent_missing": self.parent_missing,
            "spans": dict(self.spans),
            "violations": list(self.violations),
        }

    def scalars(self, prefix: str = "goodput/") -> dict[str, float]:
        """The numbers to log beside a loss curve (``wandb.log``, ``add_scalar``).

        The goodput ratio (left out when the wall time is zero), the wall
        time, each bucket, the unattributed and the stalled seconds, with
        *prefix* before each name.

        Example:
            >>> sorted(StepGoodput(name="s", wall_s=1.0, goodput=0.0).scalars(prefix=""))[:3]
            ['goodput', 'idle_s', 'overhead_s']
        """
        out: dict[str, float] = {}
        if self.goodput is not None:
            out[f"{prefix}goodput"] = self.goodput
        out[f"{prefix}wall_s"] = self.wall_s
        for bucket in BUCKETS:
            out[f"{prefix}{bucket}_s"] = getattr(self, f"{bucket}_s")
        out[f"{prefix}unattributed_s"] = self.unattributed_s
        out[f"{prefix}stalled_s"] = self.stalled_s
        return out


@dataclass(frozen=True)
class GoodputStats:
    """Counters of the live goodput rollup (:attr:`asynctrace.Telemetry.goodput`).

    Attributes:
        steps: step records made.
        violations: accounting violations found (over-wall, nested-bucket,
            late-bucket, unknown-bucket).
        delivered: records handed to the callbacks.
        dropped: records the callbacks did not finish: their queue was full,
            or, at shutdown, still queued or in a callback still running
            past the 2 s the shutdown waits (that one counts as delivered
            once the callback returns).
        callback_errors: calls of a callback that raised.
        evicted: waits for a parent span given up (``goodput.max_pending``).
        awaited_parents: parent spans that arrived spans wait for right now
            (the open steps and their open subtrees); at shutdown, those
            still awaited when the rollup finished.
        evicted_leaves: bucketed spans of the evicted waits (counted in no step).
        abandoned: waits still open at shutdown: their parent never arrived.
        abandoned_leaves: bucketed spans of those waits (counted in no step).
        dropped_stubs: stamped spans (``rl.iteration``, perhaps steps) of given-up
            waits dropped: past ``goodput.max_pending`` of them waited for their
            parent, so no step among them is reported (logged once at shutdown).
        failed: spans that could not be rolled up (skipped; the first is logged).
        lost_records: lines of ``goodput-r{rank}.jsonl`` that could not be written.
        no_duration_steps: spans that would be steps but have no positive
            duration, so are not (the first is logged).
        no_duration_leaves: bucketed spans under those (counted in no step).
        without_times: spans skipped: a start or end time that is not a finite
            number (the first is logged).
        bad_iterations: spans whose ``rl.iteration`` is not a 64-bit integer
            (ignored, so such a span is no step by it; the first is logged).
        untracked_leaves: leaf durations not recorded in a histogram: their
            name came past the 256 leaf-name instruments (the first is logged).

    Example:
        >>> GoodputStats(steps=3).dropped
        0
    """

    steps: int = 0
    violations: int = 0
    delivered: int = 0
    dropped: int = 0
    callback_errors: int = 0
    evicted: int = 0
    awaited_parents: int = 0
    evicted_leaves: int = 0
    abandoned: int = 0
    abandoned_leaves: int = 0
    dropped_stubs: int = 0
    failed: int = 0
    lost_records: int = 0
    no_duration_steps: int = 0
    no_duration_leaves: int = 0
    without_times: int = 0
    bad_iterations: int = 0
    untracked_leaves: int = 0


# -- callbacks -----------------------------------------------------------------

_lock = threading.Lock()
reinit_at_fork(_lock)  # held by another thread at fork(): new in the child
_callbacks: tuple[Callable[[StepGoodput], Any], ...] = ()


def on_step_goodput(fn: F) -> F:
    """Call *fn* with each finished step's :class:`StepGoodput`, on a background thread.

    Registered for the process (before or after :func:`asynctrace.configure`;
    the live rollup runs when the ``goodput`` configuration key is on, or when
    a callback is registered by the time ``configure`` runs). Callbacks run
    one after another, in registration order, on the thread
    ``asynctrace-goodput-callbacks``: a callback that raises is logged once and
    keeps being called; a slow one delays the later records (queued, up to
    ``goodput.callback_queue``, then dropped and counted), never the program.
    Registering the same function twice calls it once. Returns *fn*, so it
    works as a decorator.

    Example:
        >>> seen = []
        >>> _ = on_step_goodput(seen.append)
        >>> remove_step_goodput(seen.append)
        True
    """
    global _callbacks
    if not callable(fn):
        raise TypeError(f"on_step_goodput: {fn!r} is not callable")
    with _lock:
        if fn not in _callbacks:
            _callbacks = (*_callbacks, fn)
    return fn


def remove_step_goodput(fn: Callable[[StepGoodput], Any]) -> bool:
    """Stop calling *fn*; ``False`` if it was not registered.

    Example:
        >>> remove_step_goodput(print)
        False
    """
    global _callbacks
    with _lock:
        if fn not in _callbacks:
            return False
        _callbacks = tuple(cb for cb in _callbacks if cb != fn)
        return True


def callbacks() -> tuple[Callable[[StepGoodput], Any], ...]:
    """The registered callbacks (a snapshot)."""
    return _callbacks


_STOP: Final = object()
_here = threading.local()  # .dispatcher: the Dispatcher whose thread this is


def release_for_shutdown() -> bool:
    """Called by a shutdown: if it runs inside a goodput callback, that callback's
    dispatcher does not wait for it at close (it waits for the shutdown, which would
    wait for it). Returns whether the current thread is a callbacks thread.

    Example:
        >>> release_for_shutdown()
        False
    """
    dispatcher: Dispatcher | None = getattr(_here, "dispatcher", None)
    if dispatcher is None:
        return False
    dispatcher.released = True
    return True


class Dispatcher:
    """A bounded queue of records and the thread that calls the callbacks with them."""

    def __init__(self, max_queue: int) -> None:
        self._max = max_queue
        self._queue: deque[Any] = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        reinit_at_fork(self._start_lock, self._wake)
        self._closed = False
        self.delivered = 0
        self.dropped = 0
        self.errors = 0
        self._warned: set[int] = set()
        self._warned_full = False
        self.released = False  # a callback waits for this close: do not wait for it
        # The record the callbacks are handling. Once a close has given up waiting, it
        # counts as dropped (counts()) until its callbacks return, then as delivered:
        # the lock makes each reading count it once.
        self._current: Any = None
        self._gave_up = False
        self._count_lock = threading.Lock()
        reinit_at_fork(self._count_lock)

    def put(self, record: StepGoodput) -> None:
        """Queue *record* for the callbacks (export thread; never waits)."""
        if not _callbacks or self._closed:
            return
        if len(self._queue) >= self._max:
            self.dropped += 1
            if not self._warned_full:
                self._warned_full = True
                logger.warning(
                    "asynctrace: goodput callbacks are %d records behind (goodput."
                    "callback_queue); dropping records, the count is in Telemetry.goodput",
                    self._max,
                )
            return
        self._queue.append(record)
        if self._thread is None:
            self._start()
        self._wake.set()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=leaving_signals(self._run),
                    name="asynctrace-goodput-callbacks",
                    daemon=True,
                )
                self._thread.start()

    def _run(self) -> None:
        _here.dispatcher = self
        queue = self._queue
        while True:
            self._wake.wait()
            self._wake.clear()
            while queue:
                record = queue.popleft()
                if record is _STOP:
                    return
                self._current = record
                for fn in _callbacks:
                    self._call(fn, record)
                with self._count_lock:
                    self.delivered += 1
                    self._current = None

    def _call(self, fn: Callable[[StepGoodput], Any], record: StepGoodput) -> None:
        try:
            fn(record)
        except BaseException as exc:  # a callback's SystemExit does not end the thread either
            self.errors += 1
            if id(fn) not in self._warned:
                self._warned.add(id(fn))
                logger.warning(
                    "asynctrace: the goodput callback %r raised; it keeps being called "
                    "(further errors are counted, not logged)",
                    fn,
                    exc_info=exc,
                )

    def counts(self) -> tuple[int, int]:
        """``(delivered, dropped)``, read together; once a close has given up waiting, the
        record a callback is still handling counts as dropped (as delivered when it returns).

        Example:
            >>> Dispatcher(4).counts()
            (0, 0)
        """
        with self._count_lock:
            late = 1 if self._gave_up and self._current is not None else 0
            return self.delivered, self.dropped + late

    def close(self, timeout_s: float) -> bool:
        """Deliver what is queued, waiting at most *timeout_s*; ``False`` if it took longer."""
        self._closed = True
        thread = self._thread
        if thread is None:
            return True
        queue = self._queue
        queue.append(_STOP)
        self._wake.set()
        if self.released or thread is threading.current_thread():
            return True  # a callback waits for this shutdown: it delivers the rest after
        thread.join(max(0.0, timeout_s))
        if thread.is_alive():
            # The records still queued are taken out (pop is atomic: each record is
            # either delivered by the thread or counted here, never both); the stop
            # marker goes back so the thread ends after its current callback. The
            # record in that callback is counted here too, unless it has just finished.
            left = 0
            while True:
                try:
                    item = queue.pop()
                except IndexError:
                    break
                if item is not _STOP:
                    left += 1
            queue.append(_STOP)
            self._wake.set()
            with self._count_lock:
                self._gave_up = True
                self.dropped += left
                if self._current is not None:
                    left += 1  # for the warning: counts() counts it while it runs
            logger.warning(
                "asynctrace: a goodput callback was still running %.1f s into shutdown; "
                "%d record%s not delivered, queued or in that callback (counted in "
                "Telemetry.goodput.dropped)",
                timeout_s,
                left,
                " was" if left == 1 else "s were",
            )
            return False
        return True
