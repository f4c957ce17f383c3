"""``convert``'s output processes and tracks: a pid per writing process, kept unless two
share one, and tracks on which every complete event nests."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._common import dumps
from ._origins import ProcessInfo

__all__ = ["Merger"]

_OVERFLOW_TID = 2_000_000_000  # first tid of the overflow tracks this command adds
_MAX_INTERVALS = 512


class _Track:
    """Top-level intervals of one output track (see ``fits``)."""

    __slots__ = ("ends", "overflow", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.overflow: list[tuple[int, _Track]] | None = None

    def fits(self, start: float, end: float) -> bool:
        """Take ``[start, end]`` if it nests with every event already on the track.

        Only top-level intervals are kept (children are absorbed), so an event
        that starts inside one is refused even when it would nest: refusing is
        always safe, it only sends the event to an overflow track.
        """
        starts, ends = self.starts, self.ends
        if not ends or ends[-1] <= start:
            starts.append(start)
            ends.append(end)
        else:
            lo = bisect_left(starts, start)
            if lo > 0 and ends[lo - 1] > start:
                return False
            hi = bisect_left(starts, end, lo)
            if hi > lo and ends[hi - 1] > end:
                return False
            del starts[lo:hi]
            del ends[lo:hi]
            starts.insert(lo, start)
            ends.insert(lo, end)
        if len(starts) > _MAX_INTERVALS:  # merge the older half into one block
            half = len(starts) // 2
            starts[:half] = [starts[0]]
            ends[:half] = [ends[half - 1]]
        return True


def _file_info(path: Path) -> ProcessInfo:
    """Rank and role from the file name; for AReaL's layout
    (``perf_tracer/<role>/traces-r{rank}.jsonl``) the role is the directory's.

    AReaL writes a ``thread_name`` before its ``process_name``, and every
    role's file is ``traces-r{rank}.jsonl``: two roles' processes sharing a
    pid (one per container) would otherwise be taken for one process before
    the process name is read.
    """
    info = ProcessInfo.from_file_name(path.name)
    if info.role is None and path.parent.parent.name == "perf_tracer":
        return ProcessInfo(rank=info.rank, role=path.parent.name)
    return info


class Merger:
    """Output pids per process, and tracks on which every complete event nests."""

    def __init__(self, paths: Sequence[Path], shift: float) -> None:
        self.paths = paths
        self.shift = shift
        self.file_shifts: dict[int, float] = {}  # --align-starts: per input file
        self._meta: dict[tuple[int, object], ProcessInfo] = {}
        self._out: dict[tuple[int, object], object] = {}
        self._by_process: dict[tuple[object, ...], object] = {}
        self._used: set[object] = set()
        self._next_free = 1
        # Per output pid: tid -> track, tid -> thread name (nested: smaller keys).
        self._tracks: dict[object, dict[object, _Track]] = {}
        self._names: dict[object, dict[object, str]] = {}
        self._overflow: list[tuple[object, int, object, int]] = []  # (pid, tid, base, n)
        self._next_tid: dict[object, int] = {}
        self.moved = 0
        # Profiler captures: the span ids they profiled, and who holds them (trace id, pid).
        self._wanted: set[str] = set()
        self._span_owners: dict[str, set[tuple[str | None, object]]] = {}

    def out_pid(self, file_index: int, pid: object) -> object:
        """The merged pid of *pid* in file *file_index*: a fresh one if another process has it."""
        key = (file_index, pid)
        found = self._out.get(key, key)
        if found is not key:
            return found
        info = self._meta.get(key) or _file_info(self.paths[file_index])
        process = (info.run_id, info.host, info.rank, info.role, pid)
        out = self._by_process.get(process)
        if out is None:
            out = pid if pid not in self._used else self._fresh_pid()
            self._by_process[process] = out
            self._used.add(out)
        self._out[key] = out
        return out

    def want_spans(self, span_ids: Iterable[str]) -> None:
        """Note which processes hold these spans (the spans profiler captures profiled)."""
        self._wanted = set(span_ids)

    def _note_span(self, out: object, event: dict[str, Any]) -> None:
        args = event.get("args")
        if isinstance(args, dict):
            span_id = args.get("span_id")
            if span_id.__class__ is str and span_id in self._wanted:
                trace_id = args.get("trace_id")
                self._span_owners.setdefault(span_id, set()).add(
                    (trace_id if trace_id.__class__ is str else None, out)
                )

    def span_owners(self, trace_id: str | None, span_id: str | None) -> set[object]:
        """The output pids of the processes whose trace holds that span."""
        return {
            out
            for held, out in self._span_owners.get(span_id or "", ())
            if trace_id is None or held is None or held == trace_id
        }

    def pids_of(self, pid: object, rank: object) -> set[object]:
        """The output pids of the input processes with OS pid *pid* and rank *rank*
        (any rank when *rank* is ``None``)."""
        found = set()
        for key, out in self._out.items():
            if key[1] != pid:
                continue
            info = self._meta.get(key) or _file_info(self.paths[key[0]])
            if rank is None or info.rank == rank:
                found.add(out)
        return found

    def _fresh_pid(self) -> int:
        while self._next_free in self._used:
            self._next_free += 1
        return self._next_free

    def event(self, file_index: int, event: dict[str, Any], raw: bytes) -> bytes:
        """The bytes to write for one input event."""
        pid = event.get("pid")
        ph = event.get("ph")
        if (
            ph == "M"
            and event.get("name") == "process_name"
            and (file_index, pid) not in self._out
        ):
            args = event.get("args")
            if isinstance(args, dict):
                fallback = _file_info(self.paths[file_index])
                self._meta[(file_index, pid)] = ProcessInfo.from_metadata(args, fallback)
        out = self.out_pid(file_index, pid)
        changed = out != pid
        if ph == "X":
            if self._wanted:
                self._note_span(out, event)
            tid = self._place(out, event)
            if tid is not None:
                event["tid"] = tid
                changed = True
        elif ph == "M" and event.get("name") == "thread_name":
            args = event.get("args")
            if isinstance(args, dict) and isinstance(args.get("name"), str):
                names = self._names.get(out)
                if names is None:
                    names = self._names[out] = {}
                names[event.get("tid")] = args["name"]
        shift = self.shift + self.file_shifts.get(file_index, 0.0)
        if shift and isinstance(event.get("ts"), (int, float)):
            event["ts"] -= shift
            changed = True
        if not changed:
            return raw
        event["pid"] = out
        return dumps(event)

    def _place(self, pid: object, event: dict[str, Any]) -> int | None:
        """``None`` if the event stays on its track, else the overflow tid it moves to."""
        start = event.get("ts")
        dur = event.get("dur", 0)
        if not isinstance(start, (int, float)) or not isinstance(dur, (int, float)):
            return None
        end = start + max(dur, 0)
        tid = event.get("tid")
        tracks = self._tracks.get(pid)
        if tracks is None:
            tracks = self._tracks[pid] = {}
        track = tracks.get(tid)
        if track is None:
            track = tracks[tid] = _Track()
        if track.fits(start, end):
            return None
        self.moved += 1
        if track.overflow is None:
            track.overflow = []
        for extra_tid, extra in track.overflow:
            if extra.fits(start, end):
                return extra_tid
        extra_tid = self._next_tid.get(pid, _OVERFLOW_TID)
        self._next_tid[pid] = extra_tid + 1
        extra = _Track()
        extra.fits(start, end)
        track.overflow.append((extra_tid, extra))
        self._overflow.append((pid, extra_tid, tid, len(track.overflow)))
        return extra_tid

    def trailer(self) -> list[bytes]:
        """Names for the overflow tracks this command made."""
        lines = []
        for pid, tid, base, n in self._overflow:
            name = self._names.get(pid, {}).get(base, f"tid {base}")
            lines.append(
                dumps(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": pid,
                        "tid": tid,
                        "args": {"name": f"{name} (merge overflow {n})"},
                    }
                )
            )
        return lines

    @property
    def processes(self) -> int:
        """How many processes the merged trace holds so far."""
        return len(self._by_process)
