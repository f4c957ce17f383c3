"""``asynctrace report``: one self-contained HTML file about a run.

Goodput per step (stacked bars), the waterfall of one step, the invariant
checks and, when session files are given, the session lifecycle timeline and
per-phase duration histograms. Everything is inline (no network needed to
view it) and every name, attribute and path in it is HTML-escaped.
"""

from __future__ import annotations

import argparse
import os
import random
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rollup import StepRow
from ._captures import CAPTURE_NAME, Capture, find_captures, is_capture, load_capture
from ._common import CliError, HelpFormatter, Progress, escape_surrogates, note, write_stdout
from ._events import real_number
from ._html import render
from ._inputs import SESSION_PATTERN, TRACE_PATTERN, expand_inputs, file_size
from ._origins import Origins
from ._output import Output
from ._path_checks import check_output, require_regular_files
from ._read_stats import ReadStats
from ._records import iter_file
from ._sniff import sniff_kind
from .goodput import Collected, add_step_options, collect, input_notes, to_json

__all__ = [
    "ReportData",
    "SessionRow",
    "Sessions",
    "Waterfall",
    "WaterfallSpan",
    "add_parser",
    "run",
]

EPILOG = """\
examples:
  asynctrace report asynctrace-traces/20261129-101500-ab12cd/ -o report.html
  asynctrace report 'run/traces-*.jsonl' run/sessions-r0.jsonl --step 12 -o report.html

A directory contributes its traces-*.jsonl and sessions-*.jsonl files; a file
is recognised by its content. The report needs no network to view.
exit status: 0 no violation, 1 invariant violations, 2 unreadable input
"""

MAX_WATERFALL_ROWS = 400
MAX_WATERFALL_COLLECT = 50_000
TIMELINE_SESSIONS = 200
MAX_DURATION_FIELDS = 32  # distinct ``*_s`` fields with a histogram; values of others are counted
MAX_PHASES = 32  # distinct phase names on the timeline; executions of others are counted
MAX_PHASE_RUNS = 64  # phase executions drawn per session; the rest are counted


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


@dataclass
class WaterfallSpan:
    """One row of the waterfall."""

    depth: int
    name: str
    start: float
    end: float
    bucket: str | None
    span_id: str
    process: str
    attributes: list[tuple[str, str]]
    stall: bool = False  # an event-loop stall (group loop_stall): drawn as a marker


@dataclass
class Waterfall:
    """The spans of one step, depth first."""

    step: StepRow
    process: str
    spans: list[WaterfallSpan]
    hidden: int = 0  # spans of the step's trace starting inside it that are not drawn
    chosen_by: str = "slowest step"
    hidden_why: list[str] = field(default_factory=list)  # ``"12 past the 400-row limit"``


@dataclass
class SessionRow:
    """One session on the lifecycle timeline."""

    session_id: str
    task_id: str
    status: str
    submit: float
    finalized: float
    phases: list[tuple[str, float, float]]


