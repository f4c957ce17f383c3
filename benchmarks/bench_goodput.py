"""Live goodput figures.

Usage: python benchmarks/bench_goodput.py [--quick]

1. producing thread: the CPU time of the thread that records spans (a step
   span and its leaves, ``managed_span`` on the chrome exporter), per span,
   with the live rollup, its file and metrics (an SDK ``MeterProvider`` with
   an in-memory reader) on against off; pairs of rounds in alternating
   order, the median of the pairs' ratios [on/off <= 1.05]; and, for
   reference, the same with the writer idle while the spans are recorded.
2. export thread: the rollup sink's time per span (``GoodputSink.export`` on
   batches of 512 fast-provider spans: fields read, rolled up, steps
   finished and written) [<= 0.5 us]; and in the same run, the floor of any
   per-span Python rollup: reading the same fields and remembering the span
   for late children (one dict store and one deque append), nothing else;
   and that floor's work done column by column, in C loops over the batch.
3. memory: 1,000,000 spans over 10,000 steps (99 leaves each) through the
   sink, in a fresh process, in batches of 500 as an export queue hands
   them; RSS growth from before the first span to after the last
   [<= 20 MB]: memory is bounded by the open steps, not the run's length.

Exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import operator
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from itertools import islice, repeat
from pathlib import Path
from typing import Any

from opentelemetry import trace

import asynctrace as at
from asynctrace._fast import FastTracerProvider
from asynctrace._goodput_settings import GoodputSettings
from asynctrace.export._goodput_sink import GoodputSink

LEAVES = 9  # per step in the producer round (10 spans a step)
_WINDOW = 50_000  # spans the floors remember for late children


def _producer_round(directory: Path, on: bool, steps: int, idle_writer: bool = False) -> float:
    """CPU seconds per span of the recording thread, goodput on or off.

    With *idle_writer* the export thread does not run while the spans are
    recorded (one batch, written after the round, as ``bench_provider.py``
    measures the producing thread): the recording thread's own work, without
    what the writer's work on the other core costs it.
    """
    goodput: Any = False
    provider = None
    if on:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        goodput = {"metrics": provider, "grace_s": 0}
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(directory / ("on" if on else "off")),
            "goodput": goodput,
            "max_queue_size": 1 << 20,
            **(
                {"max_export_batch_size": 1 << 20, "schedule_delay_millis": 600_000}
                if idle_writer
                else {}
            ),
            "shutdown_timeout_s": 300,  # the sink catches up after the round, untimed
        }
    )
    gc.collect()
    began = time.thread_time()
    for i in range(steps):
        with at.iteration_scope(i), at.umbrella_span("step", "rl.step"):
            for _ in range(LEAVES):
                with at.managed_span("policy_update", "rl.policy_update"):
                    pass
    cpu = time.thread_time() - began
    telemetry.flush(300)
    telemetry.shutdown()
    if provider is not None:
        provider.shutdown()
    stats = telemetry.stats()
    assert all(s.dropped == 0 for s in stats.values()), stats
    return cpu / (steps * (LEAVES + 1))


def producer(pairs: int, steps: int, idle_writer: bool = False) -> tuple[float, float, float]:
    """(median on/off ratio, best µs/span on, off)."""
    ratios = []
    best = {True: float("inf"), False: float("inf")}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            cost = {on: _producer_round(Path(tmp), on, steps, idle_writer) for on in order}
            for on, value in cost.items():
                best[on] = min(best[on], value)
            ratios.append(cost[True] / cost[False])
    return statistics.median(ratios), best[True] * 1e6, best[False] * 1e6


class _Collect:
    """An export queue that keeps the spans (for the export-thread figures)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def put(self, span: Any) -> None:
        self.spans.append(span)

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True

    def shutdown(self) -> None:
        return None


def _spans(steps: int, leaves: int, step0: int = 0) -> list[Any]:
    """Fast-provider spans of *steps* steps of *leaves* leaves, in end order."""
    provider = FastTracerProvider()
    collect = _Collect()
    provider.add_queue(collect)
    tracer = provider.get_tracer("bench")
    t = 1_700_000_000_000_000_000 + step0 * 2_000_000_000
    for i in range(step0, step0 + steps):
        step = tracer.start_span(
            "rl.step", attributes={"asynctrace.group": "step", "rl.iteration": i}, start_time=t
        )
        context = trace.set_span_in_context(step)
        for k in range(leaves):
            leaf = tracer.start_span(
                "rl.policy_update",
                context,
                attributes={"rl.bucket": "productive", "rl.iteration": i},
                start_time=t + k * 1_000_000,
            )
            leaf.end(t + k * 1_000_000 + 900_000)
        step.end(t + 1_500_000_000)
        t += 2_000_000_000
    return collect.spans


def _floor(batches: list[list[Any]]) -> float:
    """Seconds to read every span's fields and remember it: any rollup's least work."""
    home: dict[int, Any] = {}
    order: deque[int] = deque()
    began = time.perf_counter()
    for batch in batches:
        for item in batch:
            start = item._start // 1000
            end = item._end // 1000
            attrs = item._attributes
            entry = (item._parent_id, attrs.get("rl.bucket"), attrs.get("rl.iteration"), end)
            key = item._span_id | item._trace_id << 64
            home[key] = (entry, start, item._name, attrs.get("asynctrace.group"))
            order.append(key)
            if len(order) > _WINDOW:
                home.pop(order.popleft(), None)
    return time.perf_counter() - began


_ATTRIBUTES = operator.attrgetter("_attributes")
_FIELDS = tuple(
    operator.attrgetter(name)
    for name in ("_parent_id", "_span_id", "_trace_id", "_start", "_end", "_name")
)


