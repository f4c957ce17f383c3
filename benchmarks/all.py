"""Run every benchmark script; exit 1 if any of them failed (all of them still run).

A script fails when it exits non-zero: a missed target (exit 1), an error, or
a kill by a signal (a negative return code, such as a segfault or an OOM
kill). The scripts that failed are listed at the end with their exit status.

Usage: python benchmarks/all.py [--quick]
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SCRIPTS = [
    "run.py",
    "bench_provider.py",
    "bench_export.py",
    "bench_otlp.py",
    "bench_sessions.py",
    "bench_stalls.py",
    "bench_goodput.py",
    "bench_profiling.py",
    "bench_http.py",
    "bench_cli.py",
    "bench_demo.py",
    "demo_calls.py",
    "wake_penalty.py",
    "server_path.py",
]


def describe(code: int) -> str:
    """A return code in words: ``exit 1``, or ``killed by SIGSEGV`` for a negative one."""
    if code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}"


def main() -> int:
    here = Path(__file__).parent
    failed: list[tuple[str, int]] = []
    for script in SCRIPTS:
        print(f"== {script}", flush=True)
        command = [sys.executable, str(here / script), *sys.argv[1:]]
        code = subprocess.run(command, check=False).returncode
        if code != 0:
            failed.append((script, code))
    if not failed:
        return 0
    print(f"== {len(failed)} of {len(SCRIPTS)} benchmarks failed:", flush=True)
    for script, code in failed:
        print(f"   {script}: {describe(code)}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