@dataclass
class Sessions:
    """Session records, summarised: counts, durations and a timeline sample."""

    files: list[Path]
    count: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    durations: dict[str, array[float]] = field(default_factory=dict)
    timeline: list[SessionRow] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    bad_durations: int = 0  # ``*_s`` values that are not seconds within ±1e12
    bad_samples: list[str] = field(default_factory=list)
    other_fields: int = 0  # values of ``*_s`` fields past the first MAX_DURATION_FIELDS
    phase_runs_left_out: int = 0  # executions of phases past MAX_PHASES, or past MAX_PHASE_RUNS
    bad_phase_runs: int = 0  # phase entries that are not a run with a start before its end
    no_session_id: int = 0  # records without a ``session_id``: not sessions, not counted
    no_submit: int = 0  # sessions without a submit time: counted, not on the timeline
    on_timeline: int = 0  # sessions with a submit time (the timeline samples these)

    def left_out(self) -> list[str]:
        """What the page leaves out of the session charts, one sentence each.

        Example:
            >>> Sessions([], other_fields=3).left_out()
            ['left out 3 session durations of *_s fields past the first 32, which have histograms']
        """
        out = []
        if self.no_session_id:
            n = self.no_session_id
            out.append(
                f"left out {n} record{'s' if n != 1 else ''} of the sessions files without "
                "a session_id (not counted as sessions, their durations not charted)"
            )
        if self.no_submit:
            n = self.no_submit
            out.append(
                f"left out of the timeline {n} session{'s' if n != 1 else ''} whose "
                "submit_ts is missing or not a number of seconds (counted in the statuses "
                "and histograms)"
            )
        if self.bad_durations:
            n = self.bad_durations
            more = ", ..." if n > len(self.bad_samples) else ""
            out.append(
                f"left out {n} session duration{'s' if n != 1 else ''} that "
                f"{'is' if n == 1 else 'are'} not a number of seconds within ±1e12 "
                f"({', '.join(self.bad_samples)}{more})"
            )
        if self.other_fields:
            n = self.other_fields
            out.append(
                f"left out {n} session duration{'s' if n != 1 else ''} of *_s fields past "
                f"the first {MAX_DURATION_FIELDS}, which have histograms"
            )
        if self.phase_runs_left_out:
            n = self.phase_runs_left_out
            out.append(
                f"left out {n} phase execution{'s' if n != 1 else ''} of the timeline: of "
                f"phases past the first {MAX_PHASES} names, or past {MAX_PHASE_RUNS} "
                "in one session"
            )
        if self.bad_phase_runs:
            n = self.bad_phase_runs
            out.append(
                f"left out {n} malformed phase execution{'s' if n != 1 else ''} of the "
                "timeline: phases not a mapping of names to lists of runs, a run not an "
                "object, a start_ts or end_ts not a number of seconds, or an end before "
                "its start"
            )
        return out


@dataclass
class ReportData:
    """Everything the HTML shows."""

    title: str
    goodput: dict[str, Any]
    waterfall: Waterfall | None
    sessions: Sessions | None
    notes: list[str]
    trace_files: list[Path]
    processes: list[str]
    profiles: list[tuple[str, str, str]] = field(default_factory=list)  # (step, backend, href)


def _profiles(
    captures: Sequence[Path], output: Path, notes: list[str]
) -> list[tuple[str, str, str]]:
    """The profiler captures among the inputs: (step, backend, link relative to the report).

    Each is checked as ``convert`` checks it: one that is not readable as JSON
    (a capture cut short) is not linked, and one ``convert`` would not merge
    for another reason is linked; either way *notes* says why.
    """
    rows = []
    base = output.resolve().parent
    for path in captures:
        match = CAPTURE_NAME.match(path.name)
        if match is None:  # pragma: no cover - find_captures matched it
            continue
        checked = load_capture(path)
        if not isinstance(checked, Capture):
            if checked.startswith(f"{path.name}: {_UNREADABLE}"):
                notes.append(f"profile capture not linked: {checked}")
                continue
            notes.append(f"profile capture linked, but convert cannot merge it: {checked}")
        href = Path(os.path.relpath(path.resolve(), base)).as_posix()
        role = match["role"]  # the driver's rank 0 is not worker rank 0
        who = f"r{match['rank']}" if role in (None, "worker") else f"{role} r{match['rank']}"
        rows.append((f"{who} step {match['step']}", match["backend"], href))
    return rows


_UNREADABLE = "not readable as JSON"  # load_capture's reason for a file that is not JSON


