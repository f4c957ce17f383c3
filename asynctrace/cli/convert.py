"""``asynctrace convert``: merge per-rank JSONL traces into one Chrome Trace JSON file.

The output opens in Perfetto (ui.perfetto.dev) and ``chrome://tracing``. Each
writing process, keyed by (run, host, rank, role, pid), is one process of the
output; its pid is kept unless two processes share one (containers often
do), in which case one of them gets a fresh pid, its name (which shows the
original pid) unchanged. Timestamps are wall-clock microseconds, so ranks
line up as they are. Inputs are streamed, merged by end time (each file is in
end order, as asynctrace writes it), and events are written as they are
read: an event that needs no change is copied byte for byte.
"""

from __future__ import annotations

import argparse
import errno
import heapq
import os
import sys
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from ._areal import EPOCH_US
from ._captures import (
    Capture,
    capture_lines,
    find_captures,
    is_capture,
    load_capture,
    tid_counter,
)
from ._common import CliError, HelpFormatter, Progress, dumps, note
from ._inputs import TRACE_PATTERN, expand_inputs, file_size
from ._open_files import allow_open_files
from ._origins import ProcessInfo
from ._output import Output
from ._read_stats import ReadStats
from ._records import iter_file

__all__ = ["add_parser", "check_output", "require_regular_files", "run"]

EPILOG = """\
examples:
  asynctrace convert asynctrace-traces/20261129-101500-ab12cd/ -o trace.json
  asynctrace convert 'logs/**/traces-*.jsonl' -o merged.json --rebase
  asynctrace convert traces-r0.jsonl -o - | gzip > trace.json.gz

Then open https://ui.perfetto.dev, choose "Open trace file" and pick the
output; the file never leaves your machine. Malformed lines (a torn last line
of a killed process) are skipped and counted in the summary on stderr.
"""

_OVERFLOW_TID = 2_000_000_000  # first tid of the overflow tracks this command adds
_MAX_INTERVALS = 512
_HEADER = b'{"traceEvents":[\n'
_REPEAT_WINDOW = 1 << 16  # spans whose ids are remembered to find a span written twice


