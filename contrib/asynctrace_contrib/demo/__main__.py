"""``python -m asynctrace_contrib.demo [OUT]``: run the demo and print where its files are."""

from __future__ import annotations

import sys

from . import run_demo

if __name__ == "__main__":
    result = run_demo(sys.argv[1] if len(sys.argv) > 1 else "asynctrace-demo")
    print(f"{len(result.rollouts)} rollouts in {result.seconds:.1f} s; files in {result.out}")
