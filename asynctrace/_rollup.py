"""The goodput rollup: per step, wall time and seconds per bucket, and the invariants.

Spans arrive one by one, roughly in the order they ended (children before
their parents, except detached children such as a checkpoint's finalize
span). Nothing is kept per span beyond that order requires:

- the children of a span that has not arrived yet wait in a *group* keyed by
  that span's id: the bucketed leaves among them (start, end, bucket), plus
  summed seconds of subtrees already folded;
- when the span arrives, its group is folded into it and moves up to its own
  parent's group, or, if the span is a step, is settled into the step's
  sums (each leaf clipped to the step's interval);
- a bounded window of recently arrived span ids remembers where each went,
  so a detached child arriving after its parent still finds its step.

Rules (see ``docs/reading-a-trace.md``):

- A *step* is a span of positive duration whose ``asynctrace.group``
  attribute (or ``cat``) is ``step``; or an unbucketed span with an integer
  ``rl.iteration`` and a positive duration whose parent carries no
  ``rl.iteration`` and no bucket and is not a step itself
  (the outermost stamped umbrella: per-prompt spans and finalize spans sit
  under a stamped parent, so they are never steps).
- A span that would be a step but has no positive duration (a zero ``dur``,
  or an end before its start given to :meth:`Rollup.add`) is not one, and
  the bucketed spans of its subtree, clipped to nothing, count in no step:
  they are counted (``void_steps``, ``void_leaves``) and noted, never lost
  silently.
- Per bucket, a step counts the seconds of the bucketed spans in its subtree
  that have no bucketed descendant, clipped to the step's interval.
  Unbucketed spans (umbrellas, per-prompt spans, the detached finalize span)
  never count. A step of group ``step`` that carries a bucket is a bucketed
  span of its own subtree: it counts its wall when nothing under it is
  bucketed, else it is a ``nested-bucket`` violation.
- A span whose times are not finite numbers (or are integers no float holds),
  or that has no trace id (a non-empty string), is skipped (``without_ids``),
  and an ``rl.iteration`` that is not a 64-bit integer is ignored
  (``bad_iterations``): counted, never silently.
- Parent ids that form a cycle (a span among its own ancestors, which no
  tracer writes: ids edited or reused by hand) are cut where the cycle closes:
  the cycle is a subtree whose parent is missing, its bucketed spans (and
  those arriving under it later) in no step, counted (``cycles``,
  ``cycle_leaves``) and noted.
- ``unattributed = wall - sum(buckets)``; ``goodput = productive / wall``.
- Bucketed spans that overlap (concurrent tasks) put one stretch of wall clock
  in the sums twice: an ``over-wall`` violation when the sums exceed the wall,
  a note (steps, seconds counted twice at least) short of it.
- Event-loop stalls (spans of group ``loop_stall``) are unbucketed: they
  overlap the spans they stretched. A step reports their seconds apart
  (``stalled``), clipped to its interval, and never counts them in a bucket:
  the time at least one stall covers (their union), so stalls of several
  loops or processes at once count that stretch once and ``stalled`` never
  exceeds the wall.

When a step is finished (the same rule for both drivers, the command line
reading files and the runtime fed on its export thread, so both give the
same numbers for the same spans): a step is *confirmed* when its span has
arrived and is known to be a step (a span of group ``step`` at once; a
stamped candidate when its parent arrives, or at :meth:`Rollup.finish` if it
never does, unless a recent step of its trace with its ``rl.iteration``
contains its start, other than a sibling of another origin (a step of the
same parent from another rank's file): a detached finalize span whose
staging parent left the window; a remote parent's candidate is never ruled
out). Siblings of one origin and ``rl.iteration`` under a parent never seen
that overlap, one after another, are one step (the per-prompt spans of a step
span never written), over the interval from the first one's start to the
last end among them. It is *finished*
once a span arrives that ended more than
``grace_us`` after the step's end, or at :meth:`Rollup.finish`. Until then,
late children (a detached span ending after its step, a loop-stall span
recorded just after the step ended) still count in it; after, nothing
changes its numbers: a bucketed span arriving for a finished step is not
counted and is reported (``late-bucket``), and a late stall is ignored.
Finished steps are handed to ``on_step`` as they finish; with ``keep=False``
they are not kept, so memory is bounded by the open steps (the leaves
waiting for their parent), the window of recent spans and ``max_pending``.
"""

from __future__ import annotations

import heapq
import math
import re
import sys
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

from ._group_types import Bucket
from ._rollup_rows import RollupResult, StepRow, Violation
from ._rollup_tree import (
    _CYCLE,
    _I64_MAX,
    _I64_MIN,
    _MASK,
    _OUTSIDE,
    Example,
    _add_sums,
    _Entry,
    _Group,
    _iteration,
    _merge,
    _merged,
    _overlapping,
    _resolve,
    _Step,
    _where,
)

__all__ = ["BUCKETS", "DEFAULT_GRACE_US", "Rollup", "RollupResult", "StepRow", "Violation"]

BUCKETS: Final = tuple(b.value for b in Bucket)
"""The bucket names in the order of :attr:`StepRow.sums`: productive, overhead, idle, wasted."""
_BUCKET_INDEX: Final = {name: i for i, name in enumerate(BUCKETS)}
_HAS_ITERATION: Final = 1
_BUCKETED: Final = 2
_STEP: Final = 4
_DISQUALIFIES: Final = _HAS_ITERATION | _BUCKETED | _STEP
_STEPS_REMEMBERED: Final = 64  # (trace, rl.iteration) of recent steps, for _ruled_out
_STEPS_PER_KEY: Final = 4
_TRACE_LIMIT: Final = 1 << 128  # ids past it: an index in the table of non-hex trace ids
_WALK_LIMIT: Final = 64
_INT_HIGH: Final = int(sys.float_info.max)  # integer times past it hold in no float
_INT_LOW: Final = -_INT_HIGH
_NAMES_LIMIT: Final = 65536
LOOP_STALL: Final = "loop_stall"
DEFAULT_GRACE_US: Final = 1_000_000.0
"""How long after its end (µs, in span end time) a step still takes late children."""


def _start_of(step: _Step) -> float:
    return step.start


