"""``asynctrace goodput``: per step, wall time, seconds per bucket and the goodput ratio.

Also checks the accounting invariants: a bucketed span has no bucketed
descendant, a step's bucket seconds never exceed its wall time, and every
bucket value is a known one. Exit status: 0 clean, 1 violations, 2 unreadable
input.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rollup import BUCKETS, GoodputSettings, Rollup, RollupResult, StepRow, step_numbers
from ._areal import ArealEvents, parse_bucket_map
from ._common import (
    CliError,
    HelpFormatter,
    Progress,
    escape_controls,
    note,
    positive_int,
    write_stdout,
)
from ._inputs import TRACE_PATTERN, expand_inputs, file_size
from ._open_files import allow_open_files
from ._origins import Origins
from ._read_stats import ReadStats
from ._records import iter_file
from ._sniff import sniff_kind

__all__ = ["Collected", "add_parser", "collect", "input_notes", "run", "to_json"]

STEP_RULE = (
    "a step is a span of group 'step', or an unbucketed span carrying an integer "
    "rl.iteration whose parent carries neither rl.iteration nor rl.bucket and is not "
    "a step itself"
)

EPILOG = """\
examples:
  asynctrace goodput asynctrace-traces/20261129-101500-ab12cd/
  asynctrace goodput 'run/traces-*.jsonl' --json > goodput.json
  asynctrace goodput run/ --csv --step-name '\\.step$'

A step is a span of group 'step', or an unbucketed span carrying an integer
rl.iteration whose parent carries neither rl.iteration nor rl.bucket (the
outermost stamped umbrella). Per bucket, a step counts the bucketed spans of
its subtree that have no bucketed descendant, clipped to the step's interval;
unbucketed spans (umbrellas, per-prompt spans, a detached finalize span)
never count. unattributed = wall - sum of buckets; goodput = productive / wall.
stalled = seconds the event loop was blocked inside the step (spans of group
loop_stall), shown apart: they overlap the spans they stretched, so they are
in no bucket.

exit status: 0 no violation, 1 invariant violations, 2 unreadable input
"""


_LIVE = GoodputSettings()  # the live rollup's defaults: the same grace as a live rollup
CLI_WINDOW = 200_000  # spans remembered, over every rank's file at once


def add_parser(subparsers: Any) -> None:
    """Register the ``goodput`` subcommand."""
    parser = subparsers.add_parser(
        "goodput",
        help="per-step goodput table and invariant checks",
        description="Per step: wall time, seconds per bucket (productive, overhead, idle, "
        "wasted), unattributed time and the goodput ratio; a run total; and the "
        "accounting invariants.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "inputs", nargs="+", metavar="TRACES", help="trace files, directories or globs"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON")
    output.add_argument("--csv", action="store_true", help="print CSV (violations on stderr)")
    add_step_options(parser)
    live = _LIVE
    parser.add_argument(
        "--grace",
        metavar="SECONDS",
        type=_nonnegative_seconds,
        default=live.grace_s,
        help="a step is finished once a span ends this long after it; later bucketed "
        "children count nowhere (late-bucket). The live rollup's goodput.grace_s "
        f"(default: {live.grace_s:g}, as live)",
    )
    parser.add_argument(
        "--window",
        metavar="N",
        type=positive_int,
        default=CLI_WINDOW,
        help="spans remembered for detached children that arrive after their parent, over "
        f"all inputs (default: {CLI_WINDOW:,}; goodput.window, {live.window:,} a process "
        "by default, to reproduce what a live rollup could not place)",
    )
    parser.add_argument(
        "--max-pending",
        metavar="N",
        type=positive_int,
        default=None,
        help="most waits for a parent not read yet plus the bucketed spans in them; past "
        "it the oldest are given up (default: no limit: every file is at hand; "
        f"goodput.max_pending, {live.max_pending:,} by default, as a live rollup)",
    )
    parser.set_defaults(run=run)


def _nonnegative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: seconds, 0 or more")
    return value


def add_step_options(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``report``."""
    parser.add_argument(
        "--step-name",
        metavar="REGEX",
        help="only spans whose name matches REGEX can be taken for steps by their "
        "rl.iteration; spans of group 'step' are steps whatever their name "
        "(default: any name)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar, even on a terminal"
    )
    parser.add_argument(
        "--bucket-map",
        metavar="CAT=BUCKET,...",
        help="for AReaL's own trace files: the bucket of each category (or a JSON file of "
        "them), over the default compute=productive, comm/io/scheduler/instr=overhead, "
        "sync=idle, misc=none",
    )


