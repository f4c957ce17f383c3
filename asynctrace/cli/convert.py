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
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ._capture_owner import Unplaced, capture_owner
from ._captures import (
    Capture,
    capture_lines,
    find_captures,
    is_capture,
    load_capture,
    tid_counter,
)
from ._clocks import clock_shifts, earliest
from ._common import CliError, HelpFormatter, Progress, dumps, note
from ._end_order import in_end_order
from ._inputs import TRACE_PATTERN, expand_inputs, file_size
from ._merger import Merger
from ._open_files import allow_open_files
from ._output import Output, stdout_bytes
from ._path_checks import check_output, require_regular_files
from ._read_stats import ReadStats
from ._repeats import Repeats
from ._trace_lines import Lines

__all__ = ["add_parser", "run"]

EPILOG = """\
examples:
  asynctrace convert asynctrace-traces/20261129-101500-ab12cd/ -o trace.json
  asynctrace convert 'logs/**/traces-*.jsonl' -o merged.json --rebase
  asynctrace convert traces-r0.jsonl -o - | gzip > trace.json.gz

Then open https://ui.perfetto.dev, choose "Open trace file" and pick the
output; the file never leaves your machine. Malformed lines (a torn last line
of a killed process) are skipped and counted in the summary on stderr.
"""


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
    shifts = clock_shifts(paths, args.align_starts)
    # --rebase: from the earliest timestamp once the files are on one clock
    merger = Merger(paths, earliest(paths, shifts) if args.rebase else 0)
    merger.file_shifts = shifts
    stats = ReadStats()
    others = 0  # JSON objects that are not trace events (no "ph")
    # Captures are checked first: the spans they profiled are looked for while merging.
    captures = [load_capture(path) for path in capture_paths]
    merger.want_spans(c.span_id for c in captures if isinstance(c, Capture) and c.span_id)
    output = None if to_stdout else Output(args.output)
    events = 0
    bar = Progress(file_size(paths), prog, enabled=not args.no_progress)
    restore = None
    try:
        # opened within the try: whatever ends the command from here on removes the output
        stream: IO[bytes] = stdout_bytes() if output is None else output.open()
        if len(paths) > 1:  # the merge keeps every input open: the limit raised for it
            restore = allow_open_files(len(paths), prog)  # and put back once read
        out = Lines(stream)
        repeated = Repeats()
        for _, index, _, event, raw in in_end_order(paths, stats, bar, shifts):
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
            out_pid = capture_owner(merger, capture)
            if isinstance(out_pid, Unplaced):
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
                    f"{capture.skipped} event{plural} of {capture.path.name} (not an event, NaN "
                    "or Infinity, or a field of the wrong type or out of range)"
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
