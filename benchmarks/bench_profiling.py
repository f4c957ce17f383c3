"""Profiling chosen steps: what asking costs a span whose step is not scheduled.

Usage: python benchmarks/bench_profiling.py [--quick] [--json PATH]

Figures, each a ratio in one process, rounds interleaved (the median of the
per-round ratios):

1. ``umbrella_span("step", ..., profile=True)`` inside ``iteration_scope(3)``
   with a profiler configured for other steps (``steps: [1000]``), fast
   provider, chrome exporter, against the same span without ``profile``
   [<= 1.05x]. Asking costs one look at the schedule; nothing is profiled.
   The writer thread is kept idle while a round is timed (its queue holds
   the round and is flushed after it, untimed), as ``bench_provider.py``
   measures the producing thread: otherwise whichever side the writer's
   wake-ups fell in paid for them, and one run in three read 1.06.
2. The disabled path (telemetry off) with and without ``profile=True``
   [<= 1.05x]: the flag is not even read there.

Exits 1 if a target is missed. Needs viztracer (the ``profile`` extra), as
configuring the ``python`` backend checks it is installed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import asynctrace as at


def per_call_ns(body: Callable[[], None], n: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        body()
    return (time.perf_counter_ns() - start) / n


def asks() -> None:
    with at.umbrella_span("step", "rl.step", profile=True):
        pass


def plain() -> None:
    with at.umbrella_span("step", "rl.step"):
        pass


def ratio(n: int, rounds: int, telemetry: at.Telemetry | None = None) -> float:
    """Median over rounds of (asking / plain), the order flipping every round.

    With *telemetry*, its queues are flushed after each side, untimed: the
    writer thread does not run while a side is timed, so neither side pays
    for the writer's work, and each starts with an empty queue.
    """
    ratios = []
    for i in range(rounds):
        cost = {}
        for body in (asks, plain) if i % 2 else (plain, asks):
            cost[body] = per_call_ns(body, n)
            if telemetry is not None:
                telemetry.flush(30)
        ratios.append(cost[asks] / cost[plain])
    return statistics.median(ratios)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    n, rounds = (2_000, 9) if options.quick else (10_000, 31)
    print(f"python {platform.python_version()} on {platform.machine()}, {n:,} spans x {rounds}")
    results: dict[str, float] = {}
    ok = True
    with tempfile.TemporaryDirectory() as tmp, at.iteration_scope(3):
        telemetry = at.configure(
            {
                "enabled": True,
                "span_groups": "per_step",
                "exporters": ["chrome"],
                "output_dir": tmp,
                "profiler": {"steps": [1000]},
                "max_queue_size": 1_000_000,
                # The writer waits for a flush: it runs between rounds, not in them.
                "max_export_batch_size": 1_000_000,
                "schedule_delay_millis": 600_000,
            }
        )
        per_call_ns(asks, 1000)  # warm
        telemetry.flush(30)
        recorded = ratio(n, rounds, telemetry)
        telemetry.shutdown()
        profiled = sorted(Path(tmp).glob("profile-*"))
        if profiled:
            print(f"!!! a step that is not scheduled was profiled: {profiled}")
            ok = False
        at.configure({"enabled": False})
        disabled = ratio(n * 5, rounds)
    for name, value, label in (
        ("asks_not_scheduled", recorded, "recorded span that asks, step not scheduled"),
        ("disabled", disabled, "disabled span that asks"),
    ):
        good = value <= 1.05
        ok = ok and good
        results[name] = round(value, 3)
        print(f"{'ok  ' if good else 'MISS'} {label}: {value:.3f}x the same span without "
              "profile=True (target <= 1.05)")  # fmt: skip
    if options.json:
        options.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