@dataclass
class Collected:
    """The rollup of a set of trace files."""

    paths: list[Path]
    result: RollupResult
    origins: Origins
    stats: ReadStats
    max_pending: int | None = None
    without_ph: int = 0  # JSON objects that are not trace events (no "ph"): skipped
    areal_outside_steps: int = 0  # AReaL's bucketed events under no step
    areal_outside_steps_s: float = 0.0
    areal_notes: list[str] = field(default_factory=list)  # what ArealEvents left out
    areal_without_ts: int = 0  # AReaL's complete events without a ts (in without_ids too)


def _step_pattern(text: str | None) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise CliError(f"--step-name: invalid regular expression {text!r}: {exc}") from None


def collect(
    paths: Sequence[Path],
    *,
    step_name: str | None,
    progress: bool,
    prog: str,
    bucket_map: str | None = None,
    grace_s: float = _LIVE.grace_s,
    window: int = CLI_WINDOW,
    max_pending: int | None = None,
) -> Collected:
    """Read *paths* (merged in end-time order) through a :class:`Rollup`.

    *grace_s*, *window* and *max_pending* are the rollup's (see
    :mod:`asynctrace.rollup`), as the live rollup's ``goodput.grace_s``,
    ``goodput.window`` and ``goodput.max_pending``. The grace is the live
    default; the other two are larger: the files of every rank are read
    through one rollup, and memory is not what bounds it (``report`` uses the
    same defaults). Give a run's own values to reproduce what its live rollup
    gave up.

    AReaL's own complete events (no span ids) are held per process and
    added last, with parents, buckets (*bucket_map* over the default table)
    and ``rl.iteration`` from ``global_step`` (see :mod:`._areal`).
    """
    pattern = _step_pattern(step_name)
    areal = ArealEvents(parse_bucket_map(bucket_map))
    stats = ReadStats()
    origins = Origins(paths)
    rollup = Rollup(
        step_name=pattern, grace_us=grace_s * 1e6, window=window, max_pending=max_pending
    )
    # the soft limit raised for the read only: a library caller's is put back
    restore_limit = allow_open_files(len(paths), prog) if len(paths) > 1 else None
    bar = Progress(file_size(paths), prog, enabled=progress)
    try:
        others = [0]  # JSON objects without "ph", over every file
        streams = [
            _complete_events(i, p, stats, bar, origins, others) for i, p in enumerate(paths)
        ]
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams)
        add = rollup.add
        origin = origins.origin
        take = areal.take
        for _, index, _, pid, event in merged:
            source = origin(index, pid)
            if not take(event, source):
                add(event, source)
        for event, source in areal.drain():
            add(event, source)
    finally:
        bar.close()
        if restore_limit is not None:
            restore_limit()
    if not stats.records:
        raise CliError(_nothing_read(paths, stats))
    result = rollup.finish()
    result.without_ids += areal.without_ts  # no time, as asynctrace's own events without one
    return Collected(
        list(paths),
        result,
        origins,
        stats,
        max_pending,
        without_ph=others[0],
        areal_outside_steps=areal.outside_steps,
        areal_outside_steps_s=areal.outside_steps_s,
        areal_notes=areal.notes(),
        areal_without_ts=areal.without_ts,
    )


def _nothing_read(paths: Sequence[Path], stats: ReadStats) -> str:
    if len(paths) == 1 and stats.empty:
        return f"{paths[0]}: empty file, no trace events"
    refusal = stats.refusal() if len(paths) == 1 else None
    if refusal is not None:
        return refusal
    return f"no trace events in the {len(paths)} input file(s) ({stats.summary() or 'all empty'})"


def _complete_events(
    index: int,
    path: Path,
    stats: ReadStats,
    bar: Progress,
    origins: Origins,
    others: list[int],
) -> Iterator[tuple[float, int, int, object, dict[str, Any]]]:
    """``(end, file index, sequence, pid, event)`` for the complete events of one file.

    The file's ``process_name`` metadata is recorded as it passes; it precedes
    the spans in files asynctrace writes. JSON objects without ``ph`` (not
    trace events: a session record, say) are counted in ``others[0]``.
    """
    seq = 0
    for event, _ in iter_file(path, stats, bar):
        ph = event.get("ph")
        if ph == "X":
            ts = event.get("ts")
            dur = event.get("dur", 0)
            try:
                end = float(ts + dur)
            except TypeError:
                end = 0.0
            seq += 1
            yield end, index, seq, event.get("pid"), event
        elif ph == "M" and event.get("name") == "process_name":
            origins.set_metadata(index, event.get("pid"), event.get("args"))
        elif ph is None and "ph" not in event:
            others[0] += 1


