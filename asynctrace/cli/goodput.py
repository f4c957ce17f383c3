"""``asynctrace goodput``: per step, wall time, seconds per bucket and the goodput ratio.

Also checks the accounting invariants: a bucketed span has no bucketed
descendant, a step's bucket seconds never exceed its wall time, and every
bucket value is a known one. Exit status: 0 clean, 1 violations, 2 unreadable
input.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._collect import (
    CLI_WINDOW,
    GRACE_ACCEPTED,
    LIVE,
    MAX_GRACE_S,
    STEP_RULE,
    add_step_options,
    collect,
)
from ._common import CliError, HelpFormatter, note, positive_int, write_stdout
from ._goodput_document import to_json
from ._goodput_text import to_csv, to_text
from ._input_notes import input_notes
from ._inputs import TRACE_PATTERN, expand_inputs
from ._sniff import sniff_kind

__all__ = ["add_parser", "run"]

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
    live = LIVE
    parser.add_argument(
        "--grace",
        metavar="SECONDS",
        type=_grace_seconds,
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


def _grace_seconds(text: str) -> float:
    """``--grace``: seconds, as the live key ``goodput.grace_s`` takes them (argparse
    names the option in its message)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds; accepted: {GRACE_ACCEPTED}"
        ) from None
    if not 0 <= value < MAX_GRACE_S:  # NaN, an infinity, or one that overflows in µs
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted; accepted: {GRACE_ACCEPTED}")
    return value


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


def _json_text(document: dict[str, Any]) -> str:
    import json

    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