def _floor_columns(batches: list[list[Any]]) -> float:
    """:func:`_floor`'s work column by column: each field of the batch by one C loop.

    No Python bytecode runs per span: ``map`` over ``attrgetter``s and
    ``dict.get``, ``zip`` into the tuples, ``dict.update``, and the window's
    oldest keys dropped by ``map(home.pop, ...)`` and a bounded ``deque``. It
    is no cheaper: each C loop pays a call per span.
    """
    home: dict[int, Any] = {}
    order: deque[int] = deque(maxlen=_WINDOW)  # extend() drops the oldest keys
    get = dict.get
    began = time.perf_counter()
    for batch in batches:
        attrs = list(map(_ATTRIBUTES, batch))
        parents, spans, traces, starts, ends, names = (list(map(f, batch)) for f in _FIELDS)
        high = list(map(operator.lshift, traces, repeat(64)))
        keys = list(map(operator.or_, spans, high))
        starts = list(map(operator.floordiv, starts, repeat(1000)))
        ends = list(map(operator.floordiv, ends, repeat(1000)))
        entries = zip(
            parents,
            map(get, attrs, repeat("rl.bucket")),
            map(get, attrs, repeat("rl.iteration")),
            ends,
            strict=True,
        )
        groups = map(get, attrs, repeat("asynctrace.group"))
        home.update(zip(keys, zip(entries, starts, names, groups, strict=True), strict=True))
        excess = len(order) + len(keys) - _WINDOW
        if excess > 0:  # the keys extend() is about to drop leave the window
            deque(map(home.pop, islice(order, excess), repeat(None)), maxlen=0)
        order.extend(keys)
    return time.perf_counter() - began


def export_thread(steps: int, rounds: int) -> tuple[float, float, float]:
    """(best sink µs/span, best floor µs/span, best column-by-column floor µs/span)."""
    spans = _spans(steps, 99)
    batches = [spans[i : i + 512] for i in range(0, len(spans), 512)]
    best_sink = best_floor = best_columns = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            sink = GoodputSink(
                GoodputSettings(metrics="none", grace_s=0.0), path=Path(tmp) / f"g{r}.jsonl"
            )
            began = time.perf_counter()
            for batch in batches:
                sink.export(batch)
            best_sink = min(best_sink, time.perf_counter() - began)
            sink.shutdown()
            best_floor = min(best_floor, _floor(batches))
            best_columns = min(best_columns, _floor_columns(batches))
    n = len(spans)
    return best_sink / n * 1e6, best_floor / n * 1e6, best_columns / n * 1e6


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def memory(steps: int) -> tuple[float, int]:
    """(RSS growth in MB, spans) over *steps* steps of 100 spans through the sink.

    Measured in a fresh process (:func:`_memory_here` there): the heap that
    the other rounds grew would otherwise hold the rollup's memory unseen (in
    this process after them, 10.9-13.0 MB; alone, 20 MB). Spans are made five
    steps (500 spans) at a time and handed over as one batch, as an export
    queue hands them; made 10,000 at a time, the benchmark's own spans
    interleave with the window's entries in the heap and the growth read 44 MB.
    """
    import subprocess

    out = subprocess.run(
        [sys.executable, __file__, "--memory-only", str(steps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), int(out[1])


def _memory_here(steps: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        sink = GoodputSink(GoodputSettings(metrics="none"), path=Path(tmp) / "g.jsonl")
        sink.export(_spans(10, 99, 0))  # warm: code paths, interned names
        gc.collect()
        before = _rss()
        total = 0
        chunk = 5
        for step0 in range(10, steps + 10, chunk):
            batch = _spans(chunk, 99, step0)
            total += len(batch)
            sink.export(batch)
            del batch
        gc.collect()
        after = _rss()
        sink.shutdown()
        assert sink.steps == steps + 10, sink.steps
    return (after - before) / 1e6, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--memory-only", type=int, metavar="STEPS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_only:
        growth, spans = _memory_here(args.memory_only)
        print(growth, spans)
        return 0
    pairs, steps = (6, 2000) if args.quick else (20, 4000)
    print(f"python {platform.python_version()} on {platform.machine()}")
    ratio, on, off = producer(pairs, steps)
    ok_producer = ratio <= 1.05
    print(
        f"{'ok  ' if ok_producer else 'MISS'} producing thread per span, live goodput on / off: "
        f"{ratio:.3f} (median of {pairs} pairs)  (target <= 1.05)"
    )
    print(f"     reference: best {on:.2f} / {off:.2f} us of thread CPU per span")
    idle, on, off = producer(pairs, steps, idle_writer=True)
    print(
        f"     reference: the same with the writer idle during the round (the recording "
        f"thread's own work): {idle:.3f} ({on:.2f} / {off:.2f} us)"
    )
    sink_us, floor_us, columns_us = export_thread(200 if args.quick else 1000, 3)
    ok_export = sink_us <= 0.5
    print(
        f"{'ok  ' if ok_export else 'MISS'} export thread, rollup sink per span: {sink_us:.2f} us"
        f"  (target <= 0.5 us)"
    )
    print(
        f"     floor, in the same run: {floor_us:.2f} us per span to read a span's fields and "
        f"remember it ({sink_us / floor_us:.1f}x the floor); the same work column by column "
        f"(C loops, no bytecode per span): {columns_us:.2f} us"
    )
    growth, spans = memory(2_000 if args.quick else 10_000)
    ok_memory = growth <= 20.0
    print(
        f"{'ok  ' if ok_memory else 'MISS'} RSS growth over {spans:,} spans in "
        f"{spans // 100:,} steps: {growth:.1f} MB  (target <= 20 MB)"
    )
    print(f"     threads at the end: {threading.active_count()}")
    return 0 if ok_producer and ok_export and ok_memory else 1


if __name__ == "__main__":
    sys.exit(main())
