"""Recording cost: the fast provider against AReaL's tracer and the OpenTelemetry SDK.

Usage: python benchmarks/bench_provider.py [--quick] [--json PATH]

Every figure is measured in one process, in interleaved rounds, as a ratio:

1. ``with managed_span("generation", ...)`` inside ``iteration_scope`` (so
   ``rl.bucket`` and ``rl.iteration`` are set and the OTel context is
   attached), fast provider, chrome exporter; and AReaL 1.0.4's
   ``trace_scope(..., args={"global_step": step})`` recording into its own
   buffer. Each as a ratio to ``with contextlib.nullcontext()`` in the same
   round [ours <= 0.8x AReaL's]: in every round ours and AReaL's run in
   alternating chunks of 1,000 spans (which one first alternates by round;
   the garbage collector paused within a chunk), and the figure is the median
   over rounds of the ratio of the two (the VM's speed drifts within
   seconds: the fastest round of each, taken rounds apart, read 0.59 and then
   1.00 in two runs of one morning). The writer thread is kept idle while a round
   runs (its queue holds a whole round and is flushed after it), so both
   sides are the cost on the producing thread; AReaL's buffer is emptied
   after each round, as its ``save()`` would.
2. The same span on the fast provider against the SDK provider, both with the
   chrome exporter, in the same rounds [<= 0.2x, median of the rounds].
3. Writer thread included: process CPU per span (the producing loop plus the
   flush that writes its lines) over the producing thread's CPU per span
   [<= 1.5x]. Here the exporter runs as configured by default (batches of
   512, written while the loop runs), with a queue large enough that nothing
   is dropped; the producing thread's CPU then includes what sharing the GIL
   with the writer costs it. In the same rounds, the floor of any writer:
   the same spans through the same queue to an export thread that takes each
   batch and drops it (the hand-off, the thread's wake-ups, freeing the
   spans), with no line made; and a minimal Chrome writer: an export that
   makes the same lines the cheapest way the chrome writer knows for each
   part (:func:`_least_lines`: times in µs, the ids in hex with the trace's
   and the siblings' parent's cached, the args a copy of the attributes, one
   encode call and one write a batch), without the rest of the chrome
   writer's work (tracks, the category, limits) [reported].

A verdict judges each ratio as it prints it, to 3 decimals (:func:`meets`):
a line never reads "1.50x (target <= 1.50)" and MISS.

AReaL's tracer is installed for the benchmark only (``pip install --no-deps
areal==1.0.4 orjson colorlog``) and loaded by ``_areal.py``; if it cannot be
loaded, figure 1 is reported as MISSING (loudly) and the script exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asynctrace as at

sys.path.insert(0, str(Path(__file__).parent))
from _areal import AnchorMissing, PerfTracerConfig, load_perf_tracer

DECIMALS = 3  # a ratio judged against its target is printed, and judged, to 3 decimals


def figure(ratio: float, bound: float | None = None) -> str:
    """*ratio* as a verdict line prints it: ``1.500``.

    Next to a *bound*, digits are added until the text is on the same side of
    the bound as the ratio itself: 1.5004 against 1.5 reads ``1.5004``, never
    ``1.500`` beside a miss.
    """
    digits = DECIMALS
    text = f"{ratio:.{digits}f}"
    while bound is not None and (float(text) <= bound) != (ratio <= bound) and digits < 12:
        digits += 1
        text = f"{ratio:.{digits}f}"
    return text


def meets(ratio: float, bound: float) -> bool:
    """Whether *ratio* is at most *bound* (unrounded: a figure just past it misses)."""
    return ratio <= bound


def loop_ns(body: Callable[[], None], n: int, clock: Callable[[], int]) -> float:
    """Nanoseconds per call of *body* over *n* calls, on *clock*."""
    start = clock()
    for _ in range(n):
        body()
    return (clock() - start) / n


def paused_ns(body: Callable[[], None], n: int, clock: Callable[[], int]) -> float:
    """:func:`loop_ns` with the garbage collector paused, as ``timeit`` pauses it."""
    gc.disable()
    try:
        return loop_ns(body, n, clock)
    finally:
        gc.enable()


def interleaved(
    a: Callable[[], None],
    b: Callable[[], None],
    n: int,
    clock: Callable[[], int],
    b_first: bool,
    chunks: int = 10,
) -> tuple[float, float]:
    """Nanoseconds per call of *a* and of *b*, *n* calls each, in alternating chunks.

    Each chunk runs with the garbage collector paused (:func:`paused_ns`), so
    neither side pays for collecting what the other keeps.
    """
    size = n // chunks
    spent = {a: 0.0, b: 0.0}
    order = (b, a) if b_first else (a, b)
    for _ in range(chunks):
        for body in order:
            spent[body] += paused_ns(body, size, clock)
    return spent[a] / chunks, spent[b] / chunks


def configure(provider: str, tmp: str, n: int, *, idle_writer: bool = True) -> at.Telemetry:
    """Chrome exporter; with *idle_writer* it does not run during a round of *n* spans."""
    batching = {"max_export_batch_size": n + 16, "schedule_delay_millis": 600_000}
    return at.configure(
        {
            "enabled": True,
            "provider": provider,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": f"{tmp}/{provider}",
            "max_queue_size": n + 16,
            **(batching if idle_writer else {}),
        }
    )


def _drop_batch(writer: Any, batch: list[Any]) -> tuple[int, int]:
    """The floor's export: take the batch, make nothing of it."""
    return len(batch), 0


