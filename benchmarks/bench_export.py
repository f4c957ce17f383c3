"""Chrome exporter figures, each measured against a baseline in the same run.

Usage: python benchmarks/bench_export.py [--quick] [--json PATH]

Figures (targets in brackets); exits 1 if a target is missed:

1. keep-up: one asyncio task feeds spans through the chrome processor at a
   paced 110,000 spans/s with the default queue; achieved rate and drops
   [rate >= 100,000/s, 0 dropped]. Spans are pre-built ``ReadableSpan``s
   because one Python task cannot *create* 100,000 SDK spans/s (the SDK alone
   costs ~10 us per span here); the figure is about the exporter keeping up.
2. sdk: the same task creating real SDK spans as fast as it can, chrome
   processor installed; produced rate (reported) and drops [0 dropped].
3. memory: RSS growth after 1,000,000 spans exported (figure 1's spans)
   [<= 50 MB].
4. overhead: per-span cost of an SDK span with the chrome processor versus
   the same SDK span with a discarding ``SimpleSpanProcessor``, minimum over
   interleaved repeats. Two readings:
   - on the producing thread (``time.thread_time`` of the loop that creates
     the spans: what the instrumented code itself pays, serialization being
     on the writer thread) [<= 20% of the SDK span];
   - in total (the process's CPU time up to the end of the final flush, so
     every microsecond of the writer thread is counted) [<= 20%]: on CPython
     the writer shares the GIL, so on a CPU-bound loop its ~1.3 us of
     encoding and writing per span shows up here. CPU, not wall time: a
     flush ends with ``fdatasync``, whose wait for the disk is no one's CPU
     (it was wall time up to 2026-12-05, when flushes did not sync).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, TraceFlags

from asynctrace.export import ChromeTraceProcessor

ATTRS = {"rl.iteration": 3, "rl.bucket": "productive"}


class DiscardingExporter(SpanExporter):
    """Accepts every span and keeps nothing."""

    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def rss_bytes() -> int:
    """Resident set size of this process now."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the peak, in KiB on Linux/BSD, bytes on macOS
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def synthetic_spans(count: int) -> Callable[[int], ReadableSpan]:
    """A factory of ended spans shaped like asynctrace's (a step with children)."""
    resource = Resource.create({"service.name": "bench"})
    scope = InstrumentationScope("asynctrace", "0")
    trace_id = 0x0123456789ABCDEF0123456789ABCDEF
    parent = SpanContext(trace_id, 0xABCDEF, False, TraceFlags(1))
    base = time.time_ns()

    def make(i: int) -> ReadableSpan:
        start = base + i * 10_000
        return ReadableSpan(
            name="rl.generate",
            context=SpanContext(trace_id, i + 1, False, TraceFlags(1)),
            parent=parent,
            resource=resource,
            attributes=ATTRS,
            start_time=start,
            end_time=start + 8_000,
            instrumentation_scope=scope,
        )

    return make


async def paced_feed(processor: ChromeTraceProcessor, total: int, rate: float) -> float:
    """Feed *total* spans at *rate* per second from one task; returns the achieved rate."""
    make = synthetic_spans(total)
    on_start, on_end = processor.on_start, processor.on_end
    started = time.perf_counter()
    chunk = 1000
    for first in range(0, total, chunk):
        for i in range(first, min(first + chunk, total)):
            span = make(i)
            on_start(span)  # type: ignore[arg-type]
            on_end(span)
        ahead = (first + chunk) / rate - (time.perf_counter() - started)
        if ahead > 0:
            await asyncio.sleep(ahead)
    return total / (time.perf_counter() - started)


async def sdk_feed(provider: TracerProvider, total: int) -> float:
    """Create *total* real SDK spans as fast as possible in one task; returns spans/s."""
    tracer = provider.get_tracer("bench")
    started = time.perf_counter()
    for i in range(total):
        tracer.start_span("rl.generate", attributes=ATTRS).end()
        if i % 1000 == 999:
            await asyncio.sleep(0)
    return total / (time.perf_counter() - started)


