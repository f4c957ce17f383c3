"""The events of trace files, the files merged by end time (each file is in end order)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ._common import Progress
from ._read_stats import ReadStats
from ._records import iter_file

__all__ = ["in_end_order"]


def in_end_order(
    paths: Sequence[Path], stats: ReadStats, bar: Progress, shifts: dict[int, float]
) -> Iterator[tuple[float, int, int, dict[str, Any], bytes]]:
    """Every file's events, the files merged by end time (each file is in end order).

    ``goodput`` reads the converted document line by line, in end order as it
    reads trace files: files one after the other would end one rank's steps
    before the next file's spans for them arrive.
    """
    streams = [
        _keyed(index, path, stats, bar, shifts.get(index, 0.0)) for index, path in enumerate(paths)
    ]
    return streams[0] if len(streams) == 1 else heapq.merge(*streams)


def _keyed(
    index: int, path: Path, stats: ReadStats, bar: Progress, shift: float
) -> Iterator[tuple[float, int, int, dict[str, Any], bytes]]:
    """``(end, file index, sequence, event, raw)`` on the output's clock (*shift* taken
    off); an event without an end of its own keeps the last one's."""
    last = float("-inf")
    for seq, (event, raw) in enumerate(iter_file(path, stats, bar)):
        ts = event.get("ts")
        if ts.__class__ in (int, float):
            end = ts + (event.get("dur") or 0) if event.get("ph") == "X" else ts
            last = max(last, float(end) - shift)
        yield last, index, seq, event, raw
