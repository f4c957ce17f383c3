"""The goodput document: steps, run total, violations and inputs, as JSON-ready values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..rollup import BUCKETS, StepRow, step_numbers
from ._collect import STEP_RULE, Collected
from ._origins import Origins

__all__ = ["to_json"]


def _seconds(us: float) -> float:
    return round(us / 1e6, 6)


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 6) if whole > 0 else None


def _totals(rows: Sequence[StepRow]) -> tuple[float, list[float]]:
    wall = sum(row.wall for row in rows)
    sums = [sum(row.sums[i] for row in rows) for i in range(len(BUCKETS))]
    return wall, sums


def _row_dict(row: StepRow, origins: Origins) -> dict[str, Any]:
    info = origins.infos[row.origin]
    out: dict[str, Any] = {
        "name": row.name,
        "iteration": row.iteration,
        "process": origins.label(row.origin),
        "rank": info.rank,
        "role": info.role,
        "pid": origins.keys[row.origin][1],
        "trace_id": row.trace_id,
        "span_id": row.span_id,
        "start_us": row.start,
    }
    out.update(step_numbers(row))  # the live StepGoodput records' numbers too
    return out


def to_json(collected: Collected) -> dict[str, Any]:
    """The goodput document: steps, run total, violations, inputs."""
    rows = collected.result.steps
    wall, sums = _totals(rows)
    total: dict[str, Any] = {"steps": len(rows), "wall_s": _seconds(wall)}
    for i, bucket in enumerate(BUCKETS):
        total[f"{bucket}_s"] = _seconds(sums[i])
    total["unattributed_s"] = _seconds(wall - sum(sums))
    total["goodput"] = _ratio(sums[0], wall)
    total["stalled_s"] = _seconds(sum(row.stalled for row in rows))
    result = collected.result
    return {
        "step_rule": STEP_RULE,
        "steps": [_row_dict(row, collected.origins) for row in rows],
        "total": total,
        "violations": [
            {
                "kind": v.kind,
                "message": v.message,
                "spans": [{"name": n, "span_id": s, "trace_id": t} for n, s, t in v.spans],
            }
            for v in result.violations
        ],
        "inputs": {
            "files": [str(p) for p in collected.paths],
            "spans": result.spans,
            "malformed_lines": collected.stats.malformed,
            "empty_files": collected.stats.empty,
            "unusable_files": [
                {"file": path.name, "why": why} for path, why in collected.stats.unusable
            ],
            "without_ids": result.without_ids,
            "bad_ids": result.bad_ids,
            "duplicates": result.duplicates,
            "cycles": result.cycles,
            "cycle_leaves": result.cycle_leaves,
            "evicted": result.evicted,
            "evicted_leaves": result.evicted_leaves,
            "abandoned": result.abandoned,
            "abandoned_leaves": result.abandoned_leaves,
            "no_duration_steps": result.void_steps,
            "no_duration_leaves": result.void_leaves,
            "bad_iterations": result.bad_iterations,
            "dropped_stubs": result.dropped_stubs,
            "without_ph": collected.without_ph,
            "areal_outside_steps": collected.areal_outside_steps,
            "areal_outside_steps_s": round(collected.areal_outside_steps_s, 6),
        },
    }
