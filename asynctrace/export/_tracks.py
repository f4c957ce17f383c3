"""Track placement for Chrome complete events: every track nests properly.

Chrome/Perfetto draw the complete ("X") events of one (pid, tid) as a stack,
which is only correct if any two of them are disjoint or one contains the
other. A span is first offered to the track of the (thread, task) it started
on; if it would partially overlap an event already there (a span that ended on
another task, or outlived its parent), it goes to an overflow track of that
track instead, creating one if none fits.

Each track keeps its *top-level* intervals: sorted, disjoint, the children of
each already absorbed. Events normally arrive in end order, so a new event
either follows the last one or swallows a suffix of them. Memory is bounded:
past ``max_intervals`` the oldest half is merged into one conservative block.
Merging only makes the check stricter (an event that starts inside the block
is refused and overflows), so the invariant never depends on the bound.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

__all__ = ["TrackAssigner"]


class _Track:
    __slots__ = ("ends", "name", "overflow", "starts", "tid")

    def __init__(self, tid: int, name: str) -> None:
        self.tid = tid
        self.name = name
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.overflow: list[_Track] = []

    def fits(self, start: int, end: int, max_intervals: int) -> bool:
        """Insert ``[start, end]`` if it nests with everything on the track."""
        starts, ends = self.starts, self.ends
        n = len(starts)
        # Fast path: at or after the end of the last top-level interval.
        if n == 0 or ends[-1] <= start:
            starts.append(start)
            ends.append(end)
            if n + 1 > max_intervals:
                self.compact()
            return True
        lo = bisect_left(starts, start)
        if lo > 0 and ends[lo - 1] > start:
            return False  # starts inside an earlier interval (partial, or a hidden child)
        hi = bisect_left(starts, end, lo)
        if hi > lo and ends[hi - 1] > end:
            return False  # the last interval it reaches sticks out past its end
        del starts[lo:hi]
        del ends[lo:hi]
        starts.insert(lo, start)
        ends.insert(lo, end)
        if len(starts) > max_intervals:
            self.compact()
        return True

    def bound(self, max_intervals: int) -> None:
        """Compact until at most *max_intervals* are remembered (for a writer that appends
        a batch's intervals first); a compaction of three or fewer changes nothing."""
        while len(self.starts) > max(max_intervals, 3):
            self.compact()

    def compact(self) -> None:
        """Merge the oldest half of the intervals into one block."""
        half = len(self.starts) // 2
        self.starts[:half] = [self.starts[0]]
        self.ends[:half] = [self.ends[half - 1]]


class TrackAssigner:
    """Assigns each event a tid on which all complete events nest.

    Args:
        new_tid: returns a fresh tid for an overflow track.
        on_new_track: called with ``(tid, name)`` when an overflow track is made.
        max_intervals: top-level intervals remembered per track.

    Example:
        >>> made = []
        >>> tracks = TrackAssigner(iter(range(100, 200)).__next__, lambda t, n: made.append(n))
        >>> tracks.open(1, "task: a")
        >>> tracks.place(1, 0, 10), tracks.place(1, 5, 20)
        (1, 100)
        >>> made
        ['task: a (overflow 1)']
    """

    def __init__(
        self,
        new_tid: Callable[[], int],
        on_new_track: Callable[[int, str], None],
        *,
        max_intervals: int = 512,
    ) -> None:
        self._new_tid = new_tid
        self._on_new_track = on_new_track
        self._max = self.max_intervals = max_intervals
        self._tracks: dict[int, _Track] = {}
        self.primary = self._tracks  # read-only view for callers inlining place()
        self._late: _Track | None = None

    def open(self, tid: int, name: str) -> None:
        """Declare the primary track *tid* (one per thread or task)."""
        if tid not in self._tracks:
            self._tracks[tid] = _Track(tid, name)

    def retire(self, tid: int) -> None:
        """Forget *tid* (its thread or task is gone); later events of it go to late tracks."""
        self._tracks.pop(tid, None)

    def __len__(self) -> int:
        return len(self._tracks)

    def names(self) -> list[tuple[int, str]]:
        """``(tid, name)`` of every live track: primary, their overflow, the late ones.

        Example:
            >>> tracks = TrackAssigner(iter(range(100, 200)).__next__, lambda t, n: None)
            >>> tracks.open(1, "task: a")
            >>> tracks.place(1, 0, 10), tracks.place(1, 5, 20), tracks.place(2, 0, 1)
            (1, 100, 101)
            >>> tracks.names()
            [(1, 'task: a'), (100, 'task: a (overflow 1)'), (101, 'late spans (overflow 1)')]
        """
        holders = list(self._tracks.values())
        if self._late is not None:
            holders.append(self._late)  # its own tid (-1) holds no event: only its overflow
        out: list[tuple[int, str]] = []
        for track in holders:
            if track is not self._late:
                out.append((track.tid, track.name))
            out.extend((extra.tid, extra.name) for extra in track.overflow)
        return out

    def place(self, tid: int, start: int, end: int) -> int:
        """Return the tid on which the event ``[start, end]`` goes."""
        track = self._tracks.get(tid)
        if track is None:
            return self._overflow(self._late_track(), start, end)
        ends = track.ends
        if not ends or ends[-1] <= start:  # the common case, inlined: after the last one
            track.starts.append(start)
            ends.append(end)
            if len(ends) > self._max:
                track.compact()
            return tid
        if track.fits(start, end, self._max):
            return tid
        return self._overflow(track, start, end)

    def _overflow(self, track: _Track, start: int, end: int) -> int:
        for extra in track.overflow:
            if extra.fits(start, end, self._max):
                return extra.tid
        extra = _Track(self._new_tid(), f"{track.name} (overflow {len(track.overflow) + 1})")
        track.overflow.append(extra)
        self._on_new_track(extra.tid, extra.name)
        extra.fits(start, end, self._max)
        return extra.tid

    def _late_track(self) -> _Track:
        if self._late is None:
            # A holder whose own intervals stay empty: late events only use its overflow.
            self._late = _Track(-1, "late spans")
        return self._late
