"""A span right after the thread woke from a wait, against the same span in a loop (reference).

Usage: python benchmarks/wake_penalty.py [--quick]

Microbenchmarks time a span in a tight loop, where everything it touches is
in the CPU's caches. A rollout pump's loop thread is not like that: it waits
in ``select`` for the network, and the span it records next runs in whatever
state the wait left the CPU in. This script measures that directly, in one
process, for four bodies: ``with nullcontext()``; the floor tracer's span
(``_floor_tracer.py``: a current OpenTelemetry span, an id, two clock reads
and a tuple); asynctrace's recorded leaf span (``managed_span`` in an
``iteration_scope``, fast provider, chrome exporter with its writer kept
idle, as in ``bench_provider.py``); and AReaL 1.0.4's ``trace_scope``
recording to its buffer. Each body is timed with ``perf_counter_ns``:

- *hot*: the median of chunks of 1,000 calls in a row;
- *after a wait*: one call right after ``time.sleep(200 us)``, 3,000 times
  (the median of the calls).

The four bodies take turns within a round (the order rotating), so a drift
of the machine falls on all of them alike. Then asynctrace's span alone:
its first and second call after each sleep, and its first call after a
busy spin of the same length (the thread never leaves the CPU). Printed:
each body's hot and after-a-wait cost, the difference (what a wake-up
costs that body), the three calls, and ours against AReaL's and against
the floor, hot and after a wait. A reference: no target; like
``bench_demo.py``, it exits 1 (and says so) when AReaL's tracer cannot be
loaded, so that a missing anchor is never silent. On the 2-core microVM
this project's figures come from, the first call after a sleep costs
about three times its hot cost and the second call a little more than its
hot cost, while after a busy spin the first call costs about its hot cost
(one ``--quick`` run read more): that is why the
end-to-end figures (``bench_demo.py``, ``bench_http.py``), whose loop
thread waits for the network between events, read higher than the
microbenchmarks predict.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import asynctrace as at

sys.path.insert(0, str(Path(__file__).parent))
import _floor_tracer as ft
from _areal import AnchorMissing, PerfTracerConfig, load_perf_tracer
from bench_provider import configure

WAIT_S = 0.0002
_ns = time.perf_counter_ns


def hot_ns(body: Callable[[], None], n: int = 1000) -> float:
    """Nanoseconds per call of *body*, *n* calls in a row (collector paused)."""
    gc.disable()
    try:
        start = _ns()
        for _ in range(n):
            body()
        return (_ns() - start) / n
    finally:
        gc.enable()


def _sleep() -> None:
    time.sleep(WAIT_S)


def _spin() -> None:
    until = _ns() + int(WAIT_S * 1e9)
    while _ns() < until:
        pass


def after_wait_ns(
    body: Callable[[], None], n: int, wait: Callable[[], None] = _sleep, calls: int = 1
) -> list[list[float]]:
    """Nanoseconds of the first *calls* calls of *body* after each of *n* waits."""
    out: list[list[float]] = [[] for _ in range(calls)]
    gc.disable()
    try:
        for _ in range(n):
            wait()
            for times in out:
                start = _ns()
                body()
                times.append(_ns() - start)
    finally:
        gc.enable()
    return out


def null_body() -> None:
    with contextlib.nullcontext():
        pass


def floor_body() -> None:
    with ft.Span("rl.generate", {"rl.iteration": 3, "rl.bucket": "productive"}):
        pass


def ours_body() -> None:
    with at.managed_span("generation", "rl.generate"):
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    options = parser.parse_args()
    waits, rounds = (500, 3) if options.quick else (1000, 3)
    bodies: dict[str, Callable[[], None]] = {
        "nullcontext": null_body,
        "floor span": floor_body,
        "asynctrace span": ours_body,
    }
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        try:
            perf_tracer = load_perf_tracer()
        except AnchorMissing as exc:
            print(f"!!! MISSING: AReaL's tracer could not be loaded ({exc}); no anchor")
            ok = False
        else:
            perf_tracer.configure(
                PerfTracerConfig(
                    experiment_name="bench", trial_name="t", fileroot=tmp, enabled=True
                ),
                rank=0,
            )
            scope = perf_tracer.trace_scope

            def areal_body() -> None:
                with scope("rl.generate", category="compute", args={"global_step": 3}):
                    pass

            bodies["AReaL trace_scope"] = areal_body
            areal_events = perf_tracer.get_tracer()._events
        hot: dict[str, list[float]] = {name: [] for name in bodies}
        cold: dict[str, list[float]] = {name: [] for name in bodies}
        names = list(bodies)
        telemetry = configure("fast", tmp, waits * rounds * 2 + 20_000)
        try:
            with at.iteration_scope(3):
                for i in range(rounds):
                    for name in names[i % len(names) :] + names[: i % len(names)]:
                        body = bodies[name]
                        hot[name].extend(hot_ns(body) for _ in range(5))
                        cold[name].extend(after_wait_ns(body, waits)[0])
                    ft.reset()
                    if "AReaL trace_scope" in bodies:
                        areal_events.clear()
        finally:
            telemetry.shutdown()
    print(
        f"python {sys.version.split()[0]}; hot: median of chunks of 1,000 calls; after a "
        f"wait: median of {waits * rounds:,} calls, each right after sleep({WAIT_S * 1e6:.0f} us)"
    )
    medians = {}
    for name in bodies:
        h, c = statistics.median(hot[name]), statistics.median(cold[name])
        medians[name] = (h, c)
        print(f"  {name:18s} hot {h:7.0f} ns   after a wait {c:7.0f} ns   (+{c - h:,.0f} ns)")
    # The same span: the first and second call after a sleep, and after a busy
    # spin of the same length (the thread never leaves the CPU).
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = configure("fast", tmp, waits * 4 + 20_000)
        try:
            with at.iteration_scope(3):
                first, second = after_wait_ns(ours_body, waits, calls=2)
                (spun,) = after_wait_ns(ours_body, waits, _spin)
        finally:
            telemetry.shutdown()
    print(
        f"  asynctrace span, after a sleep: 1st call {statistics.median(first):,.0f} ns, "
        f"2nd call {statistics.median(second):,.0f} ns; 1st call after a busy spin of the "
        f"same length {statistics.median(spun):,.0f} ns"
    )
    ours = medians["asynctrace span"]
    for other in ("AReaL trace_scope", "floor span"):
        if other in medians:
            theirs = medians[other]
            print(
                f"  asynctrace / {other}: hot {ours[0] / theirs[0]:.2f}, after a wait "
                f"{ours[1] / theirs[1]:.2f}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
