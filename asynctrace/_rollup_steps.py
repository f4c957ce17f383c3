"""The rollup's steps: made from a subtree, confirmed, held for their grace, finished."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Final

from ._rollup_notes import RollupNotes
from ._rollup_rows import StepRow, Violation
from ._rollup_tree import (
    MASK,
    Entry,
    Group,
    Step,
    add_sums,
    merged,
    overlapping_pairs,
    step_label,
)

__all__ = ["RollupSteps"]

_STEPS_REMEMBERED: Final = 64  # (trace, rl.iteration) of recent steps, for _ruled_out
_STEPS_PER_KEY: Final = 4


class RollupSteps(RollupNotes):
    """How a rollup makes a step of a subtree, confirms it and finishes it into a row."""

    _on_step: Callable[[StepRow, list[Violation]], None] | None
    _stepped: dict[tuple[int, int], list[tuple[float, float, int, int | None, int]]]
    _load: int
    _held: list[tuple[float, int, Step]]
    _seq: int
    _next_seal: float
    _rows: list[tuple[tuple[float, int, int], StepRow]]
    _over: list[tuple[tuple[float, int, int], Violation]]
    overlap_steps: int
    overlap_us: float
    _overlap_first: str | None
    _home: dict[int, Entry]

    def _make_step(
        self,
        name: str,
        key: int,
        pkey: int | None,
        origin: int,
        iteration: int | None,
        start: float,
        end: float,
        children: Group | None,
        candidate: bool = False,
    ) -> Step:
        """A step of *children*'s subtree; a *candidate* keeps its leaves unclipped.

        A candidate's leaves are clipped to it once it is confirmed; folded
        into its parent's subtree instead, they are clipped to the step they
        end up in, as if the candidate had never been taken for one.
        """
        step = Step(name, key, origin, iteration, start, end, pkey)
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
        add_sums(step, children)
        step.add_stalls(children)
        if examples:
            step.ex = examples
        if not candidate and sum(step.sums) > step.end - step.start:
            step.overlaps = overlapping_pairs(leaves)
        children.leaves.clear()
        children.fwd = step
        step.child = children
        return step

    def _fold_step(self, step: Step, into: Group) -> None:
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
            into.phases = merged(into.phases, step.phases)
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

    def _confirm(self, step: Step) -> None:
        """*step* is a step: it finishes once the spans arriving end past its grace."""
        step.stub = False
        raw = step.raw
        if raw is not None:  # a candidate: its leaves are clipped to it now
            step.raw = None
            self._load -= len(raw)
            step.add_leaves(raw)
            if sum(step.sums) > step.end - step.start:
                step.overlaps = overlapping_pairs(raw)
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

    def _finished(self, step: Step) -> None:
        step.sealed = True
        step.child = None
        if not step.end > step.start:  # no duration: no step, its leaves count nowhere
            self.void_steps += 1
            self.void_leaves += step.leaves + step.nb
            if self._void_first is None:
                self._void_first = f"{step_label(step)}, dur {(step.end - step.start) / 1e6:g} s"
            return
        row = StepRow(
            name=step.name,
            origin=step.origin,
            iteration=step.iteration,
            trace_id=self._trace_of(step.key),
            span_id=f"{step.key & MASK:016x}",
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
