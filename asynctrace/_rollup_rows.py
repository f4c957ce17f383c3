"""What the goodput rollup gives: one row per step, the broken invariants, the result."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Violation:
    """One broken invariant, with the spans involved as ``(name, span_id, trace_id)``."""

    kind: str
    message: str
    spans: list[tuple[str, str, str]]


@dataclass
class StepRow:
    """One step: where it ran, its wall time and its seconds per bucket (µs inside)."""

    name: str
    origin: int
    iteration: int | None
    trace_id: str
    span_id: str
    start: float
    end: float
    sums: list[float]
    leaves: int
    parent_missing: bool = False
    stalled: float = 0.0  # event-loop stall µs inside the step, counted in no bucket
    phases: dict[str, float] = field(default_factory=dict)  # leaf name -> µs in the step

    @property
    def wall(self) -> float:
        """The step's duration (µs)."""
        return self.end - self.start

    @property
    def attributed(self) -> float:
        """The µs counted in a bucket."""
        return sum(self.sums)

    @property
    def unattributed(self) -> float:
        """The µs counted in no bucket: the wall minus the bucket sums."""
        return self.wall - self.attributed


@dataclass
class RollupResult:
    """Steps in start order, the broken invariants, and a few counters."""

    steps: list[StepRow]
    violations: list[Violation]
    spans: int = 0
    without_ids: int = 0
    duplicates: int = 0
    notes: list[str] = field(default_factory=list)
    bad_ids: int = 0  # events skipped: a span id not a 64-bit hex number
    evicted: int = 0  # waits given up past max_pending
    evicted_leaves: int = 0  # ...the bucketed spans in them, counted in no step
    abandoned: int = 0  # waits still open at the end: their parent never arrived
    abandoned_leaves: int = 0  # ...the bucketed spans in them, counted in no step
    void_steps: int = 0  # spans that would be steps but have no positive duration
    void_leaves: int = 0  # ...the bucketed spans of their subtrees, counted in no step
    bad_iterations: int = 0  # spans whose rl.iteration is not a 64-bit integer (ignored)
    dropped_stubs: int = 0  # stamped spans of given-up waits dropped past max_pending
    cycles: int = 0  # spans closing a cycle of parent ids: their cycle taken as parentless
    cycle_leaves: int = 0  # ...the bucketed spans in it, counted in no step