def add_parser(subparsers: Any) -> None:
    """Register the ``convert`` subcommand."""
    parser = subparsers.add_parser(
        "convert",
        help="merge JSONL traces into one Perfetto / chrome://tracing JSON file",
        description="Merge per-rank traces-*.jsonl files (directories are searched "
        "recursively, globs are expanded) into one Chrome Trace JSON document.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "inputs", nargs="+", metavar="TRACES", help="trace files, directories or globs"
    )
    parser.add_argument(
        "-o",
        "--output",
        default="trace.json",
        metavar="FILE",
        help="where to write the JSON ('-' for stdout; default: trace.json)",
    )
    parser.add_argument(
        "--rebase",
        action="store_true",
        help="subtract the earliest timestamp so the trace starts at 0 "
        "(reads the inputs twice; ranks stay aligned either way)",
    )
    parser.add_argument(
        "--align-starts",
        action="store_true",
        help="when some inputs count time from their process's start (AReaL's perf_tracer) "
        "and others from the epoch: start each of the former at the earliest event of the "
        "latter (without it, such a mix is refused)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar, even on a terminal"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    parser.set_defaults(run=run)


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


class _Merger:
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
        return len(self._by_process)


class _Repeats:
    """Spans whose (trace id, span id) was already written, among the last
    :data:`_REPEAT_WINDOW` spans with ids.

    The inputs are merged by end time, so two copies of one span (the same
    file read twice under two names) arrive next to each other; a bounded
    window finds them without holding every id of a large run.
    """

    __slots__ = ("_keys", "_order", "count")

    def __init__(self) -> None:
        self._keys: set[int] = set()
        self._order: deque[int] = deque()
        self.count = 0

    def seen(self, event: dict[str, Any]) -> bool:
        """Whether the complete *event* repeats a span already written (counted if so)."""
        args = event.get("args")
        if args.__class__ is not dict:
            return False
        span_id = args.get("span_id")
        if span_id.__class__ is not str:
            return False
        trace_id = args.get("trace_id")
        key = hash((trace_id if trace_id.__class__ is str else None, span_id))
        keys = self._keys
        if key in keys:
            self.count += 1
            return True
        keys.add(key)
        order = self._order
        order.append(key)
        if len(order) > _REPEAT_WINDOW:
            keys.discard(order.popleft())
        return False


def _in_end_order(
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


def _earliest(paths: Sequence[Path], shifts: dict[int, float] | None = None) -> float:
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


def _clock_shifts(paths: Sequence[Path], align: bool) -> dict[int, float]:
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


class _Lines:
    """The output document: its header, then events comma-separated, written a MiB at a time."""

    __slots__ = ("_chunk", "_separator", "_size", "_stream")

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._chunk: list[bytes] = [_HEADER]
        self._separator = b""
        self._size = 0

    def add(self, line: bytes) -> None:
        """One event's JSON."""
        self._chunk.append(self._separator)
        self._chunk.append(line)
        self._separator = b",\n"
        self._size += len(line)
        if self._size > 1 << 20:
            self._stream.write(b"".join(self._chunk))
            self._chunk.clear()
            self._size = 0

    def end(self, tail: bytes) -> None:
        """The document's end: written with what is left, and flushed."""
        self._chunk.append(tail)
        self._stream.write(b"".join(self._chunk))
        self._chunk.clear()
        self._stream.flush()


def run(args: argparse.Namespace) -> int:
    """Run ``asynctrace convert``."""
    prog = "asynctrace convert"
    named = expand_inputs(args.inputs, [TRACE_PATTERN], "trace", prog)
    # A capture named among the inputs (or matched by a glob) is merged as a capture,
    # never read as a trace file too.
    paths = [p for p in named if not is_capture(p)]
    capture_paths = find_captures(args.inputs)
    to_stdout = args.output == "-"
    target = Path(args.output)
    if not to_stdout:
        check_output(args.output, target, [*named, *capture_paths], "trace.json")
    if not paths:
        raise CliError(
            "no trace files among the inputs (traces-*.jsonl): profile captures are "
            "merged onto the traces of their run, name those too"
        )
    if len(paths) > 1 or args.rebase:  # read more than once
        require_regular_files(paths, prog)
    shifts = _clock_shifts(paths, args.align_starts)
    # --rebase: from the earliest timestamp once the files are on one clock
    merger = _Merger(paths, _earliest(paths, shifts) if args.rebase else 0)
    merger.file_shifts = shifts
    stats = ReadStats()
    others = 0  # JSON objects that are not trace events (no "ph")
    # Captures are checked first: the spans they profiled are looked for while merging.
    captures = [load_capture(path) for path in capture_paths]
    merger.want_spans(c.span_id for c in captures if isinstance(c, Capture) and c.span_id)
    output = None if to_stdout else Output(args.output)
    stream: IO[bytes] = sys.stdout.buffer if output is None else output.open()
    events = 0
    bar = Progress(file_size(paths), prog, enabled=not args.no_progress)
    restore = None
    try:
        if len(paths) > 1:  # the merge keeps every input open: the limit raised for it
            restore = allow_open_files(len(paths), prog)  # and put back once read
        out = _Lines(stream)
        repeated = _Repeats()
        for _, index, _, event, raw in _in_end_order(paths, stats, bar, shifts):
            ph = event.get("ph")
            if ph.__class__ is not str:
                others += 1
                continue
            if ph == "X" and repeated.seen(event):
                continue
            out.add(merger.event(index, event, raw))
            events += 1
        merged, skipped, error_us = 0, [], 0.0
        partial: list[str] = []  # captures merged whole that hold only part of their span
        next_tid = tid_counter()
        for capture in captures:
            if isinstance(capture, str):
                skipped.append(capture)
                continue
            out_pid = _capture_owner(merger, capture)
            if isinstance(out_pid, _Unplaced):
                skipped.append(out_pid.reason)
                continue
            try:
                for line in capture_lines(capture, out_pid.pid, merger.shift, next_tid):
                    out.add(line)
                    events += 1
            except (OSError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
                skipped.append(
                    f"{capture.path.name}: merged only in part, it changed while read "
                    f"({exc.__class__.__name__})"
                )
                continue
            if capture.skipped:
                plural = "s" if capture.skipped != 1 else ""
                skipped.append(
                    f"{capture.skipped} event{plural} of {capture.path.name} (NaN, Infinity "
                    "or a timestamp out of range)"
                )
            if capture.overflow:
                partial.append(
                    f"{capture.path.name} lost its earliest events (the profiler's buffer "
                    "was full: raise profiler.entries)"
                )
            if capture.truncated:
                partial.append(f"{capture.path.name} was cut at shutdown, before its span ended")
            merged += 1
            error_us = max(error_us, capture.error_us)
        for line in merger.trailer():
            out.add(line)
        if not events:
            raise CliError(_nothing(paths, stats, others))
        other = {"asynctrace": {"inputs": [str(p) for p in paths], "malformed": stats.malformed}}
        out.end(b'\n],"displayTimeUnit":"ms","otherData":' + dumps(other) + b"}\n")
        if output is not None:
            output.commit()
    except OSError as exc:  # writing failed (a full disk, a device that refuses): said so
        if output is not None:
            output.abort()
        if isinstance(exc, BrokenPipeError):
            raise  # the reader went away (| head): the command's caller handles it
        raise CliError(f"{args.output}: {exc.strerror or exc}") from None
    except BaseException:
        if output is not None:
            output.abort()
        raise
    finally:
        bar.close()
        if restore is not None:
            restore()
    if not args.quiet:
        parts = [
            f"wrote {'stdout' if to_stdout else args.output}: {events} events, "
            f"{merger.processes} process{'es' if merger.processes != 1 else ''} "
            f"from {len(paths)} file{'s' if len(paths) != 1 else ''}"
        ]
        summary = stats.summary()
        if summary:
            parts.append(summary)
        if others:
            plural = "s" if others != 1 else ""
            parts.append(f"skipped {others} JSON object{plural} without 'ph' (not trace events)")
        if repeated.count:
            n = repeated.count
            parts.append(
                f"skipped {n} duplicate span{'s' if n != 1 else ''} (the trace and span id of "
                "one already written: the same file given twice?)"
            )
        if merger.moved:
            parts.append(f"{merger.moved} spans moved to overflow tracks so every track nests")
        if merged:
            plural = "s" if merged != 1 else ""
            parts.append(
                f"merged {merged} profile capture{plural} (clocks aligned within "
                f"{error_us:.0f} us)"
            )
        parts.extend(f"partial: {reason}" for reason in partial)
        parts.extend(f"not merged: {reason}" for reason in skipped)
        note(prog, "; ".join(parts))
    return 0


class _Placed:
    __slots__ = ("pid",)

    def __init__(self, pid: object) -> None:
        self.pid = pid


class _Unplaced:
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _capture_owner(merger: _Merger, capture: Capture) -> _Placed | _Unplaced:
    """The output process of *capture*: the one whose trace holds the profiled span,
    else the one with its pid and rank; none when that is not exactly one."""
    name = capture.path.name
    holders = merger.span_owners(capture.trace_id, capture.span_id)
    if len(holders) == 1:
        return _Placed(next(iter(holders)))
    if holders:
        return _Unplaced(
            f"{name}: its span {capture.span_id} is in the traces of {len(holders)} processes"
        )
    who = f"pid {capture.pid}" + (f", rank {capture.rank}" if capture.rank is not None else "")
    matching = merger.pids_of(capture.pid, capture.rank)
    if len(matching) == 1:
        return _Placed(next(iter(matching)))
    if not matching:
        return _Unplaced(f"{name}: no trace of its process ({who})")
    return _Unplaced(
        f"{name}: {len(matching)} processes match ({who}) and no trace holds its span"
    )


def check_output(name: str, target: Path, inputs: Iterable[Path], example: str) -> None:
    """Refuse an output that is one of *inputs* or cannot be written, before reading anything.

    *name* is the output as the user wrote it, *example* a file name to suggest
    when it names a directory.

    Raises:
        CliError: the output is an input (same path, symbolic or hard link), a
            symbolic link loop, a directory, or in a directory that does not exist.
    """
    try:
        one_of = _is_one_of(target, inputs)
    except (RuntimeError, OSError) as exc:  # Path.resolve on a loop (RuntimeError until 3.13)
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            raise CliError(f"{name}: {exc.strerror or exc}") from None
        raise CliError(f"-o: {name}: symbolic link loop") from None
    if one_of:
        raise CliError(f"{name}: the output is also an input")
    if target.is_dir():
        raise CliError(f"{name}: is a directory; name the output file, e.g. -o {target / example}")
    # through a symbolic link, the file it resolves to is the one written
    place = Path(os.path.realpath(target)) if target.is_symlink() else target
    if not place.parent.is_dir():
        raise CliError(f"{name}: no such directory: {place.parent}")


def _is_one_of(target: Path, inputs: Iterable[Path]) -> bool:
    """Whether *target* is the same file as one of *inputs* (by path, or by inode)."""
    resolved = target.resolve()
    try:
        stat = target.stat()
        identity: tuple[int, int] | None = (stat.st_dev, stat.st_ino)
    except OSError:
        identity = None
    for path in inputs:
        if path.resolve() == resolved:
            return True
        if identity is not None:
            try:
                other = path.stat()
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == identity:
                return True
    return False


def require_regular_files(paths: Iterable[Path], prog: str) -> None:
    """Refuse an input that is not a regular file (a pipe, ``<(zcat x.gz)``): *prog*
    reads its inputs more than once, and a pipe reads as empty the second time.

    Raises:
        CliError: naming the first such path.
    """
    for path in paths:
        if not path.is_file():
            raise CliError(
                f"{path}: not a regular file (a pipe?); {prog} reads its inputs more than "
                "once, so each must be a regular file or a directory: write it to a file "
                "first (gzip files are read as they are, no need to decompress them)"
            )


def _nothing(paths: Sequence[Path], stats: ReadStats, others: int = 0) -> str:
    if len(paths) == 1 and stats.empty:
        return f"{paths[0]}: empty file, no trace events"
    refusal = stats.refusal() if len(paths) == 1 else None
    if refusal is not None:
        return refusal
    if others:
        plural = "s" if others != 1 else ""
        return (
            f"no trace events in the {len(paths)} input file(s): {others} JSON object{plural} "
            "without a 'ph' field, which Chrome trace events have (a sessions file? "
            "'asynctrace report' reads those)"
        )
    return f"no trace events in the {len(paths)} input file(s) ({stats.summary() or 'all empty'})"
