"""Time intervals of the goodput rollup: a step's union of stalls, and a process's
stretches of stalled time remembered for the steps that overlap them."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

__all__ = ["Stretch", "cover", "forget_stalls", "remember_stall", "stretch_end"]

# A stretch of a process's loop stalls: (start, end, the number of the newest stall span
# in it, in arrival order).
Stretch = tuple[float, float, int]


def cover(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Add [*start*, *end*) to *spans* (disjoint, in time order); return the time added.

    The spans it overlaps or touches become one: at most as many spans stay as
    there are separate stretches of stall, however many stalls overlap.
    """
    lo = bisect_left(spans, start, key=_span_end)  # the first ending at or after start
    hi = bisect_right(spans, end, key=_span_start)  # ...up to the last starting by end
    if lo >= hi:
        spans.insert(lo, (start, end))
        return end - start
    covered = 0.0
    for first, last in spans[lo:hi]:
        covered += last - first
    first = min(start, spans[lo][0])
    last = max(end, spans[hi - 1][1])
    spans[lo:hi] = [(first, last)]
    return (last - first) - covered


def remember_stall(stretches: list[Stretch], start: float, end: float, seq: int) -> None:
    """Add the stall [*start*, *end*), the span numbered *seq* (the newest), to its
    process's *stretches* (disjoint, in time order): the stretches it overlaps or
    touches become one, remembered as the newest of them."""
    if not stretches or stretches[-1][1] < start:  # after the rest (spans arrive in end order)
        stretches.append((start, end, seq))
        return
    lo = bisect_left(stretches, start, key=stretch_end)
    hi = bisect_right(stretches, end, key=_stretch_start)
    if lo >= hi:
        stretches.insert(lo, (start, end, seq))
        return
    first = min(start, stretches[lo][0])
    last = max(end, stretches[hi - 1][1])
    stretches[lo:hi] = [(first, last, seq)]


def forget_stalls(stretches: list[Stretch], before: int, most: int) -> None:
    """Drop the earliest *stretches* remembered before the span numbered *before*
    arrived, and the earliest past *most* of them."""
    drop = max(0, len(stretches) - most)
    while drop < len(stretches) and stretches[drop][2] < before:
        drop += 1
    if drop:
        del stretches[:drop]


def _stretch_start(stretch: Stretch) -> float:
    return stretch[0]


def stretch_end(stretch: Stretch) -> float:
    """A stretch's end (a sort key)."""
    return stretch[1]


def _span_start(span: tuple[float, float]) -> float:
    return span[0]


def _span_end(span: tuple[float, float]) -> float:
    return span[1]