def run(args: argparse.Namespace) -> int:
    """Run ``asynctrace goodput``."""
    prog = "asynctrace goodput"
    paths = expand_inputs(args.inputs, [TRACE_PATTERN], "trace", prog)
    collected = collect(
        paths,
        step_name=args.step_name,
        progress=not args.no_progress,
        prog=prog,
        bucket_map=args.bucket_map,
        grace_s=args.grace,
        window=args.window,
        max_pending=args.max_pending,
    )
    result = collected.result
    if not result.steps:
        why = _no_steps(paths, args.step_name)
        if why.endswith(_SESSIONS_ONLY):  # the error says what the skipped objects are
            collected.without_ph = 0
        for line in input_notes(collected)[:-1]:  # what was skipped, then the error
            note(prog, line)
        raise CliError(why)
    if args.json:
        write_stdout(_json_text(to_json(collected)))
    elif args.csv:
        write_stdout(to_csv(collected))
        for violation in result.violations:
            note(prog, f"violation [{violation.kind}] {violation.message}")
    else:
        write_stdout(to_text(collected))
    for line in input_notes(collected):
        note(prog, line)
    return 1 if result.violations else 0


_SESSIONS_ONLY = "goodput reads traces-*.jsonl ('asynctrace report' reads both)"


def _no_steps(paths: Sequence[Path], step_name: str | None) -> str:
    """Why there is no table: no step in the input, said so that it can be fixed."""
    kinds = {sniff_kind(path) for path in paths}
    if kinds == {"sessions"}:
        which = paths[0] if len(paths) == 1 else f"all {len(paths)} inputs"
        return f"{which}: session records, not a trace; {_SESSIONS_ONLY}"
    among = f" among spans named like {step_name!r}" if step_name else ""
    return f"no step spans found{among} in {len(paths)} file(s) ({STEP_RULE})"


def input_notes(collected: Collected) -> list[str]:
    """What reading and rolling up the traces skipped or could not place, one line each.

    ``goodput`` prints these on stderr; ``report`` puts them in its summary
    and on the page.
    """
    result = collected.result
    lines = []
    summary = collected.stats.summary()
    if summary:
        lines.append(summary)
    if collected.without_ph:
        n = collected.without_ph
        lines.append(
            f"skipped {n} JSON object{'s' if n != 1 else ''} without 'ph' (not trace events)"
        )
    if result.without_ids:
        what = "complete events without trace/span ids or finite times were ignored"
        areal = collected.areal_without_ts
        of_them = f" ({areal} of them AReaL events without a ts)" if areal else ""
        lines.append(f"{result.without_ids} {what}{of_them}")
    if result.bad_ids:
        lines.append(
            f"{result.bad_ids} complete events whose span id is not a 64-bit hex number "
            "were ignored"
        )
    if result.evicted:
        plural = "s" if result.evicted != 1 else ""
        leaves = result.evicted_leaves
        lines.append(
            f"{result.evicted} wait{plural} for a parent span given up past --max-pending "
            f"{collected.max_pending}: {leaves} bucketed span{'s' if leaves != 1 else ''} "
            "in them counted in no step (a larger --max-pending, or none, keeps them)"
        )
    if result.duplicates:
        lines.append(f"{result.duplicates} duplicate spans were ignored")
    lines.extend(result.notes)
    lines.extend(collected.areal_notes)
    if not result.steps:
        lines.append(f"no step spans found ({STEP_RULE})")
    return lines


# -- numbers -------------------------------------------------------------------


def _seconds(us: float) -> float:
    return round(us / 1e6, 6)


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 6) if whole > 0 else None


def _totals(rows: Sequence[StepRow]) -> tuple[float, list[float]]:
    wall = sum(row.wall for row in rows)
    sums = [sum(row.sums[i] for row in rows) for i in range(len(BUCKETS))]
    return wall, sums


def _row_dict(row: StepRow, origins: Origins) -> dict[str, Any]:
    info = origins.infos[row.origin]
    out: dict[str, Any] = {
        "name": row.name,
        "iteration": row.iteration,
        "process": origins.label(row.origin),
        "rank": info.rank,
        "role": info.role,
        "pid": origins.keys[row.origin][1],
        "trace_id": row.trace_id,
        "span_id": row.span_id,
        "start_us": row.start,
    }
    out.update(step_numbers(row))  # the live StepGoodput records' numbers too
    return out


