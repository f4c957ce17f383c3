"""Instructions per recorded span, ours against AReaL's tracer: a figure no neighbour moves.

Usage: python benchmarks/instructions.py [--spans N]

Runs this script under ``valgrind --tool=callgrind`` once per body and span
count: a recorded leaf span on the fast provider (chrome exporter, writer
idle: the producing thread's work), AReaL 1.0.4's ``trace_scope`` into its
own buffer, and ``with nullcontext()``, each *N* and *2N* times after 200 to
warm. The difference between the two counts, over *N*, is the instructions
per span, without the interpreter's start-up. A reference for
``bench_provider.py``'s timed figure, which a drifting VM moves: it has no
target and exits 0 (1 if valgrind or AReaL's tracer is missing).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
BODIES = ("null", "ours", "areal")


def child(body: str, n: int) -> None:
    """Run *body* *n* times after a warm-up, then leave at once (no shutdown counted)."""
    sys.path.insert(0, str(HERE))
    from _areal import PerfTracerConfig, load_perf_tracer
    from bench_provider import configure, null_body, ours_body

    import asynctrace as at

    tmp = tempfile.mkdtemp(prefix="asynctrace-instructions-")
    tracer = load_perf_tracer()
    config = PerfTracerConfig(experiment_name="i", trial_name="t", fileroot=tmp, enabled=True)
    tracer.configure(config, rank=0)
    scope = tracer.trace_scope

    def areal_body() -> None:
        with scope("rl.generate", category="compute", args={"global_step": 3}):
            pass

    with at.iteration_scope(3):
        configure("fast", tmp, 2 * n + 400)  # the writer idle: the producing thread only
        run = {"null": null_body, "ours": ours_body, "areal": areal_body}[body]
        for _ in range(200):
            run()
        for _ in range(n):
            run()
        sys.stdout.flush()
        os._exit(0)


def instructions(body: str, n: int) -> int:
    """Instructions callgrind counted for a child running *body* *n* times."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/out",
                sys.executable,
                __file__,
                "--child",
                body,
                "--spans",
                str(n),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind run of {body} failed: {done.stderr.strip()[-400:]}")
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=4000, help="N (4000)")
    parser.add_argument("--child", choices=BODIES, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.child, options.spans)
        return 0
    if shutil.which("valgrind") is None:
        print("!!! MISSING: valgrind is not installed (apt-get install valgrind); not measured")
        return 1
    n = options.spans
    per_span = {}
    for body in BODIES:
        try:
            per_span[body] = (instructions(body, 2 * n) - instructions(body, n)) / n
        except RuntimeError as exc:
            print(f"!!! MISSING: {exc}")
            return 1
        print(f"  {body:5s} {per_span[body]:9,.0f} instructions per call")
    ours, areal, null = per_span["ours"], per_span["areal"], per_span["null"]
    print(
        f"recorded leaf span, fast provider + chrome: {ours / null:.2f}x nullcontext; AReaL "
        f"trace_scope {areal / null:.2f}x; ours/AReaL {ours / areal:.3f} by instructions "
        f"(bench_provider.py's timed target: <= 0.80)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
