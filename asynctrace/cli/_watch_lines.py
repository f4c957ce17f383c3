"""Which goodput lines ``watch`` can show: the types of their fields, and seconds that
can be true."""

from __future__ import annotations

from typing import Any

from ._events import real_number

__all__ = ["buckets_ok", "exporters_ok", "step_ok", "time_ok"]

_BUCKETS = ("productive_s", "overhead_s", "idle_s", "wasted_s")


def step_ok(line: dict[str, Any]) -> bool:
    """Whether a step line's fields have the types the view reads: the times and the
    goodput numbers, ``spans`` names to numbers (a line of another shape is skipped)."""
    for key, value in line.items():
        timed = key.endswith("_s") or key in ("goodput", "time")
        if timed and value is not None and not real_number(value):
            return False
    spans = line.get("spans")
    return spans is None or (isinstance(spans, dict) and all(map(real_number, spans.values())))


def time_ok(line: dict[str, Any]) -> bool:
    """A line's ``time``, when it has one, is a number the view can compare."""
    value = line.get("time")
    return value is None or real_number(value)


def exporters_ok(value: object) -> bool:
    """``{name: [exported, dropped, failed, ...]}`` with integer counts."""
    return isinstance(value, dict) and all(
        isinstance(counts, list)
        and len(counts) >= 3
        and all(c.__class__ is int for c in counts[:3])
        for counts in value.values()
    )


def buckets_ok(line: dict[str, Any]) -> bool:
    """Whether a step line's seconds can be true: none negative, and its buckets together
    at most ``leaves`` times its wall time (each leaf is clipped to the step; the
    seconds are rounded to the microsecond)."""
    wall = line.get("wall_s")
    buckets = [float(line.get(key) or 0.0) for key in _BUCKETS]
    if (wall is not None and wall < 0) or min(buckets) < 0:
        return False
    leaves = line.get("leaves")
    if leaves is None or wall is None:
        return True
    if leaves.__class__ is not int or not 0 <= leaves <= 1 << 53:
        return False
    return bool(sum(buckets) <= leaves * (wall + 1e-6) + 1e-5)
