"""The clocks of trace files: their earliest timestamp, and the shifts that put files
counting from their process's start on the epoch clock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ._areal import EPOCH_US
from ._common import CliError
from ._read_stats import ReadStats
from ._records import iter_file

__all__ = ["clock_shifts", "earliest"]


def earliest(paths: Sequence[Path], shifts: dict[int, float] | None = None) -> float:
    """The earliest timestamp of the files' events, each less its file's shift (0: none)."""
    earliest: float | None = None
    for index, path in enumerate(paths):
        shift = (shifts or {}).get(index, 0.0)
        for event, _ in iter_file(path, ReadStats()):
            ts = event.get("ts")
            if isinstance(ts, (int, float)) and (earliest is None or ts - shift < earliest):
                earliest = ts - shift
    return earliest or 0


def _first_timestamps(paths: Sequence[Path]) -> list[float | None]:
    """The first event timestamp of each file (None: no timed event)."""
    firsts: list[float | None] = []
    for path in paths:
        first: float | None = None
        for event, _ in iter_file(path, ReadStats()):
            ts = event.get("ts")
            if event.get("ph") != "M" and isinstance(ts, (int, float)) and ts >= 0:
                first = float(ts)
                break
        firsts.append(first)
    return firsts


def clock_shifts(paths: Sequence[Path], align: bool) -> dict[int, float]:
    """Per-file shifts that put process-start clocks on the epoch clock (with *align*).

    A file whose events count from its process's start (timestamps below
    :data:`EPOCH_US`, as AReaL's tracer writes them) merged with files on the
    epoch clock would land decades before them: refused unless *align*.
    """
    if len(paths) < 2:  # one clock whatever it is: no pass over the input
        return {}
    firsts = _first_timestamps(paths)
    relative = [i for i, ts in enumerate(firsts) if ts is not None and ts < EPOCH_US]
    epoch = [ts for ts in firsts if ts is not None and ts >= EPOCH_US]
    if not relative or not epoch:
        return {}
    if not align:
        names = ", ".join(paths[i].name for i in relative[:3])
        more = f" and {len(relative) - 3} more" if len(relative) > 3 else ""
        raise CliError(
            f"inputs on different clocks: {names}{more} count microseconds from their "
            "process's start (AReaL's perf_tracer does), the others from the epoch, so merged "
            "they would be decades apart; pass --align-starts to start each of them at the "
            "earliest epoch-clock event, or convert them separately"
        )
    start = min(epoch)
    return {i: float(firsts[i] or 0.0) - start for i in relative}
