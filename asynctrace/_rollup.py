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

The rollup is made of one part per concern: the intake of events and spans
(:mod:`asynctrace._rollup_intake`), their placement into groups and steps
(:mod:`asynctrace._rollup_spans`), settling steps past their grace and waits
whose parent never arrives (:mod:`asynctrace._rollup_settle`), the steps
themselves (:mod:`asynctrace._rollup_steps`), the bounded waits
(:mod:`asynctrace._rollup_waits`) and the violations and notes
(:mod:`asynctrace._rollup_notes`). This module makes one and finishes it.
"""

from __future__ import annotations

import math
import re
import sys
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from ._rollup_intake import RollupIntake
from ._rollup_rows import RollupResult, StepRow, Violation
from ._rollup_spans import BUCKETS
from ._rollup_tree import OUTSIDE, Entry, Example, Group, Step

__all__ = ["BUCKETS", "DEFAULT_GRACE_US", "Rollup", "RollupResult", "StepRow", "Violation"]

DEFAULT_GRACE_US: Final = 1_000_000.0
"""How long after its end (µs, in span end time) a step still takes late children."""


class Rollup(RollupIntake):
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
        self._stubs: dict[int, list[Step]] = {}
        self._stubbed = 0  # the candidates in _stubs
        # Parents whose evicted waits held bucketed spans: one of those spans by parent key,
        # oldest first, for the last max_pending keys (1,024 at least); the parent arriving
        # bucketed breaks the nesting rule all the same, and arriving unbucketed passes
        # this up to its own.
        self._gone: dict[int, list[Example]] = {}
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
        self._held: list[tuple[float, int, Step]] = []  # confirmed, unfinished: heap by end
        self._seq = 0
        self._next_seal = math.inf  # the earliest end + grace among held steps
        self._rows: list[tuple[tuple[float, int, int], StepRow]] = []
        self._over: list[tuple[tuple[float, int, int], Violation]] = []
        # Steps whose bucketed spans overlap short of the wall, the µs counted twice (at
        # least), and the first such step's description: a note, not a violation.
        self.overlap_steps = 0
        self.overlap_us = 0.0
        self._overlap_first: str | None = None
        self._pending: dict[int, Group] = {}
        self._home: dict[int, Entry] = {}
        # The last leaf's entry: its siblings of the same name share the tuple, so the
        # window holds one object the collector tracks per run of siblings, not per span
        # (entries live long enough to reach the oldest generation, which every span
        # would otherwise make bigger and collect more often, on any thread).
        self._sibling: Entry = (None, OUTSIDE, 0, "")
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