def per_span_seconds(
    make_provider: Callable[[], tuple[TracerProvider, Any]], n: int
) -> tuple[float, float]:
    """(producing-thread CPU seconds, process CPU seconds incl. final flush) per span."""
    provider, cleanup = make_provider()
    tracer = provider.get_tracer("bench")
    for _ in range(2000):  # warm-up
        tracer.start_span("warm", attributes=ATTRS).end()
    provider.force_flush()
    started, cpu_started = time.process_time(), time.thread_time()
    for _ in range(n):
        tracer.start_span("rl.generate", attributes=ATTRS).end()
    cpu = time.thread_time() - cpu_started
    provider.force_flush()
    elapsed = time.process_time() - started
    cleanup()
    return cpu / n, elapsed / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (CI smoke run)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    options = parser.parse_args()
    million = 200_000 if options.quick else 1_000_000
    sdk_count = 50_000 if options.quick else 200_000
    overhead_n = 30_000 if options.quick else 100_000
    repeats = 3 if options.quick else 9
    results: dict[str, Any] = {"python": sys.version.split()[0], "machine": platform.machine()}
    ok = True

    with tempfile.TemporaryDirectory() as tmp:
        # 1 + 3: paced keep-up and memory, same spans.
        processor = ChromeTraceProcessor(Path(tmp, "keepup.jsonl"))
        rss_before = rss_bytes()
        rate = asyncio.run(paced_feed(processor, million, 110_000.0))
        flushed = processor.force_flush(30_000)
        rss_after = rss_bytes()
        stats = processor.stats()
        processor.shutdown()
        # Delete each figure's file once measured: hundreds of MB of dirty pages
        # left behind would slow the writes of the next figure (kernel writeback).
        Path(tmp, "keepup.jsonl").unlink()
        growth_mb = (rss_after - rss_before) / 2**20
        keep_ok = rate >= 100_000 and stats.dropped == 0 and flushed
        mem_ok = growth_mb <= 50
        results["keep_up"] = {
            "spans": million,
            "rate_per_s": round(rate),
            "dropped": stats.dropped,
            "written": stats.exported,
        }
        results["memory"] = {"spans": million, "rss_growth_mb": round(growth_mb, 1)}
        print(
            f"keep-up   {million:>9,} spans paced at 110,000/s: achieved {rate:>9,.0f}/s, "
            f"written {stats.exported:,}, dropped {stats.dropped}  "
            f"[target >= 100,000/s, 0 dropped] {'ok' if keep_ok else 'MISSED'}"
        )
        print(
            f"memory    RSS growth after {million:,} spans: {growth_mb:.1f} MB  "
            f"[target <= 50 MB] {'ok' if mem_ok else 'MISSED'}"
        )
        ok &= keep_ok and mem_ok

        # 2: real SDK spans as fast as one task can make them.
        provider = TracerProvider(shutdown_on_exit=False)
        chrome = ChromeTraceProcessor(Path(tmp, "sdk.jsonl"))
        provider.add_span_processor(chrome)
        produced = asyncio.run(sdk_feed(provider, sdk_count))
        chrome.force_flush(30_000)
        sdk_stats = chrome.stats()
        provider.shutdown()
        Path(tmp, "sdk.jsonl").unlink()
        sdk_ok = sdk_stats.dropped == 0
        results["sdk"] = {"spans": sdk_count, "rate_per_s": round(produced)}
        results["sdk"]["dropped"] = sdk_stats.dropped
        print(
            f"sdk       {sdk_count:>9,} SDK spans from one task: {produced:>9,.0f}/s, "
            f"dropped {sdk_stats.dropped}  [target 0 dropped] {'ok' if sdk_ok else 'MISSED'}"
        )
        ok &= sdk_ok

        # 4: overhead of the chrome processor over a discarding SimpleSpanProcessor.
        def baseline() -> tuple[TracerProvider, Any]:
            provider = TracerProvider(shutdown_on_exit=False)
            provider.add_span_processor(SimpleSpanProcessor(DiscardingExporter()))
            return provider, provider.shutdown

        def with_chrome() -> tuple[TracerProvider, Any]:
            provider = TracerProvider(shutdown_on_exit=False)
            path = Path(tmp, "overhead.jsonl")
            provider.add_span_processor(ChromeTraceProcessor(path))

            def cleanup() -> None:
                provider.shutdown()
                path.unlink()

            return provider, cleanup

        base_runs, chrome_runs = [], []
        for _ in range(repeats):
            base_runs.append(per_span_seconds(baseline, overhead_n))
            chrome_runs.append(per_span_seconds(with_chrome, overhead_n))
        base_cpu = min(run[0] for run in base_runs)
        chrome_cpu = min(run[0] for run in chrome_runs)
        base_total = min(run[1] for run in base_runs)
        chrome_total = min(run[1] for run in chrome_runs)
        extra_cpu = (chrome_cpu - base_cpu) / base_cpu
        extra_total = (chrome_total - base_total) / base_total
        over_ok = extra_cpu <= 0.20
        results["overhead"] = {
            "sdk_span_thread_us": round(base_cpu * 1e6, 2),
            "with_chrome_thread_us": round(chrome_cpu * 1e6, 2),
            "extra_thread_ratio": round(extra_cpu, 3),
            "sdk_span_total_us": round(base_total * 1e6, 2),
            "with_chrome_total_us": round(chrome_total * 1e6, 2),
            "extra_total_ratio": round(extra_total, 3),
        }
        print(
            f"overhead  producing thread: SDK span {base_cpu * 1e6:.2f} us, with chrome "
            f"{chrome_cpu * 1e6:.2f} us: +{extra_cpu:.1%}  [target <= 20%] "
            f"{'ok' if over_ok else 'MISSED'}"
        )
        total_ok = extra_total <= 0.20
        print(
            f"          total incl. writer thread: {base_total * 1e6:.2f} us -> "
            f"{chrome_total * 1e6:.2f} us: +{extra_total:.1%}  [target <= 20%] "
            f"{'ok' if total_ok else 'MISSED'}"
        )
        ok &= over_ok and total_ok

    if options.json:
        options.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
