"""``asynctrace report``: one self-contained HTML file about a run.

Goodput per step (stacked bars), the waterfall of one step, the invariant
checks and, when session files are given, the session lifecycle timeline and
per-phase duration histograms. Everything is inline (no network needed to
view it) and every name, attribute and path in it is HTML-escaped.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..rollup import StepRow
from ._captures import find_captures, is_capture
from ._collect import add_step_options, collect
from ._common import CliError, HelpFormatter, escape_surrogates, note, write_stdout
from ._goodput_document import to_json
from ._input_notes import input_notes
from ._inputs import SESSION_PATTERN, TRACE_PATTERN, expand_inputs
from ._output import Output
from ._path_checks import check_output, require_regular_files
from ._profile_links import profile_links
from ._read_stats import ReadStats
from ._report_page import ReportData, render
from ._sessions import read_sessions
from ._sniff import sniff_kind
from ._waterfall import read_waterfall

__all__ = ["add_parser", "run"]

EPILOG = """\
examples:
  asynctrace report asynctrace-traces/20261129-101500-ab12cd/ -o report.html
  asynctrace report 'run/traces-*.jsonl' run/sessions-r0.jsonl --step 12 -o report.html

A directory contributes its traces-*.jsonl and sessions-*.jsonl files; a file
is recognised by its content. The report needs no network to view.
exit status: 0 no violation, 1 invariant violations, 2 unreadable input
"""


def add_parser(subparsers: Any) -> None:
    """Register the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="write a self-contained HTML report (goodput, waterfall, sessions)",
        description="Write one self-contained HTML file: goodput per step, the waterfall "
        "of one step, the invariant checks, and session lifecycles when session files "
        "are given.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="TRACES_OR_SESSIONS",
        help="trace and session files, directories or globs",
    )
    parser.add_argument(
        "-o",
        "--output",
        default="report.html",
        metavar="FILE",
        help="where to write the HTML ('-' for stdout; default: report.html)",
    )
    parser.add_argument(
        "--step",
        type=int,
        metavar="N",
        help="draw the waterfall of the step with rl.iteration N (default: the slowest step)",
    )
    parser.add_argument("--title", default="asynctrace report", help="the page title")
    add_step_options(parser)
    parser.set_defaults(run=run)


def _classify(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Trace and session files among *paths* (captures left out), by their content."""
    traces: list[Path] = []
    sessions: list[Path] = []
    for path in paths:
        if is_capture(path):  # linked under "Profiled steps" (see profile_links), not read
            continue
        kind = sniff_kind(path)
        if kind == "traces":
            traces.append(path)
        elif kind == "sessions":
            sessions.append(path)
        elif path.stat().st_size == 0:
            raise CliError(f"{path}: empty file, neither traces nor session records")
        else:
            raise CliError(f"{path}: neither an asynctrace trace nor a sessions file")
    if not traces:
        raise CliError("no trace files among the inputs (traces-*.jsonl)")
    return traces, sessions


def _choose_step(rows: list[StepRow], wanted: int | None) -> tuple[StepRow, str] | None:
    if not rows:
        return None
    if wanted is None:
        return max(rows, key=lambda r: r.wall), "slowest step"
    matching = [row for row in rows if row.iteration == wanted]
    if not matching:
        known = sorted({r.iteration for r in rows if r.iteration is not None})
        shown = ", ".join(str(i) for i in known[:20]) + (", ..." if len(known) > 20 else "")
        raise CliError(f"--step {wanted}: no step has rl.iteration={wanted} (steps: {shown})")
    return max(matching, key=lambda r: r.wall), f"--step {wanted}"


def run(args: argparse.Namespace) -> int:
    """Run ``asynctrace report``."""
    prog = "asynctrace report"
    named = expand_inputs(args.inputs, [TRACE_PATTERN, SESSION_PATTERN], "trace or session", prog)
    captures = find_captures(args.inputs)
    to_stdout = args.output == "-"
    target = Path(args.output)
    if not to_stdout:  # before anything is read
        check_output(args.output, target, [*named, *captures], "report.html")
    require_regular_files((p for p in named if not is_capture(p)), prog)
    trace_paths, session_paths = _classify(named)
    progress = not args.no_progress
    collected = collect(
        trace_paths,
        step_name=args.step_name,
        progress=progress,
        prog=prog,
        bucket_map=args.bucket_map,
    )
    chosen = _choose_step(collected.result.steps, args.step)
    waterfall = None
    if chosen is not None:
        waterfall = read_waterfall(collected, chosen[0], chosen[1], progress)
    session_stats = ReadStats(kind="sessions file")
    sessions = read_sessions(session_paths, session_stats, progress) if session_paths else None
    notes = input_notes(collected)  # what goodput says about the same traces
    if session_stats.summary():
        notes.append(session_stats.summary())
    if sessions is not None:
        notes.extend(sessions.left_out())
    # links from the current directory when the page goes to stdout
    profiles = profile_links(captures, Path("report.html") if to_stdout else target, notes)
    data = ReportData(
        title=args.title,
        goodput=to_json(collected),
        waterfall=waterfall,
        sessions=sessions,
        notes=notes,
        trace_files=trace_paths,
        processes=sorted(collected.origins.label(i) for i in range(len(collected.origins.infos))),
        profiles=profiles,
    )
    text = escape_surrogates(render(data))  # a name kept as written
    if to_stdout:
        write_stdout(text)
    else:
        _write_file(text, args.output)
    violations = len(collected.result.violations)
    summary = [
        f"wrote {'stdout' if to_stdout else args.output}: {len(collected.result.steps)} steps",
        f"{violations} invariant violation{'s' if violations != 1 else ''}",
    ]
    if sessions is not None:
        summary.append(f"{sessions.count} sessions")
    summary.extend(notes)
    note(prog, "; ".join(summary))
    return 1 if violations else 0


def _write_file(text: str, name: str) -> None:
    """Write the page to a temporary file that replaces the output *name* once complete
    (into it directly when it is not a regular file: a FIFO, a device; see :class:`Output`)."""
    output = Output(name)
    try:  # opened within: whatever ends the command from here on removes the output
        stream = output.open()
        stream.write(text.encode("utf-8"))
        output.commit()
    except OSError as exc:
        output.abort()
        raise CliError(f"{name}: {exc.strerror or exc}") from None
    except BaseException:
        output.abort()
        raise
