"""The record of one finished step's goodput, and the numbers it shares with the command line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ._rollup import BUCKETS, StepRow

__all__ = ["StepGoodput", "step_numbers"]


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
