"""The output process a profile capture is merged under."""

from __future__ import annotations

from ._captures import Capture
from ._merger import Merger

__all__ = ["Unplaced", "capture_owner"]


class _Placed:
    """The output process a capture is merged under."""

    __slots__ = ("pid",)

    def __init__(self, pid: object) -> None:
        self.pid = pid


class Unplaced:
    """Why a capture is merged under no output process."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def capture_owner(merger: Merger, capture: Capture) -> _Placed | Unplaced:
    """The output process of *capture*: the one whose trace holds the profiled span,
    else the one with its pid and rank; none when that is not exactly one."""
    name = capture.path.name
    holders = merger.span_owners(capture.trace_id, capture.span_id)
    if len(holders) == 1:
        return _Placed(next(iter(holders)))
    if holders:
        return Unplaced(
            f"{name}: its span {capture.span_id} is in the traces of {len(holders)} processes"
        )
    who = f"pid {capture.pid}" + (f", rank {capture.rank}" if capture.rank is not None else "")
    matching = merger.pids_of(capture.pid, capture.rank)
    if len(matching) == 1:
        return _Placed(next(iter(matching)))
    if not matching:
        return Unplaced(f"{name}: no trace of its process ({who})")
    return Unplaced(f"{name}: {len(matching)} processes match ({who}) and no trace holds its span")