def _least_lines(writer: Any, batch: list[Any]) -> tuple[int, int]:
    """A minimal Chrome writer: each span's line made, the batch appended at once.

    The lines hold what the chrome writer's hold (the args: the attributes,
    the ids, the parent's only for a child, the rank), made the cheapest way
    the chrome writer knows for each part: the args a copy of the attributes
    with the ids and the rank stored in it, the trace's and the siblings'
    parent's hex cached, one encode call and one write a batch. It leaves out
    the rest of the chrome writer's work (tracks, the category, limits,
    control items, an attribute named like the rank), so it is a lower bound
    of it, for these spans.
    """
    from asynctrace.export._chrome_encode import Complete, encode

    rank = writer._ident["rank"]
    pid = writer.pid
    events = []
    append = events.append
    last_trace = last_parent = 0
    trace_hex = parent_hex = ""
    for item in batch:
        start = item._start // 1000
        trace_id = item._trace_id
        if trace_id != last_trace:
            last_trace, trace_hex = trace_id, trace_id.to_bytes(16, "big").hex()
        args = item._attributes.copy()
        args["trace_id"] = trace_hex
        args["span_id"] = item._span_id.to_bytes(8, "big").hex()
        parent_id = item._parent_id
        if parent_id:
            if parent_id != last_parent:
                last_parent, parent_hex = parent_id, parent_id.to_bytes(8, "big").hex()
            args["parent_span_id"] = parent_hex
        args["rank"] = rank
        append(Complete("X", item._name, "c", start, item._end // 1000 - start, pid, 1, args))
    data, _ = encode(events, False)
    writer._file.write(data, len(events))
    return len(batch), 0


def writer_round(tmp: str, n: int, *, floor: str = "") -> tuple[float, float, int]:
    """Producing-thread and process CPU per span, the writer running; spans dropped.

    With *floor* ``"drop"`` the chrome writer's ``export`` drops each batch
    unwritten; with ``"least"`` it makes the lines as a minimal writer does
    (:func:`_least_lines`).
    """
    from asynctrace.export._chrome_writer import ChromeWriter

    export = ChromeWriter.export
    if floor:
        floors = {"drop": _drop_batch, "least": _least_lines}
        ChromeWriter.export = floors[floor]  # type: ignore[method-assign]
    try:
        telemetry = configure("fast", tmp, n, idle_writer=False)
        telemetry.flush(30)
        cpu0, proc0 = time.thread_time_ns(), time.process_time_ns()
        loop_ns(ours_body, n, time.perf_counter_ns)
        cpu1 = time.thread_time_ns()
        telemetry.flush(30)
        proc1 = time.process_time_ns()
        dropped = telemetry.dropped_spans
        telemetry.shutdown()
    finally:
        ChromeWriter.export = export  # type: ignore[method-assign]
    return (cpu1 - cpu0) / n, (proc1 - proc0) / n, dropped


def ours_body() -> None:
    with at.managed_span("generation", "rl.generate"):
        pass


def null_body() -> None:
    with contextlib.nullcontext():
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    options = parser.parse_args()
    n, rounds = (5_000, 7) if options.quick else (10_000, 25)
    clock = time.perf_counter_ns
    results: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    ok = True
    print(f"python {platform.python_version()} on {platform.machine()}, {n:,} spans x {rounds}")

    try:
        perf_tracer = load_perf_tracer()
    except AnchorMissing as exc:
        perf_tracer = None
        print(f"!!! MISSING: AReaL's tracer could not be loaded ({exc}); figure 1 not measured")
        ok = False

    with tempfile.TemporaryDirectory() as tmp:
        areal_body: Callable[[], None] | None = None
        if perf_tracer is not None:
            perf_tracer.configure(
                PerfTracerConfig(
                    experiment_name="bench", trial_name="t", fileroot=tmp, enabled=True
                ),
                rank=0,
            )
            scope = perf_tracer.trace_scope
            areal_tracer = perf_tracer.get_tracer()

            def areal_body() -> None:
                with scope("rl.generate", category="compute", args={"global_step": 3}):
                    pass

        null: list[float] = []
        fast: list[float] = []
        areal: list[float] = []
        sdk: list[float] = []
        fast_cpu: list[float] = []
        floor_ratios: list[float] = []
        least_ratios: list[float] = []
        total_cpu: list[float] = []
        with at.iteration_scope(3):
            for i in range(rounds):
                null.append(paused_ns(null_body, n, clock))
                telemetry = configure("fast", tmp, n)
                loop_ns(ours_body, 1000, clock)  # warm
                telemetry.flush(30)
                if areal_body is None:
                    fast.append(paused_ns(ours_body, n, clock))
                else:  # ours and AReaL's in alternating chunks, the first alternating by round
                    ours_ns, areal_ns = interleaved(ours_body, areal_body, n, clock, i % 2 == 1)
                    fast.append(ours_ns)
                    areal.append(areal_ns)
                    areal_tracer._events.clear()  # what save() does, untimed
                telemetry.shutdown()
                telemetry = configure("sdk", tmp, n)
                sdk.append(paused_ns(ours_body, n // 4, clock))  # as ours: collector paused
                telemetry.shutdown()
                producing, process, dropped = writer_round(tmp, n)
                fast_cpu.append(producing)
                total_cpu.append(process)
                if dropped:
                    print(f"!!! the fast provider dropped {dropped} spans")
                    ok = False
                producing, process, _ = writer_round(tmp, n, floor="drop")
                floor_ratios.append(process / producing)
                producing, process, _ = writer_round(tmp, n, floor="least")
                least_ratios.append(process / producing)
    null_ns, fast_ns, sdk_ns = min(null), min(fast), min(sdk)

    # 1. against AReaL, both as ratios to nullcontext: within a round the nullcontext
    # cancels out, and the median over rounds of ours over AReaL's is the figure (the
    # fastest rounds of each, which may be rounds apart, are shown for reference).
    if areal:
        areal_ns = min(areal)
        ours_ratio, areal_ratio = fast_ns / null_ns, areal_ns / null_ns
        per_round = sorted(f / a for f, a in zip(fast, areal, strict=True))
        rel = statistics.median(per_round)
        good = meets(rel, 0.8)
        ok = ok and good
        print(
            f"{'ok  ' if good else 'MISS'} recorded leaf span, fast provider + chrome, over "
            f"AReaL's trace_scope, both as ratios to nullcontext: median of the rounds "
            f"{figure(rel, 0.8)} (from {figure(per_round[0])} to {figure(per_round[-1])}; "
            f"target <= 0.80); "
            f"fastest rounds: ours {fast_ns:.0f} ns = {ours_ratio:.2f}x nullcontext, AReaL "
            f"{areal_ns:.0f} ns = {areal_ratio:.2f}x"
        )
        results["vs_areal"] = {
            "nullcontext_ns": round(null_ns, 1),
            "fast_ns": round(fast_ns, 1),
            "areal_ns": round(areal_ns, 1),
            "fast_x_null": round(ours_ratio, 2),
            "areal_x_null": round(areal_ratio, 2),
            "ratio": round(rel, 3),
            "ratio_by_round": [round(r, 3) for r in per_round],
        }
    # 2. against the SDK provider, measured next to each other in every round
    rel_sdk = statistics.median(f / s for f, s in zip(fast, sdk, strict=True))
    good = meets(rel_sdk, 0.2)
    ok = ok and good
    print(
        f"{'ok  ' if good else 'MISS'} same span, fast vs SDK provider (chrome both): median "
        f"of the rounds {figure(rel_sdk, 0.2)}x (fastest rounds {fast_ns:.0f} vs {sdk_ns:.0f} ns; "
        f"target <= 0.20)"
    )
    results["vs_sdk"] = {"fast_ns": round(fast_ns, 1), "sdk_ns": round(sdk_ns, 1)}
    results["vs_sdk"]["ratio"] = round(rel_sdk, 3)
    # 3. writer thread included
    producing, total = min(fast_cpu), min(total_cpu)
    ratios = sorted(t / p for t, p in zip(total_cpu, fast_cpu, strict=True))
    rel_total = statistics.median(ratios)
    print("    per round:", " ".join(figure(r) for r in ratios))
    good = meets(rel_total, 1.5)
    ok = ok and good
    print(
        f"{'ok  ' if good else 'MISS'} CPU per span, writer thread included: {total:.0f} ns vs "
        f"{producing:.0f} ns on the producing thread (fastest rounds); median of the per-round "
        f"ratios {figure(rel_total, 1.5)}x (target <= 1.50)"
    )
    floor = statistics.median(floor_ratios)
    print(
        f"     floor, the same spans to an export thread that drops each batch: median "
        f"{floor:.2f}x (the writer's own work: {rel_total - floor:.2f} of the producing "
        f"thread's CPU; the target leaves it {1.5 - floor:.2f})"
    )
    least = statistics.median(least_ratios)
    print(
        f"     a minimal Chrome writer, the same lines made the cheapest way known: median "
        f"{figure(least, 1.5)}x (rounds {min(least_ratios):.2f}-{max(least_ratios):.2f}; "
        f"{'within' if meets(least, 1.5) else 'above'} the target)"
    )
    results["writer_included"] = {
        "producing_cpu_ns": round(producing, 1),
        "total_cpu_ns": round(total, 1),
        "ratio": round(rel_total, 3),
        "floor_ratio": round(floor, 3),
        "least_writer_ratio": round(least, 3),
    }
    if options.json:
        options.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