class Rollup:
    """Feed complete (``"X"``) events with :meth:`add`, then call :meth:`finish`.

    Args:
        step_name: only spans whose name matches this regular expression can be
            taken for steps by their ``rl.iteration``; spans of group ``step``
            are steps whatever their name (``None``: any name).
        window: how many arrived spans are remembered for detached children
            that arrive after their parent.
        grace_us: a step is finished once a span arrives that ended more than
            this after the step's end (µs); until then late children count.
        on_step: called with each finished step's row and the violations found
            on it, as it finishes (on the thread that feeds the rollup).
        keep: keep the finished rows for :meth:`finish` (``False`` for a
            rollup that runs as long as the program: rows go to *on_step* only,
            violations are counted, not kept).
        max_pending: most waits (one per parent that has not arrived yet)
            plus the bucketed spans they hold, at once (``None``: no limit);
            past it, the oldest waits are given up: their bucketed spans (and
            their candidate steps') count nowhere, counted in ``evicted`` (the
            spans in ``evicted_leaves``); the candidate steps themselves wait on,
            outside the limit, for their parent (or :meth:`finish`), at most
            *max_pending* of them: past it, the oldest are dropped, no steps
            (``dropped_stubs``, and a note at :meth:`finish`). Bucketed spans
            arriving under such a waiting candidate count nowhere
            (``evicted_leaves``).
            Waits still open at :meth:`finish` are counted in ``abandoned``
            (their leaves in ``abandoned_leaves``).
        on_violation: called with each violation found outside a step's row
            (``nested-bucket``, ``late-bucket``, ``unknown-bucket``), as it
            is found; ``over-wall`` goes to *on_step* with its row.

    Example:
        >>> rollup = Rollup()
        >>> rollup.add({"ph": "X", "name": "gen", "ts": 10, "dur": 5, "args": {
        ...     "rl.bucket": "productive", "trace_id": "1", "span_id": "2",
        ...     "parent_span_id": "1"}})
        >>> rollup.add({"ph": "X", "name": "step", "ts": 0, "dur": 20, "args": {
        ...     "rl.iteration": 1, "trace_id": "1", "span_id": "1"}})
        >>> [(row.name, row.sums[0], row.wall) for row in rollup.finish().steps]
        [('step', 5.0, 20)]
    """

    def __init__(
        self,
        *,
        step_name: re.Pattern[str] | None = None,
        window: int = 200_000,
        grace_us: float = DEFAULT_GRACE_US,
        on_step: Callable[[StepRow, list[Violation]], None] | None = None,
        keep: bool = True,
        max_pending: int | None = None,
        on_violation: Callable[[Violation], None] | None = None,
    ) -> None:
        self._step_name = step_name
        self._on_violation = on_violation
        self._window = window
        self._grace = grace_us
        self._on_step = on_step
        self._keep = keep
        self._max_pending = max_pending
        self._waits: deque[int] = deque()  # pending keys in the order their wait began
        # Waits for a remote parent: (end + grace, parent). Another process's span never
        # arrives here; one of this process's (an in-process server's client) does, soon.
        self._remote: deque[tuple[float, int]] = deque()
        self._remote_keys: set[int] = set()
        # How many of _remote_keys have a group in _pending: awaited() reads it from any
        # thread, where iterating _remote (changed by the export thread) could raise.
        self._remote_open = 0
        # Recent steps per (trace, rl.iteration): [(start, end, key, parent key, origin)],
        # oldest key first.
        self._stepped: dict[tuple[int, int], list[tuple[float, float, int, int | None, int]]] = {}
        # The candidates of evicted waits, by the parent they wait for, oldest first: they
        # count nothing toward max_pending and are settled when it arrives, or as missing
        # (finish, or past max_pending candidates of their own: _trim_stubs).
        self._stubs: dict[int, list[_Step]] = {}
        self._stubbed = 0  # the candidates in _stubs
        # Groups waiting plus the bucketed leaves they hold, bounded by max_pending.
        self._load = 0
        self._limit = max_pending if max_pending is not None else sys.maxsize
        self.evicted = 0  # waits given up (max_pending)
        self.evicted_leaves = 0  # ...and the bucketed spans they held, counted nowhere
        self.dropped_stubs = 0  # ...and their stamped spans given up past max_pending more
        self.abandoned = 0  # waits still open at finish (their parent never arrived)
        self.abandoned_leaves = 0  # ...and the bucketed spans they held, counted nowhere
        self.void_steps = 0  # spans that would be steps but have no duration (not steps)
        self.void_leaves = 0  # ...and the bucketed spans of their subtrees, counted nowhere
        self._void_first: str | None = None
        self.bad_iterations = 0  # spans whose rl.iteration is not a 64-bit integer (ignored)
        self._bad_iteration_first: str | None = None
        self.cycles = 0  # spans whose parent ids lead back to them (taken as parentless)
        self.cycle_leaves = 0  # ...and the bucketed spans under them, counted nowhere
        self._cycle_first: str | None = None
        self.violation_count = 0
        self._held: list[tuple[float, int, _Step]] = []  # confirmed, unfinished: heap by end
        self._seq = 0
        self._next_seal = math.inf  # the earliest end + grace among held steps
        self._rows: list[tuple[tuple[float, int, int], StepRow]] = []
        self._over: list[tuple[tuple[float, int, int], Violation]] = []
        # Steps whose bucketed spans overlap short of the wall, the µs counted twice (at
        # least), and the first such step's description: a note, not a violation.
        self.overlap_steps = 0
        self.overlap_us = 0.0
        self._overlap_first: str | None = None
        self._pending: dict[int, _Group] = {}
        self._home: dict[int, _Entry] = {}
        # The last leaf's entry: its siblings of the same name share the tuple, so the
        # window holds one object the collector tracks per run of siblings, not per span
        # (entries live long enough to reach the oldest generation, which every span
        # would otherwise make bigger and collect more often, on any thread).
        self._sibling: _Entry = (None, _OUTSIDE, 0, "")
        self._order: deque[int] = deque()
        # Trace ids that are not 32 lowercase hex digits, by index (add()); hex ones are
        # the key's high bits themselves, so memory does not grow with distinct traces.
        self._traces: dict[str, int] = {}
        self._trace_ids: list[str] = []
        # The last event's trace id (a non-empty str; at first none) and its high bits.
        self._last_trace: Any = ""
        self._last_high: int | None = None
        self._names: dict[str, str] = {}
        self._violations: list[Violation] = []
        self._spans = 0
        self._without_ids = 0
        self._bad_ids = 0
        self._duplicates = 0

    # -- input ------------------------------------------------------------------

    def add(self, event: dict[str, Any], origin: int = 0) -> None:
        """Account one complete event (other phases are ignored).

        Events without a ``ts`` (or with a ``ts`` or ``dur`` that is not a finite
        number, or times no float holds), a ``trace_id`` (a non-empty string) or
        hex span ids are counted in ``without_ids``;
        a span or parent id outside 0 .. 2**64 - 1 in ``bad_ids`` (either would
        stand for another trace's span).
        """
        if event.get("ph") != "X":
            return
        args = event.get("args")
        if args.__class__ is not dict:
            self._without_ids += 1
            return
        assert isinstance(args, dict)
        span_id: Any = args.get("span_id")
        trace_id: Any = args.get("trace_id")
        try:
            start = event["ts"]
            end = start + event.get("dur", 0)
            if end.__class__ is int:  # both ints (an int and a float make a float)
                # Each of start, end and the duration within what a float holds (exact:
                # |a + b| and |a - b| bound |a| and |b|), as the sums and the grace need.
                if not (
                    _INT_LOW <= end + start <= _INT_HIGH and _INT_LOW <= end - start <= _INT_HIGH
                ):
                    raise ValueError(end)
            elif not -1e999 < end - start < 1e999:  # NaN or infinite (1e999 is inf)
                raise ValueError(end)
            sid = int(span_id, 16)
            parent_id: Any = args.get("parent_span_id")
            pid = int(parent_id, 16) if parent_id else None
        except (KeyError, TypeError, ValueError, OverflowError):  # (an int no float holds)
            self._without_ids += 1
            return
        if sid >> 64 or (pid is not None and pid >> 64):
            # Negative ("-1") or past 64 bits: it would take the trace's bits, another
            # trace's span id (x >> 64 is 0 exactly for 0 <= x < 2**64).
            self._bad_ids += 1
            return
        # The last event's trace (a str: only those are kept there), else looked up.
        high = self._last_high if trace_id == self._last_trace else self._trace_high(trace_id)
        if high is None:  # no trace id: its span ids would name another trace's spans
            self._without_ids += 1
            return
        key = sid | high
        pkey = pid | high if pid is not None else None
        self._account(event.get("name"), key, pkey, start, end, args, event.get("cat"), origin)

    def add_span(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        parent_id: int,
        start: float,
        end: float,
        attributes: Mapping[str, Any],
        cat: Any,
        origin: int = 0,
        remote: bool = False,
    ) -> None:
        """Account one span given by its fields (the in-process driver).

        The same as :meth:`add` of the Chrome event the chrome exporter writes
        for it: *start* and *end* in µs as written (``ns // 1000``, the end
        never before the start), *cat* the event's category. *remote*: the
        parent is another process's span (remote, and not open here), so it
        never arrives: the span is settled at once as one whose parent is
        missing (what :meth:`finish` does for a parent that never arrived).
        A span whose *start* or *end* is not a finite number (or is an integer
        no float holds) is counted in ``without_ids``, as :meth:`add` counts
        the event the exporter writes for it (its ``dur`` written ``null``).
        """
        first: Any = start  # ints too (a float annotation takes them)
        last: Any = end
        try:
            if last.__class__ is int and first.__class__ is int:  # what a float holds
                if not (
                    _INT_LOW <= last + first <= _INT_HIGH and _INT_LOW <= last - first <= _INT_HIGH
                ):
                    raise ValueError(end)
            elif not -1e999 < last - first < 1e999:  # NaN or infinite (1e999 is inf)
                raise ValueError(end)
        except (TypeError, ValueError, OverflowError):
            self._without_ids += 1
            return
        key = span_id | trace_id << 64
        pkey = parent_id | trace_id << 64 if parent_id else None
        self._account(name, key, pkey, start, end, attributes, cat, origin, remote)

    def _account(
        self,
        name: Any,
        key: int,
        pkey: int | None,
        start: float,
        end: float,
        args: Mapping[str, Any],
        cat: Any,
        origin: int,
        remote: bool = False,
    ) -> None:
        if key in self._home:
            self._duplicates += 1
            return
        if remote and pkey is not None and pkey not in self._home:
            self._remote_wait(pkey, end)
        remote = False  # waited for like any parent, until its deadline (_seal)
        if end > self._next_seal:
            self._seal(end)
        self._spans += 1
        interned = self._names.get(name)
        name = interned if interned is not None else self._intern(str(name))
        bucket: Any = args.get("rl.bucket")
        iteration = args.get("rl.iteration")
        if iteration is not None and (
            iteration.__class__ is not int or not _I64_MIN <= iteration <= _I64_MAX
        ):
            iteration = self._checked_iteration(iteration, name)
        group = args.get("asynctrace.group")
        if group == LOOP_STALL and bucket is None:
            self._stall(name, key, None if remote else pkey, start, end)
            return
        group_step = group == "step" or cat == "step"  # (one of no duration: _finished)
        if bucket is not None and pkey is not None and not group_step and not remote:
            # _span's common case, inline (most spans): a bucketed leaf whose parent is
            # still open and whose own children, if any, have not arrived.
            index = _BUCKET_INDEX.get(bucket, -1) if isinstance(bucket, str) else -1
            pending, home = self._pending, self._home
            stubs = self._stubs  # evicted waits' candidates: their parent takes _span
            if (
                index >= 0
                and key not in pending
                and pkey not in home
                and (not stubs or key not in stubs)
            ):
                target = pending.get(pkey)
                if target is None:
                    target = self._wait(pkey)
                target.leaves.append((start, end, index, name, key))
                flags = _HAS_ITERATION | _BUCKETED if iteration is not None else _BUCKETED
                entry = self._sibling  # a group is one parent's: the same group, same pkey
                if entry[1] is not target or entry[3] is not name or entry[2] != flags:
                    entry = self._sibling = (pkey, target, flags, name)
                home[key] = entry  # _remember, inline
                order = self._order
                order.append(key)
                if len(order) > self._window:
                    home.pop(order.popleft(), None)
                self._load += 1
                if self._load > self._limit:
                    self._evict()
                return
        self._span(name, key, pkey, start, end, bucket, iteration, group_step, origin, remote)

    def _checked_iteration(self, value: Any, name: str) -> int | None:
        """*value* as an ``rl.iteration`` (:func:`_iteration`); one that is not an integer
        (a number the tracer provider wrote as its text, ``"1"``) is counted: its
        span is no step by it, not silently."""
        iteration = _iteration(value)
        if iteration is None:
            self.bad_iterations += 1
            if self._bad_iteration_first is None:
                self._bad_iteration_first = f"{name!r}: {value!r} ({type(value).__name__})"[:200]
        return iteration

    def _stall(self, name: str, key: int, pkey: int | None, start: float, end: float) -> None:
        """A loop-stall span: never a step, in no bucket; its seconds go to its step apart."""
        payload = self._take(key) or _Group()
        if self._stubs:
            payload = self._unstub(key, payload) or payload
        if payload.cands:  # stamped spans under a stall span (not expected): steps
            for cand in payload.cands:
                self._confirm(cand)
            payload.cands = None
        if end > start:
            if payload.stalls is None:
                payload.stalls = []
            payload.stalls.append((start, end))
        self._attach(
            payload, key, pkey, self._home.get(pkey) if pkey is not None else None, 0, name
        )

    def _trace_high(self, trace_id: Any) -> int | None:
        """The key bits of *trace_id* (above the span id's 64): the id itself when it is
        32 lowercase hex digits, else an index in the table of other ids; ``None`` for
        no trace id (missing, empty, or not a string)."""
        if trace_id.__class__ is not str or not trace_id:
            return None
        high = None
        if trace_id.__class__ is str and len(trace_id) == 32:
            try:
                value = int(trace_id, 16)
            except ValueError:
                value = -1
            if value >= 0 and f"{value:032x}" == trace_id:
                high = value << 64
        if high is None:
            index = self._traces.get(trace_id)
            if index is None:
                index = self._traces[trace_id] = len(self._trace_ids)
                self._trace_ids.append(trace_id)
            high = (_TRACE_LIMIT | index) << 64
        self._last_trace, self._last_high = trace_id, high
        return high

    def _intern(self, name: str) -> str:
        found = self._names.get(name)
        if found is not None:
            return found
        if len(self._names) < _NAMES_LIMIT:
            self._names[name] = name
        return name

    def _span(
        self,
        name: str,
        key: int,
        pkey: int | None,
        start: float,
        end: float,
        bucket: Any,
        iteration: int | None,
        group_step: bool,
        origin: int,
        remote: bool = False,
    ) -> None:
        children = self._pending.pop(key, None)  # _take, inline (it runs once per span)
        if children is not None:
            self._load -= 1 + len(children.leaves)
            if self._remote_keys and key in self._remote_keys:
                self._remote_open -= 1
        if self._stubs:
            children = self._unstub(key, children)
        flags = (_HAS_ITERATION if iteration is not None else 0) | (_STEP if group_step else 0)
        bucket_index = -1
        if bucket is not None:
            flags |= _BUCKETED
            bucket_index = _BUCKET_INDEX.get(bucket, -1) if isinstance(bucket, str) else -1
            if bucket_index < 0:
                self._violation(
                    "unknown-bucket",
                    f"span {name!r} (span {key & _MASK:016x}) has an unknown bucket value "
                    f"{bucket!r} (known: {', '.join(BUCKETS)})",
                    [(name, key)],
                )
        if children is not None and children.cands:
            # This span is the parent the candidates were waiting for.
            if flags & _DISQUALIFIES:
                for cand in children.cands:
                    self._fold_step(cand, children)
            else:
                for cand in children.cands:
                    self._confirm(cand)
            children.cands = None
        candidate = (  # of no duration, a step in the making only (see _finished)
            bucket is None
            and iteration is not None
            and (self._step_name is None or self._step_name.search(name) is not None)
        )
        parent = self._home.get(pkey) if pkey is not None else None
        if group_step or (candidate and (pkey is None or parent is not None)):
            # A step for sure: marked as one, a root, or its parent is known.
            if group_step or parent is None or not parent[2] & _DISQUALIFIES:
                if bucket is not None:  # a bucketed step (group step): a bucketed span too
                    if children is not None and children.has_bucketed():
                        self._nested(name, key, children.examples())
                    else:  # no bucketed descendant: it counts, over its whole interval
                        if children is None:
                            children = _Group()
                        children.leaves.append((start, end, bucket_index, name, key))
                step = self._make_step(name, key, pkey, origin, iteration, start, end, children)
                self._remember(key, (pkey, step, flags | _STEP, name))
                self._confirm(step)
                return
        elif candidate and pkey is not None:
            # Its parent has not arrived: a step unless the parent carries an iteration.
            step = self._make_step(name, key, pkey, origin, iteration, start, end, children, True)
            target = self._pending.get(pkey)
            if target is None:
                target = self._wait(pkey)
            if target.cands is None:
                target.cands = []
            target.cands.append(step)
            self._remember(key, (pkey, step, flags, name))
            if self._load > self._limit:
                self._evict()
            return
        if children is None and parent is None and pkey is not None:
            # The common case, inlined: a childless span whose parent is still open.
            target = self._pending.get(pkey)
            if target is None:
                target = self._wait(pkey)
            self._remember(key, (pkey, target, flags, name))
            if bucket is not None:
                target.leaves.append((start, end, bucket_index, name, key))
                self._load += 1
            if self._load > self._limit:
                self._evict()
            return
        payload = children if children is not None else _Group()
        if bucket is not None:
            if payload.has_bucketed():
                self._nested(name, key, payload.examples())
            else:
                payload.leaves.append((start, end, bucket_index, name, key))
        self._attach(payload, key, pkey, parent, flags, name)

    # -- moving subtrees up -----------------------------------------------------

    def _attach(
        self,
        payload: _Group,
        key: int,
        pkey: int | None,
        parent: _Entry | None,
        flags: int,
        name: str,
    ) -> None:
        if pkey is None:
            payload.fwd = _OUTSIDE
            payload.leaves.clear()  # outside any step: counted nowhere
            self._remember(key, (None, _OUTSIDE, flags, name))
            return
        if parent is None:  # the parent is still open: wait in its group
            target = self._pending.get(pkey)
            if target is None:
                target = self._wait(pkey)
            self._load += len(payload.leaves)
            _merge(payload, target)
            self._remember(key, (pkey, target, flags, name))
            if self._load > self._limit:
                self._evict()
            return
        # A late child: its parent arrived (ended) before it.
        container = _resolve(parent[1])
        if container is payload:
            # The parent's chain of parents leads back to this span (parent ids in a
            # cycle): no span of it has a parent, so none can wait for one.
            self._cycle(payload, key, pkey, flags, name)
            return
        if payload.has_bucketed():
            ancestor = self._bucketed_ancestor(pkey)
            if ancestor is not None:
                self._nested(ancestor[0], ancestor[1], payload.examples())
                payload.leaves.clear()
                payload.pre = None
                payload.nb = 0
        if isinstance(container, _Group):  # still waiting (a settled group forwards)
            self._load += len(payload.leaves)
            _merge(payload, container)
        elif isinstance(container, _Step):
            if container.sealed:
                if payload.has_bucketed():
                    self._late(container, payload.examples())
                payload.leaves.clear()
                payload.pre = payload.phases = payload.stalls = None
                payload.nb = 0
            else:
                if container.raw is not None:  # a candidate: clipped once confirmed
                    container.raw.extend(payload.leaves)
                    self._load += len(payload.leaves)
                    _add_sums(container, payload)
                elif container.stub:  # its wait given up: its bucketed spans count nowhere
                    self.evicted_leaves += len(payload.leaves) + payload.nb
                    payload.pre = payload.phases = None
                    payload.nb = 0
                else:
                    container.add_leaves(payload.leaves)
                    _add_sums(container, payload)
                container.add_stalls(payload)
                payload.leaves.clear()
            payload.fwd = container
        else:
            if container is _CYCLE:  # under a cycle of parent ids: said, as its own spans
                self.cycle_leaves += len(payload.leaves) + payload.nb
                payload.nb = 0
            payload.fwd = container
            payload.leaves.clear()
        self._remember(key, (pkey, container, flags, name))
        if self._load > self._limit:
            self._evict()

    def _cycle(self, payload: _Group, key: int, pkey: int, flags: int, name: str) -> None:
        """*key*'s parent ids come back to it: the cycle's spans are settled as spans whose
        parent is missing (their candidates steps, their bucketed spans outside any step),
        counted in ``cycles`` (and ``cycle_leaves``); their later children go outside."""
        self.cycles += 1
        self.cycle_leaves += self._missing(payload)
        payload.fwd = _CYCLE  # (the groups forwarding to it, its spans' entries)
        self._remember(key, (pkey, _CYCLE, flags, name))
        if self._cycle_first is None:
            self._cycle_first = f"{name!r} (span {key & _MASK:016x}, parent {pkey & _MASK:016x})"

    def _make_step(
        self,
        name: str,
        key: int,
        pkey: int | None,
        origin: int,
        iteration: int | None,
        start: float,
        end: float,
        children: _Group | None,
        candidate: bool = False,
    ) -> _Step:
        """A step of *children*'s subtree; a *candidate* keeps its leaves unclipped.

        A candidate's leaves are clipped to it once it is confirmed; folded
        into its parent's subtree instead, they are clipped to the step they
        end up in, as if the candidate had never been taken for one.
        """
        step = _Step(name, key, origin, iteration, start, end, pkey)
        if candidate:
            step.raw = []
        if children is None:
            return step
        leaves = children.leaves
        examples = children.examples()
        if candidate:
            step.raw, children.leaves = leaves, []
            self._load += len(leaves)  # they wait with the candidate
        else:
            step.add_leaves(leaves)
        _add_sums(step, children)
        step.add_stalls(children)
        if examples:
            step.ex = examples
        if not candidate and sum(step.sums) > step.end - step.start:
            step.overlaps = _overlapping(leaves)
        children.leaves.clear()
        children.fwd = step
        step.child = children
        return step

    def _fold_step(self, step: _Step, into: _Group) -> None:
        """A candidate turned out not to be a step: its sums join its parent's subtree."""
        if step.raw is not None:  # its leaves, unclipped, join the subtree's
            into.leaves.extend(step.raw)
            self._load -= len(step.raw)
            step.raw = None
        if isinstance(step.sums, list):
            if into.pre is None:
                into.pre = step.sums
            else:
                for i, seconds in enumerate(step.sums):
                    into.pre[i] += seconds
        if step.phases:
            into.phases = _merged(into.phases, step.phases)
        into.nb += step.leaves + step.nb
        if step.stall_spans:  # clipped to the candidate: clipped again where they end up
            if into.stalls is None:
                into.stalls = []
            into.stalls.extend(step.stall_spans)
            step.stall_spans = None
        into.add_examples(step.ex)
        step.fwd = into
        # Late children of the candidate (or of its subtree) now go straight to *into*,
        # and the candidate itself can be freed.
        if step.child is not None:
            step.child.fwd = into
            step.child = None
        entry = self._home.get(step.key)
        if entry is not None and entry[1] is step:
            self._home[step.key] = (entry[0], into, entry[2], entry[3])

    def _confirm(self, step: _Step) -> None:
        """*step* is a step: it finishes once the spans arriving end past its grace."""
        step.stub = False
        raw = step.raw
        if raw is not None:  # a candidate: its leaves are clipped to it now
            step.raw = None
            self._load -= len(raw)
            step.add_leaves(raw)
            if sum(step.sums) > step.end - step.start:
                step.overlaps = _overlapping(raw)
        if step.iteration is not None and step.end > step.start:  # for _ruled_out
            where = (step.key >> 64, step.iteration)
            stepped = self._stepped
            seen = stepped.get(where)
            if seen is None:
                if len(stepped) >= _STEPS_REMEMBERED:
                    del stepped[next(iter(stepped))]
                seen = stepped[where] = []
            elif len(seen) >= _STEPS_PER_KEY:
                del seen[0]
            seen.append((step.start, step.end, step.key, step.parent, step.origin))
        self._seq += 1
        due = step.end + self._grace
        heapq.heappush(self._held, (due, self._seq, step))
        if due < self._next_seal:
            self._next_seal = due

    def _seal(self, now: float) -> None:
        """Settle the waits for remote parents past their deadline, then finish the held
        steps whose end plus grace is before *now* (µs)."""
        remote = self._remote
        if remote and remote[0][0] < now:
            self._settle_remote(now)
        held = self._held
        while held and held[0][0] < now:
            self._finished(heapq.heappop(held)[2])
        self._next_seal = min(
            held[0][0] if held else math.inf, remote[0][0] if remote else math.inf
        )

    def _finished(self, step: _Step) -> None:
        step.sealed = True
        step.child = None
        if not step.end > step.start:  # no duration: no step, its leaves count nowhere
            self.void_steps += 1
            self.void_leaves += step.leaves + step.nb
            if self._void_first is None:
                self._void_first = f"{_where(step)}, dur {(step.end - step.start) / 1e6:g} s"
            return
        row = StepRow(
            name=step.name,
            origin=step.origin,
            iteration=step.iteration,
            trace_id=self._trace_of(step.key),
            span_id=f"{step.key & _MASK:016x}",
            start=step.start,
            end=step.end,
            sums=list(step.sums),
            leaves=step.leaves + step.nb,
            parent_missing=step.orphan,
            stalled=step.stalled,
            phases=dict(step.phases) if step.phases else {},
        )
        order = (step.start, step.origin, step.key)
        found: list[Violation] = []
        if row.attributed > row.wall + 1e-3:
            found.append(self._over_wall(step, row))
            self.violation_count += 1
            if self._keep:
                self._over.append((order, found[0]))
        elif step.twice > 0:  # within the wall: not an invariant broken, but said
            self.overlap_steps += 1
            self.overlap_us += step.twice
            if self._keep and self._overlap_first is None:
                self._overlap_first = self._overlap(step)
        if self._keep:
            self._rows.append((order, row))
        if self._on_step is not None:
            self._on_step(row, found)

    def _wait(self, pkey: int) -> _Group:
        """A new group of spans waiting for *pkey*; the caller gives the oldest up past
        max_pending (:meth:`_evict`) once it has put its span in the group."""
        group = self._pending[pkey] = _Group()
        self._load += 1
        if self._remote_keys and pkey in self._remote_keys:
            self._remote_open += 1
        limit = self._max_pending
        if limit is not None:
            waits = self._waits
            waits.append(pkey)
            if len(waits) > 2 * limit + 64:  # forget keys no longer waiting
                pending = self._pending
                self._waits = deque(k for k in waits if k in pending)
        return group

    def _take(self, key: int) -> _Group | None:
        """The group waiting for *key* (which has arrived), no longer waiting."""
        group = self._pending.pop(key, None)
        if group is not None:
            self._load -= 1 + len(group.leaves)
            if self._remote_keys and key in self._remote_keys:
                self._remote_open -= 1
        return group

    def _evict(self) -> None:
        """Give the oldest waits up until the waiting groups and leaves fit max_pending."""
        pending, waits = self._pending, self._waits
        while waits and self._load > self._limit:
            key = waits.popleft()
            group = pending.pop(key, None)
            if group is None:
                continue
            self._load -= 1 + len(group.leaves)
            if self._remote_keys and key in self._remote_keys:
                self._remote_open -= 1
            self.evicted += 1
            self.evicted_leaves += self._give_up(key, group)

    def _give_up(self, key: int, group: _Group) -> int:
        """Drop evicted *group*'s bucketed spans (and its candidates'); keep the candidates
        (per-prompt spans waiting to be ruled out by the step) as a stub for *key*.
        Returns the bucketed spans dropped."""
        dropped = len(group.leaves) + group.nb
        cands = group.cands
        if cands:
            for cand in cands:
                raw = cand.raw
                if raw is not None:
                    dropped += len(raw)
                    self._load -= len(raw)
                    cand.raw = None  # bucketed spans arriving under it: see _attach
                cand.stub = True
            stub = self._stubs.get(key)
            if stub is None:
                self._stubs[key] = cands
            else:
                stub.extend(cands)
            group.cands = None
            self._stubbed += len(cands)
        group.leaves.clear()
        group.nb = 0
        group.pre = group.phases = group.stalls = None
        group.fwd = _OUTSIDE
        if self._stubbed > self._limit:
            self._trim_stubs()
        return dropped

    def _trim_stubs(self) -> None:
        """Give the oldest stubs up until at most max_pending candidates wait in them.

        Their candidates are no steps (``dropped_stubs``): their bucketed spans
        are gone (``evicted_leaves``), so as steps they would report a wall with
        no bucket in it, and most are per-prompt spans that their step, still
        open, would rule out. Bucketed spans arriving under one later still
        count in ``evicted_leaves`` (``stub`` stays set)."""
        stubs = self._stubs
        while stubs and self._stubbed > self._limit:
            cands = stubs.pop(next(iter(stubs)))
            self._stubbed -= len(cands)
            self.dropped_stubs += len(cands)

    def _unstub(self, key: int, children: _Group | None) -> _Group | None:
        """*children* with the candidates of *key*'s evicted waits, *key* having arrived."""
        cands = self._stubs.pop(key, None)
        if cands is None:
            return children
        self._stubbed -= len(cands)
        for cand in cands:
            cand.stub = False
        if children is None:
            children = _Group()
        if children.cands is None:
            children.cands = cands
        else:
            children.cands.extend(cands)
        return children

    def _settle_stub(self, key: int, rule_out: bool) -> int:
        """The candidates of *key*'s evicted waits: its parent is missing. Returns the
        bucketed spans dropped (counted in ``evicted_leaves`` by the caller)."""
        cands = self._stubs.pop(key, None)
        if cands is None:
            return 0
        self._stubbed -= len(cands)
        for cand in cands:
            cand.stub = False
        group = _Group()
        group.cands = cands
        return self._missing(group, rule_out)

    def awaited(self) -> int:
        """Parents spans wait for now, those of other processes (remote) left out.

        Any thread: it reads two counts, never a collection the feeding thread changes.
        """
        return max(0, len(self._pending) - self._remote_open)

    def _remote_wait(self, pkey: int, end: float) -> None:
        """Note a wait for the remote parent *pkey*: settled if it has not come by
        *end* plus the grace (a span of this process ends that soon after its child)."""
        if pkey not in self._remote_keys:
            self._remote_keys.add(pkey)
            if pkey in self._pending:
                self._remote_open += 1
            deadline = end + self._grace
            self._remote.append((deadline, pkey))
            if deadline < self._next_seal:  # _seal settles it, on the span-time clock
                self._next_seal = deadline

    def _settle_remote(self, now: float) -> None:
        """Settle the waits for remote parents past their deadline: parents missing."""
        remote, keys = self._remote, self._remote_keys
        while remote and remote[0][0] < now:
            _, pkey = remote.popleft()
            group = self._take(pkey)
            keys.discard(pkey)
            if group is not None:  # its leaves: outside any step of this process
                self._missing(group, rule_out=False)
            if self._stubs:
                self.evicted_leaves += self._settle_stub(pkey, rule_out=False)

    def _missing(self, group: _Group, rule_out: bool = True) -> int:
        """*group*'s parent never arrives: its candidates are steps, its leaves outside.

        A candidate inside a step of its trace with its ``rl.iteration`` is no
        step (a detached finalize span whose bucketed parent left the window):
        its leaves go with the group's. Not when *rule_out* is false: the
        parent is another process's, so no finalize span of this one.
        Returns the bucketed leaves counted nowhere.

        With *rule_out*, the candidates (siblings: *group* waits for their
        parent) are decided earliest start first, whatever order they ended in,
        and those of one origin and ``rl.iteration`` that overlap make one step:
        the per-prompt spans of a step span never written. The earliest is the
        step; each later one starting before the step's end so far joins it
        (:meth:`_join`), its end extending the step's, so a chain of overlapping
        prompts, started as an async pump dispatches them, is one step with
        every prompt's bucketed spans, not one step each.
        """
        cands = group.cands
        if cands:
            if rule_out:
                if len(cands) > 1:
                    cands = sorted(cands, key=_start_of)
                heads: dict[tuple[int | None, int], _Step] = {}  # the latest per kind
                steps = []
                for cand in cands:
                    where = (cand.iteration, cand.origin)
                    head = heads.get(where)
                    if head is not None and cand.start < head.end:
                        self._join(cand, head)
                    elif self._ruled_out(cand):
                        self._fold_step(cand, group)
                    else:
                        heads[where] = cand
                        cand.orphan = True
                        steps.append(cand)
                # Confirmed once whole: clipped to, and remembered with, the joined interval.
                for cand in steps:
                    self._confirm(cand)
            else:
                for cand in cands:
                    cand.orphan = True
                    self._confirm(cand)
            group.cands = None
        dropped = len(group.leaves) + group.nb
        group.nb = 0
        group.leaves.clear()
        group.pre = group.phases = group.stalls = None
        group.fwd = _OUTSIDE
        return dropped

    def _join(self, cand: _Step, head: _Step) -> None:
        """*cand*, a sibling candidate overlapping *head* (unconfirmed), is part of its step:
        *head*'s interval extends over it and takes its subtree; the spans arriving for
        *cand* later go to *head*."""
        if cand.end > head.end:
            head.end = cand.end
        raw = cand.raw
        if raw is not None:
            cand.raw = None
            if head.raw is None:  # a given-up wait's candidate: its own leaves are gone
                head.raw = raw  # still in _load: they wait with the head
            else:
                head.raw.extend(raw)
        if isinstance(cand.sums, list):
            sums = head.writable_sums()
            for i, seconds in enumerate(cand.sums):
                sums[i] += seconds
        if cand.phases:
            head.phases = _merged(head.phases, cand.phases)
        head.nb += cand.leaves + cand.nb
        if cand.stall_spans:
            for start, end in cand.stall_spans:
                head.add_stall(start, end)
            cand.stall_spans = None
        if cand.ex and len(head.ex) < 3:
            head.ex = [*head.ex, *cand.ex][:3]
        cand.fwd = head
        if cand.child is not None:
            cand.child.fwd = head
            cand.child = None
        entry = self._home.get(cand.key)
        if entry is not None and entry[1] is cand:
            self._home[cand.key] = (entry[0], head, entry[2], entry[3])

    def _ruled_out(self, cand: _Step) -> bool:
        """Whether a step of *cand*'s trace and ``rl.iteration`` contains its start, other
        than a sibling of another origin (a step of the same parent from another process
        or file: another rank's step of the iteration under the one job span, missing
        from the inputs). A sibling of its own origin rules it out: the per-prompt spans
        of a step span never written (a killed run) are one step, not one each."""
        if cand.iteration is None:
            return False
        seen = self._stepped.get((cand.key >> 64, cand.iteration))
        if seen:
            start, parent, origin = cand.start, cand.parent, cand.origin
            for first, last, key, pkey, source in seen:
                if (
                    first <= start < last
                    and key != cand.key
                    and (pkey != parent or source == origin)
                ):
                    return True
        return False

    def _remember(self, key: int, entry: _Entry) -> None:
        home = self._home
        home[key] = entry
        order = self._order
        order.append(key)
        if len(order) > self._window:
            home.pop(order.popleft(), None)

    def _bucketed_ancestor(self, key: int | None) -> Example | None:
        for _ in range(_WALK_LIMIT):
            if key is None:
                return None
            entry = self._home.get(key)
            if entry is None:
                return None
            if entry[2] & _BUCKETED:
                return entry[3], key
            if entry[2] & _STEP:
                return None
            key = entry[0]
        return None

    # -- results ----------------------------------------------------------------

    def _nested(self, name: str, key: int, inner: list[Example]) -> None:
        names = ", ".join(f"{n!r} (span {k & _MASK:016x})" for n, k in inner)
        self._violation(
            "nested-bucket",
            f"bucketed span {name!r} (span {key & _MASK:016x}) has bucketed descendants: {names}",
            [(name, key), *inner],
        )

    def _violation(self, kind: str, message: str, spans: list[Example]) -> Violation:
        found = Violation(
            kind, message, [(n, f"{k & _MASK:016x}", self._trace_of(k)) for n, k in spans]
        )
        self.violation_count += 1
        if self._keep:
            self._violations.append(found)
        if self._on_violation is not None:
            self._on_violation(found)
        return found

    def _trace_of(self, key: int) -> str:
        """The trace id of *key*: the id itself, or its index in the table (non-hex)."""
        high = key >> 64
        if high >= _TRACE_LIMIT:
            return self._trace_ids[high - _TRACE_LIMIT]
        return f"{high:032x}"

    def _late(self, step: _Step, inner: list[Example]) -> None:
        names = ", ".join(f"{n!r} (span {k & _MASK:016x})" for n, k in inner)
        self._violation(
            "late-bucket",
            f"bucketed span{'s' if len(inner) > 1 else ''} {names} arrived after step "
            f"{step.name!r} (span {step.key & _MASK:016x}) had finished (a span ending more "
            f"than {self._grace / 1e6:g} s after it had arrived) and "
            f"{'are' if len(inner) > 1 else 'is'} not counted; a bucketed span ends "
            "within its step (a detached tail is left unbucketed, like a finalize span)",
            [(step.name, step.key), *inner],
        )

    def finish(self) -> RollupResult:
        """Settle what is still waiting (parents never seen), finish every step, return them.

        Rows are in start order (with ``keep=False``, none: they went to ``on_step``).
        """
        for _, pkey in self._remote:  # another process's parents: missing, as expected
            group = self._take(pkey)
            if group is not None:
                self._missing(group, rule_out=False)
            if self._stubs:
                self.evicted_leaves += self._settle_stub(pkey, rule_out=False)
        self._remote.clear()
        self._remote_keys.clear()
        self._remote_open = 0
        missing = len(self._pending)
        for key, group in self._pending.items():
            if self._stubs and key in self._stubs:  # decided with the wait's own candidates
                self._unstub(key, group)
            self.abandoned_leaves += self._missing(group)
        self.abandoned += missing
        for key in list(self._stubs):
            self.evicted_leaves += self._settle_stub(key, rule_out=True)
        self._stubbed = 0
        self._pending.clear()
        self._waits.clear()
        self._load = 0
        self._seal(math.inf)
        self._rows.sort(key=lambda item: item[0])
        rows = [row for _, row in self._rows]
        self._over.sort(key=lambda item: item[0])
        violations = self._violations + [v for _, v in self._over]
        notes = []
        if self.overlap_steps:
            plural = "s" if self.overlap_steps != 1 else ""
            notes.append(
                f"{self.overlap_steps} step{plural} count bucketed spans that overlap (concurrent "
                f"tasks): at least {self.overlap_us / 1e6:.6f} s of wall time is in two buckets' "
                f"sums, within each step's wall; the first: {self._overlap_first}"
            )
        if self.void_steps:
            notes.append(self.void_note())
        if self.bad_iterations:
            notes.append(self.bad_iteration_note())
        if self.cycles:
            notes.append(self.cycle_note())
        if self.dropped_stubs:
            count = self.dropped_stubs
            notes.append(
                f"{count} stamped span{'s' if count != 1 else ''} of given-up waits "
                f"{'were' if count != 1 else 'was'} dropped, past max_pending of them "
                "waiting for their parent: no step among them is reported"
            )
        if missing:
            plural = "s" if missing != 1 else ""
            leaves = self.abandoned_leaves
            lost = (
                f"; {leaves} bucketed span{'s' if leaves != 1 else ''} waiting for them "
                "counted in no step"
                if leaves
                else ""
            )
            notes.append(
                f"{missing} parent span{plural} referenced but not found in the inputs "
                f"(another rank's file missing, or a detached span that arrived very late){lost}"
            )
        return RollupResult(
            rows,
            violations,
            spans=self._spans,
            without_ids=self._without_ids,
            duplicates=self._duplicates,
            notes=notes,
            bad_ids=self._bad_ids,
            evicted=self.evicted,
            evicted_leaves=self.evicted_leaves,
            abandoned=self.abandoned,
            abandoned_leaves=self.abandoned_leaves,
            void_steps=self.void_steps,
            void_leaves=self.void_leaves,
            bad_iterations=self.bad_iterations,
            dropped_stubs=self.dropped_stubs,
            cycles=self.cycles,
            cycle_leaves=self.cycle_leaves,
        )

    @property
    def without_ids(self) -> int:
        """Events or spans skipped so far: no finite times, or ids that are not hex."""
        return self._without_ids

    def bad_iteration_note(self) -> str:
        """What the spans whose ``rl.iteration`` is not an integer lost."""
        count = self.bad_iterations
        return (
            f"{count} span{'s' if count != 1 else ''} had an rl.iteration that is not a 64-bit "
            "integer (a number the tracer provider wrote as text, such as a numpy integer: pass "
            "int(i)), so it was ignored: such a span is no step by it"
            + (f"; the first: {self._bad_iteration_first}" if self._bad_iteration_first else "")
        )

    def cycle_note(self) -> str:
        """What the spans whose parent ids form a cycle took with them."""
        count, leaves = self.cycles, self.cycle_leaves
        return (
            f"{count} span{'s' if count != 1 else ''} closed a cycle of parent ids (a span "
            "among its own ancestors: ids rewritten or reused by hand), so "
            f"{'its' if count == 1 else 'their'} cycle was taken as having no parent: "
            f"{leaves} bucketed span{'s' if leaves != 1 else ''} in "
            f"{'it' if count == 1 else 'them'} counted in no step"
            + (f"; the first: {self._cycle_first}" if self._cycle_first else "")
        )

    def void_note(self) -> str:
        """What the spans that would be steps but have no duration took with them."""
        count, leaves = self.void_steps, self.void_leaves
        one = count == 1
        spans = "1 span that would be a step" if one else f"{count} spans that would be steps"
        what = "it is not one" if one else "they are not"
        return (
            f"{spans} had no positive duration, so {what}: {leaves} bucketed "
            f"span{'s' if leaves != 1 else ''} under {'it' if one else 'them'} "
            "counted in no step" + (f"; the first: {self._void_first}" if self._void_first else "")
        )

    def _overlap(self, step: _Step) -> str:
        pairs = "; ".join(
            f"{a[0]!r} (span {a[1] & _MASK:016x}) overlaps {b[0]!r} (span {b[1] & _MASK:016x})"
            for a, b in step.overlaps
        )
        return f"{_where(step)}, {step.twice / 1e6:.6f} s: {pairs}"

    def _over_wall(self, step: _Step, row: StepRow) -> Violation:
        where = _where(step)
        spans: list[Example] = [(step.name, step.key)]
        detail = ""
        if step.overlaps:
            pairs = "; ".join(
                f"{a[0]!r} (span {a[1] & _MASK:016x}) overlaps {b[0]!r} (span {b[1] & _MASK:016x})"
                for a, b in step.overlaps
            )
            detail = f"; overlapping bucketed spans: {pairs}"
            for a, b in step.overlaps:
                spans.extend((a, b))
        return Violation(
            "over-wall",
            f"{where}: {row.attributed / 1e6:.6f} s in buckets exceed its wall time "
            f"{row.wall / 1e6:.6f} s{detail}",
            [(n, f"{k & _MASK:016x}", self._trace_of(k)) for n, k in spans],
        )
