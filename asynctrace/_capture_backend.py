"""A profiler backend: one capture, started and stopped on a span's thread, saved on another.

Clocks. A backend's events are on its own timeline. While the capture runs,
:meth:`Backend.mark` records a named marker event and the wall clock (epoch
microseconds, the spans' clock) just before and after it; after saving,
:func:`asynctrace._capture_finish.finish_capture` aligns the two clocks by
the markers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._profiler_settings import ProfilerSettings

__all__ = ["MARK_PREFIX", "Backend"]

MARK_PREFIX = "asynctrace.clock."


class Backend:
    """One capture: started and stopped on the span's thread, saved on another."""

    name = ""

    def __init__(self, settings: ProfilerSettings) -> None:
        self.settings = settings
        self.path = Path()
        self.marks: list[tuple[str, int, int]] = []  # (marker name, epoch ns before, after)
        self.about: dict[str, Any] = {}  # the profiled span's ids, pid, rank: otherData
        self.thread = 0  # the ident of the thread that started the capture

    def prepare(self) -> None:
        """Build what :meth:`start` needs (slow: done ahead, on another thread)."""
        raise NotImplementedError

    def start(self) -> None:
        """Begin capturing, then mark the clock; stopped again if the marker raises."""
        raise NotImplementedError

    def stop(self) -> None:
        """Mark the clock, then stop capturing."""
        raise NotImplementedError

    def abandon(self) -> None:
        """Stop capturing without a marker: the capture is not saved (a forked child's)."""
        raise NotImplementedError

    def release(self) -> None:
        """On the span's thread, once another thread stopped the capture: drop its hook."""

    def discard(self) -> None:
        """Give back what :meth:`prepare` built, never started (a spare not needed)."""

    def save(self, path: Path) -> None:
        """Write the capture to *path*, a temporary file beside :attr:`path` (the saving
        thread)."""
        raise NotImplementedError

    def mark(self) -> None:
        """Record a marker event, with the wall clock around it."""
        name = f"{MARK_PREFIX}{len(self.marks)}"
        before = time.time_ns()
        self._marker(name)
        self.marks.append((name, before, time.time_ns()))

    def _marker(self, name: str) -> None:
        raise NotImplementedError