def to_json(collected: Collected) -> dict[str, Any]:
    """The goodput document: steps, run total, violations, inputs."""
    rows = collected.result.steps
    wall, sums = _totals(rows)
    total: dict[str, Any] = {"steps": len(rows), "wall_s": _seconds(wall)}
    for i, bucket in enumerate(BUCKETS):
        total[f"{bucket}_s"] = _seconds(sums[i])
    total["unattributed_s"] = _seconds(wall - sum(sums))
    total["goodput"] = _ratio(sums[0], wall)
    total["stalled_s"] = _seconds(sum(row.stalled for row in rows))
    result = collected.result
    return {
        "step_rule": STEP_RULE,
        "steps": [_row_dict(row, collected.origins) for row in rows],
        "total": total,
        "violations": [
            {
                "kind": v.kind,
                "message": v.message,
                "spans": [{"name": n, "span_id": s, "trace_id": t} for n, s, t in v.spans],
            }
            for v in result.violations
        ],
        "inputs": {
            "files": [str(p) for p in collected.paths],
            "spans": result.spans,
            "malformed_lines": collected.stats.malformed,
            "empty_files": collected.stats.empty,
            "unusable_files": [
                {"file": path.name, "why": why} for path, why in collected.stats.unusable
            ],
            "without_ids": result.without_ids,
            "bad_ids": result.bad_ids,
            "duplicates": result.duplicates,
            "evicted": result.evicted,
            "evicted_leaves": result.evicted_leaves,
            "abandoned": result.abandoned,
            "abandoned_leaves": result.abandoned_leaves,
            "no_duration_steps": result.void_steps,
            "no_duration_leaves": result.void_leaves,
            "bad_iterations": result.bad_iterations,
            "dropped_stubs": result.dropped_stubs,
            "without_ph": collected.without_ph,
            "areal_outside_steps": collected.areal_outside_steps,
            "areal_outside_steps_s": round(collected.areal_outside_steps_s, 6),
        },
    }


def _json_text(document: dict[str, Any]) -> str:
    import json

    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


CSV_COLUMNS = [
    "process",
    "iteration",
    "name",
    "span_id",
    "wall_s",
    *(f"{b}_s" for b in BUCKETS),
    "unattributed_s",
    "goodput",
    "stalled_s",
]


def to_csv(collected: Collected) -> str:
    """One CSV row per step, then a ``total`` row."""
    document = to_json(collected)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for step in document["steps"]:
        writer.writerow(["" if step[c] is None else step[c] for c in CSV_COLUMNS])
    total = dict(document["total"], process="total", iteration="", name="", span_id="")
    writer.writerow(["" if total[c] is None else total[c] for c in CSV_COLUMNS])
    return out.getvalue()


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def to_text(collected: Collected) -> str:
    """The table, the run total and the invariant summary, for a terminal.

    Names read from the traces (steps, processes, the spans in a violation)
    have their control characters escaped (see :func:`escape_controls`): an
    escape sequence in a span name never acts on the terminal, and a newline
    never forges a row. ``--json`` and ``--csv`` keep them as written.
    """
    document = to_json(collected)
    headers = ["process", "iter", "step", "wall s", *BUCKETS, "unattributed", "goodput", "stalled"]
    table: list[list[str]] = []
    for step in document["steps"]:
        table.append(
            [
                escape_controls(step["process"]),
                "-" if step["iteration"] is None else str(step["iteration"]),
                _clip(escape_controls(step["name"]), 40) + ("*" if step["parent_missing"] else ""),
                f"{step['wall_s']:.4f}",
                *(f"{step[f'{b}_s']:.4f}" for b in BUCKETS),
                f"{step['unattributed_s']:.4f}",
                _percent(step["goodput"]),
                f"{step['stalled_s']:.4f}",
            ]
        )
    total = document["total"]
    table.append(
        [
            "total",
            "",
            f"{total['steps']} step{'s' if total['steps'] != 1 else ''}",
            f"{total['wall_s']:.4f}",
            *(f"{total[f'{b}_s']:.4f}" for b in BUCKETS),
            f"{total['unattributed_s']:.4f}",
            _percent(total["goodput"]),
            f"{total['stalled_s']:.4f}",
        ]
    )
    widths = [max(len(r[i]) for r in [headers, *table]) for i in range(len(headers))]
    left = {0, 2}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    lines = [line(headers), line(["-" * w for w in widths])]
    lines.extend(line(row) for row in table[:-1])
    lines.append(line(["-" * w for w in widths]))
    lines.append(line(table[-1]))
    violations = collected.result.violations
    if any(step["parent_missing"] for step in document["steps"]):
        lines.append(
            "* its parent span is not in the inputs (another rank's file, or a killed run)"
        )
    lines.append("")
    if violations:
        plural = "s" if len(violations) != 1 else ""
        lines.append(f"invariants: {len(violations)} violation{plural}")
        lines.extend(f"  [{v.kind}] {escape_controls(v.message)}" for v in violations)
    else:
        lines.append(
            "invariants: ok (no bucketed span has a bucketed descendant; no step's bucket "
            "seconds exceed its wall time; every bucket value is known)"
        )
    return "\n".join(lines) + "\n"
