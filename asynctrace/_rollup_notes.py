"""The rollup's violations and notes: what it found wrong, said once with examples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ._rollup_rows import StepRow, Violation
from ._rollup_tree import MASK, Example, Step, step_label

__all__ = ["_TRACE_LIMIT", "RollupNotes"]

_TRACE_LIMIT: Final = 1 << 128  # ids past it: an index in the table of non-hex trace ids


class RollupNotes:
    """How a rollup reports violations, and the notes on what it counted nowhere."""

    _on_violation: Callable[[Violation], None] | None
    _grace: float
    _keep: bool
    void_steps: int
    void_leaves: int
    _void_first: str | None
    bad_iterations: int
    _bad_iteration_first: str | None
    cycles: int
    cycle_leaves: int
    _cycle_first: str | None
    violation_count: int
    _trace_ids: list[str]
    _violations: list[Violation]

    def _nested(self, name: str, key: int, inner: list[Example]) -> None:
        names = ", ".join(f"{n!r} (span {k & MASK:016x})" for n, k in inner)
        self._violation(
            "nested-bucket",
            f"bucketed span {name!r} (span {key & MASK:016x}) has bucketed descendants: {names}",
            [(name, key), *inner],
        )

    def _violation(self, kind: str, message: str, spans: list[Example]) -> Violation:
        found = Violation(
            kind, message, [(n, f"{k & MASK:016x}", self._trace_of(k)) for n, k in spans]
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

    def _late(self, step: Step, inner: list[Example]) -> None:
        names = ", ".join(f"{n!r} (span {k & MASK:016x})" for n, k in inner)
        self._violation(
            "late-bucket",
            f"bucketed span{'s' if len(inner) > 1 else ''} {names} arrived after step "
            f"{step.name!r} (span {step.key & MASK:016x}) had finished (a span ending more "
            f"than {self._grace / 1e6:g} s after it had arrived) and "
            f"{'are' if len(inner) > 1 else 'is'} not counted; a bucketed span ends "
            "within its step (a detached tail is left unbucketed, like a finalize span)",
            [(step.name, step.key), *inner],
        )

    def _overlap(self, step: Step) -> str:
        pairs = "; ".join(
            f"{a[0]!r} (span {a[1] & MASK:016x}) overlaps {b[0]!r} (span {b[1] & MASK:016x})"
            for a, b in step.overlaps
        )
        return f"{step_label(step)}, {step.twice / 1e6:.6f} s: {pairs}"

    def _over_wall(self, step: Step, row: StepRow) -> Violation:
        where = step_label(step)
        spans: list[Example] = [(step.name, step.key)]
        detail = ""
        if step.overlaps:
            pairs = "; ".join(
                f"{a[0]!r} (span {a[1] & MASK:016x}) overlaps {b[0]!r} (span {b[1] & MASK:016x})"
                for a, b in step.overlaps
            )
            detail = f"; overlapping bucketed spans: {pairs}"
            for a, b in step.overlaps:
                spans.extend((a, b))
        return Violation(
            "over-wall",
            f"{where}: {row.attributed / 1e6:.6f} s in buckets exceed its wall time "
            f"{row.wall / 1e6:.6f} s{detail}",
            [(n, f"{k & MASK:016x}", self._trace_of(k)) for n, k in spans],
        )

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