def _classify(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Trace and session files among *paths* (captures left out), by their content."""
    traces: list[Path] = []
    sessions: list[Path] = []
    for path in paths:
        if is_capture(path):  # linked under "Profiled steps" (see _profiles), not read
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


_SHOWN_ATTRIBUTES = (
    "rl.iteration",
    "rl.bucket",
    "rl.efficiency.category",
    "rl.idle.polls",
    "code.function.name",
    "code.file.path",
    "code.line.number",
    "asynctrace.stall.task",
    "asynctrace.stall.samples",
)


def _waterfall(collected: Collected, step: StepRow, chosen_by: str, progress: bool) -> Waterfall:
    """Second pass: the spans of the step's trace that start inside it, as a tree."""
    by_parent: dict[str, list[tuple[float, int, dict[str, Any], int]]] = {}
    root: tuple[float, int, dict[str, Any], int] | None = None
    collected_spans = 0
    seq = roots = 0
    bar = Progress(file_size(collected.paths), "asynctrace report", enabled=progress)
    try:
        for index, path in enumerate(collected.paths):
            for event, _ in iter_file(path, ReadStats(), bar):
                if event.get("ph") != "X":
                    continue
                args = event.get("args")
                if not isinstance(args, dict) or args.get("trace_id") != step.trace_id:
                    continue
                ts = event.get("ts")
                if not isinstance(ts, (int, float)) or not step.start <= ts <= step.end:
                    continue
                seq += 1
                origin = collected.origins.origin(index, event.get("pid"))
                item = (float(ts), seq, event, origin)
                if args.get("span_id") == step.span_id:
                    roots += 1
                    root = item
                elif collected_spans < MAX_WATERFALL_COLLECT:
                    collected_spans += 1
                    parent = str(args.get("parent_span_id"))
                    by_parent.setdefault(parent, []).append(item)
    finally:
        bar.close()
    spans: list[WaterfallSpan] = []
    past_rows = 0
    stack = [(0, root)] if root is not None else []
    while stack:
        depth, item = stack.pop()
        assert item is not None
        if len(spans) >= MAX_WATERFALL_ROWS:
            past_rows += 1
        else:
            spans.append(_row(collected.origins, depth, item))
        span_id = item[2]["args"].get("span_id")
        children = by_parent.pop(str(span_id), [])
        for child in sorted(children, reverse=True):
            stack.append((depth + 1, child))
    # Every matching span that is not a row: past the row limit, past the collect
    # limit, or not reached from the step (its parent is not among the spans
    # collected, or it repeats the step's span id).
    past_collect = seq - roots - collected_spans
    unreached = sum(map(len, by_parent.values())) + max(0, roots - 1)
    why = [
        f"{count} {what}"
        for count, what in (
            (past_rows, f"past the {MAX_WATERFALL_ROWS}-row limit"),
            (past_collect, f"past the first {MAX_WATERFALL_COLLECT:,} collected"),
            (unreached, "whose parent is not among the spans collected"),
        )
        if count
    ]
    hidden = past_rows + past_collect + unreached
    process = collected.origins.label(step.origin)
    return Waterfall(step, process, spans, hidden, chosen_by, why)


def _row(
    origins: Origins, depth: int, item: tuple[float, int, dict[str, Any], int]
) -> WaterfallSpan:
    ts, _, event, origin = item
    args = event["args"]
    dur = event.get("dur", 0)
    end = ts + (dur if isinstance(dur, (int, float)) else 0)
    bucket = args.get("rl.bucket")
    attributes = [(k, str(args[k])) for k in _SHOWN_ATTRIBUTES if k in args]
    attributes.extend(
        (str(k), str(v))
        for k, v in list(args.items())[:12]
        if k not in _SHOWN_ATTRIBUTES and k not in ("trace_id", "parent_span_id")
    )
    return WaterfallSpan(
        depth=depth,
        name=str(event.get("name")),
        start=ts,
        end=end,
        bucket=None if bucket is None else str(bucket),
        span_id=str(args.get("span_id")),
        process=origins.label(origin),
        attributes=attributes,
        stall=args.get("asynctrace.group") == "loop_stall",
    )


def _sessions(paths: list[Path], stats: ReadStats, progress: bool) -> Sessions:
    out = Sessions(paths)
    sample = random.Random(0)
    reservoir: list[SessionRow] = []
    phase_order: dict[str, None] = {}
    bar = Progress(file_size(paths), "asynctrace report", enabled=progress)
    try:
        for path in paths:
            for record, _ in iter_file(path, stats, bar):
                if "session_id" not in record:
                    out.no_session_id += 1
                    continue
                out.count += 1
                out.statuses[str(record.get("status"))] += 1
                for key, value in record.items():
                    if key.endswith("_s"):
                        _add_duration(out, path, key, value)
                row = _session_row(record, phase_order, out)
                if row is None:
                    out.no_submit += 1
                    continue
                out.on_timeline += 1
                if len(reservoir) < TIMELINE_SESSIONS:
                    reservoir.append(row)
                else:
                    slot = sample.randrange(out.on_timeline)
                    if slot < TIMELINE_SESSIONS:
                        reservoir[slot] = row
    finally:
        bar.close()
    out.timeline = sorted(reservoir, key=lambda r: (r.submit, r.session_id))
    out.phases = list(phase_order)
    return out


def _add_duration(out: Sessions, path: Path, key: str, value: object) -> None:
    """Add one ``*_s`` value to its histogram, or count it as left out."""
    seconds = _seconds(value)
    if seconds is None:  # NaN, an infinity, an int no float holds, a string, null
        out.bad_durations += 1
        if len(out.bad_samples) < 3:
            out.bad_samples.append(f"{path.name}: {key[:40]}")
        return
    values = out.durations.get(key)
    if values is None:
        if len(out.durations) >= MAX_DURATION_FIELDS:  # a file cannot make endless charts
            out.other_fields += 1
            return
        values = out.durations[key] = array("d")
    values.append(seconds)


def _seconds(value: object) -> float | None:
    """*value* as a time in seconds, if it is a finite number a float holds."""
    return float(value) if real_number(value, _MAX_S) else None  # type: ignore[arg-type]


_MAX_S = 1e12  # about 31,700 years: any real timestamp


def _latest(phases: object, submit: float) -> float:
    """The latest time a pending session's phase runs name (its submit time if none):
    where its open runs are drawn to, as no end was recorded."""
    latest = submit
    if isinstance(phases, dict):
        for runs in phases.values():
            for run in runs if isinstance(runs, list) else ():
                if isinstance(run, dict):
                    for key in ("start_ts", "end_ts"):
                        seconds = _seconds(run.get(key))
                        if seconds is not None and seconds > latest:
                            latest = seconds
    return latest


def _session_row(
    record: dict[str, Any], phase_order: dict[str, None], out: Sessions
) -> SessionRow | None:
    submit = _seconds(record.get("submit_ts"))
    if submit is None:
        return None
    raw = record.get("phases")
    finalized = _seconds(record.get("finalized_ts"))
    if finalized is None:  # still pending at shutdown (AReaL's style): its latest time
        finalized = _latest(raw, submit)
    phases: list[tuple[str, float, float]] = []
    if raw is not None and not isinstance(raw, dict):
        out.bad_phase_runs += 1  # the whole field: its runs cannot be told apart
    if isinstance(raw, dict):
        for name, runs in raw.items():
            if not isinstance(runs, list):
                out.bad_phase_runs += 1
                continue
            if name not in phase_order:
                if len(phase_order) >= MAX_PHASES:  # a file cannot make endless colours
                    out.phase_runs_left_out += len(runs)
                    continue
                phase_order[name] = None
            for run in runs:
                if not isinstance(run, dict):
                    out.bad_phase_runs += 1
                    continue
                start = _seconds(run.get("start_ts"))
                end_ts = run.get("end_ts")
                end = finalized if end_ts is None else _seconds(end_ts)  # None: still running
                if start is None or end is None or end < start:
                    out.bad_phase_runs += 1
                    continue
                if len(phases) >= MAX_PHASE_RUNS:
                    out.phase_runs_left_out += 1
                    continue
                phases.append((name, start, end))
    return SessionRow(
        session_id=str(record.get("session_id")),
        task_id=str(record.get("task_id")),
        status=str(record.get("status")),
        submit=submit,
        finalized=finalized,
        phases=phases,
    )


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
        waterfall = _waterfall(collected, chosen[0], chosen[1], progress)
    session_stats = ReadStats(kind="sessions file")
    sessions = _sessions(session_paths, session_stats, progress) if session_paths else None
    notes = input_notes(collected)  # what goodput says about the same traces
    if session_stats.summary():
        notes.append(session_stats.summary())
    if sessions is not None:
        notes.extend(sessions.left_out())
    # links from the current directory when the page goes to stdout
    profiles = _profiles(captures, Path("report.html") if to_stdout else target, notes)
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
    stream = output.open()
    try:
        stream.write(text.encode("utf-8"))
        output.commit()
    except OSError as exc:
        output.abort()
        raise CliError(f"{name}: {exc.strerror or exc}") from None
    except BaseException:
        output.abort()
        raise
