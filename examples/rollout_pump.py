"""The rollout-pump demo, runnable from a checkout: ``python examples/rollout_pump.py [OUT]``.

An asyncio driver trains for a few steps while a rollout pump keeps a bounded
number of prompts in flight against a FastAPI "Gym" server over aiohttp, a
collector thread gathers finished rollouts, and every other step stages a
checkpoint whose finalization outlives the step: all in one trace. The code
lives in ``asynctrace_contrib.demo`` (installed with ``asynctrace[demo]``),
which ``asynctrace demo`` runs too; this script runs it, then prints the
goodput table of the files it wrote.

Open ``OUT/trace.json`` in https://ui.perfetto.dev and ``OUT/report.html`` in
a browser.
"""

from __future__ import annotations

import argparse
import sys

from asynctrace_contrib.demo import DemoError, positive_int, run_demo

from asynctrace import ConfigurationError
from asynctrace.cli import main as cli


def run(argv: list[str] | None = None) -> int:
    """Run the demo, convert its files, write the report and print the goodput table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="asynctrace-demo")
    parser.add_argument("--steps", type=positive_int, default=8)
    parser.add_argument("--prompts", type=positive_int, default=16)
    args = parser.parse_args(argv)
    try:
        result = run_demo(args.out, steps=args.steps, prompts=args.prompts)
    except ConfigurationError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except DemoError as exc:  # the run failed: its Gym server went away, say
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    print(f"{len(result.rollouts)} rollouts in {result.seconds:.1f} s; files in {result.out}")
    inputs = [str(path) for path in result.trace_files]
    code = cli(["convert", *inputs, "-o", str(result.out / "trace.json"), "--no-progress"])
    code = code or cli(["report", str(result.out), "-o", str(result.out / "report.html")])
    return code or cli(["goodput", *inputs, "--no-progress"])


if __name__ == "__main__":
    raise SystemExit(run())
