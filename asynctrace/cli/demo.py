"""``asynctrace demo``: run the rollout-pump demo, then roll its trace up."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from ._common import CliError, HelpFormatter

__all__ = ["add_parser", "run"]

EPILOG = """\
examples:
  asynctrace demo
  asynctrace demo --steps 4 --prompts 8 --out /tmp/demo
  asynctrace demo --span-groups default      # only the preset's coarse spans
  asynctrace demo --exporter otlp            # also to a collector (OTEL_EXPORTER_OTLP_*)

It writes traces-*.jsonl and sessions-*.jsonl into --out, then trace.json (open
it in ui.perfetto.dev), report.html (open it in any browser, offline) and
prints the goodput table. Needs: pip install 'asynctrace[demo]'.
"""


def _positive(text: str) -> int:
    """An integer >= 1 (argparse prints the message of the error raised otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def add_parser(subparsers: Any) -> None:
    """Register the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="run the rollout-pump demo and write its trace, report and goodput",
        description="Run an async RL training loop against a FastAPI 'Gym' server "
        "(no GPU, no model), traced end to end, then convert, roll up and report it.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--steps", type=_positive, default=8, help="training steps (8)")
    parser.add_argument(
        "--prompts", type=_positive, default=16, help="prompt groups per step (16)"
    )
    parser.add_argument(
        "--max-inflight", type=_positive, default=4, help="prompt groups in flight (4)"
    )
    parser.add_argument(
        "--checkpoint-every", type=_positive, default=2, help="steps between checkpoints (2)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("asynctrace-demo"),
        help="output directory (asynctrace-demo); earlier demo files there are replaced",
    )
    parser.add_argument(
        "--span-groups", default="all", metavar="SPEC", help="span-group spec (all)"
    )
    parser.add_argument(
        "--exporter",
        action="append",
        choices=("otlp", "console"),
        metavar="NAME",
        help="also export to otlp or console (repeatable; chrome always writes --out); "
        "default: ASYNCTRACE_EXPORTERS, else OTEL_TRACES_EXPORTER",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo, then ``convert``, ``report`` and ``goodput`` on its files."""
    try:
        from asynctrace_contrib.demo import DemoError, run_demo
    except ImportError as exc:
        missing = f"module {exc.name!r} is missing" if exc.name else str(exc)
        raise CliError(
            f"the demo needs the 'demo' extra ({missing}); "
            "install it with: pip install 'asynctrace[demo]'"
        ) from exc
    from asynctrace import ConfigurationError, resolve_span_groups

    from . import main

    try:  # the spec, the exporters and --out are checked before anything runs
        result = run_demo(
            args.out,
            steps=args.steps,
            prompts=args.prompts,
            max_inflight=args.max_inflight,
            checkpoint_every=args.checkpoint_every,
            span_groups=args.span_groups,
            exporters=args.exporter,
        )
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    except DemoError as exc:  # the run failed (its Gym server went away, say): exit 1
        raise CliError(str(exc), code=1) from None
    out: Path = result.out
    trace_json, report_html = out / "trace.json", out / "report.html"
    traces = [str(p) for p in result.trace_files]
    sessions = [str(result.sessions_file)] if result.sessions_file else []
    print(
        f"demo: {len(result.rollouts)} rollouts in {args.steps} steps, {result.seconds:.1f} s "
        f"in all (the Gym server's start, the steps, shutdown; the steps' own wall time is "
        f"in the table below); files in {out}"
    )
    codes = [
        main(["convert", *traces, "-o", str(trace_json)]),
        main(["report", *traces, *sessions, "-o", str(report_html)]),
    ]
    print(f"  Perfetto trace: {trace_json}  (open it in https://ui.perfetto.dev)")
    print(f"  report:         {report_html}")
    print(f"  sessions:       {', '.join(sessions) or '-'}")
    print()
    sys.stdout.flush()
    if "step" in resolve_span_groups(args.span_groups):
        codes.append(main(["goodput", *traces]))
    else:
        print(f"no goodput table: the 'step' group is not in {args.span_groups!r}")
    python = shlex.quote(sys.executable)
    where = shlex.quote(str(out))
    print()
    print("rerun on these files (or `nox -s cli -- goodput ...` from the checkout):")
    print(f"  {python} -m asynctrace goodput {where}")
    print(f"  {python} -m asynctrace report {where} -o {shlex.quote(str(report_html))}")
    print(f"  {python} -m asynctrace convert {where} -o {shlex.quote(str(trace_json))}")
    return max(codes)
