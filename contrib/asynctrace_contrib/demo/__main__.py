"""``python -m asynctrace_contrib.demo [OUT] [--steps N] [--prompts N]``: run the demo and
print where its files are."""

from __future__ import annotations

import argparse
import sys

from asynctrace import ConfigurationError

from . import DemoError, positive_int, run_demo


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 2 when an argument is not accepted, 1 when the run fails (the
    Gym server gone, say), each with one line on stderr."""
    parser = argparse.ArgumentParser(
        prog="python -m asynctrace_contrib.demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("out", nargs="?", default="asynctrace-demo", help="output directory")
    parser.add_argument("--steps", type=positive_int, default=8, help="training steps (8)")
    parser.add_argument(
        "--prompts", type=positive_int, default=16, help="prompt groups per step (16)"
    )
    args = parser.parse_args(argv)
    try:
        result = run_demo(args.out, steps=args.steps, prompts=args.prompts)
    except ConfigurationError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except DemoError as exc:
        print(f"{parser.prog}: error: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return 1
    print(f"{len(result.rollouts)} rollouts in {result.seconds:.1f} s; files in {result.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
