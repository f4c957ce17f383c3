"""Run every benchmark script; exit 1 if any target was missed (all of them still run).

Usage: python benchmarks/all.py [--quick]
"""

from __future__ import annotations

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


def main() -> int:
    here = Path(__file__).parent
    codes = []
    for script in SCRIPTS:
        print(f"== {script}", flush=True)
        command = [sys.executable, str(here / script), *sys.argv[1:]]
        codes.append(subprocess.run(command, check=False).returncode)
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
