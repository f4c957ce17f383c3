"""OTLP export figures, each against a baseline or a floor measured in the same run.

Usage: python benchmarks/bench_otlp.py [--quick]

Figures (targets in brackets); exits 1 if a target is missed:

1. keep-up: one thread records fast-provider spans at a paced 52,500/s for a
   few seconds, exported over OTLP/HTTP (and gRPC) to a receiver in another
   process on 127.0.0.1 (``tests/_otlp_receiver.py`` in its counting mode:
   every request parsed, its spans counted); spans exported per second,
   counted to the end of the final flush, and dropped [>= 50,000/s, 0
   dropped].
   Measured next to it, the floor: how many spans per second the export
   thread can turn into an OTLP request at all here (asynctrace's encoder,
   ``asynctrace.export._otlp_wire``, writing the protobuf straight from the
   spans; no network, no producer competing for the GIL), and beside it what
   OpenTelemetry's encoder allows (conversion to the SDK's ``ReadableSpan``
   plus ``encode_spans``), the path SDK exporters take. A keep-up target
   above the floor cannot be met on this machine.
2. producer: the recording thread's CPU time per span (``time.thread_time``)
   with the otlp exporter versus the chrome exporter, in pairs run back to
   back (which one first alternating); the median of the pairs' ratios
   [otlp <= 1.10x chrome]. The ratio of the two minimums, taken runs apart,
   read 1.04 to 1.19 on one host in one afternoon.
3. non-exporting rank: per-span cost of a recorded span on a rank that
   ``export_ranks`` leaves out versus the same span with telemetry disabled
   [<= 1.10x].
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests"))

from _otlp_receiver import OtlpReceiver  # noqa: E402

import asynctrace as at  # noqa: E402

TARGET = 50_000.0  # spans/s exported, with 0 dropped


def start_receiver(protocol: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """A receiver in its own process; its process and the variables that point at it.

    It parses every request (protobuf, in C) and counts the spans, as a
    collector's receiver does; it does not turn each span into Python objects
    as the tests' receiver does (about 9 us a span, which would measure the
    receiver, not the exporter).
    """
    process = subprocess.Popen(
        [sys.executable, str(HERE.parent / "tests" / "_otlp_receiver.py"), protocol, "count"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    port = int(process.stdout.readline().split()[1])
    return process, OtlpReceiver(protocol, port).env(timeout_s=10)


def record(count: int) -> None:
    """Record *count* spans of the ``generation`` group."""
    span = at.managed_span
    productive = at.Bucket.PRODUCTIVE
    for _ in range(count):
        with span("generation", "rl.generate", bucket=productive):
            pass


def keep_up(protocol: str, rate: float, seconds: float) -> dict[str, Any]:
    """Paced recording at *rate* spans/s for *seconds*, exported over *protocol*."""
    receiver, env = start_receiver(protocol)
    os.environ.update(env)
    try:
        telemetry = at.configure({"enabled": True, "exporters": ["otlp"], "span_groups": "all"})
        record(2000)
        telemetry.flush(30)
        total = int(rate * seconds)
        chunk = 500
        started = time.perf_counter()
        for first in range(0, total, chunk):
            record(chunk)
            ahead = (first + chunk) / rate - (time.perf_counter() - started)
            if ahead > 0:
                time.sleep(ahead)
        produced_s = time.perf_counter() - started
        flushed = telemetry.flush(60)
        wall = time.perf_counter() - started
        stats = telemetry.stats()["otlp"]
        telemetry.shutdown()
    finally:
        receiver.kill()
        receiver.wait()
        for key in env:
            os.environ.pop(key, None)
    return {
        "offered": total / produced_s,
        "exported_rate": (stats.exported - 2000) / wall,
        "dropped": stats.dropped,
        "flushed": flushed,
    }


def encode_floor(count: int) -> tuple[float, float]:
    """Spans/s the export thread can encode as OTLP protobuf requests, alone.

    ``(asynctrace's encoder, OpenTelemetry's after conversion to ReadableSpan)``.
    """
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from asynctrace.export._adapters import converter_for
    from asynctrace.export._otlp_wire import WireEncoder, request_bytes

    telemetry = at.configure({"enabled": True, "exporters": ["memory"], "span_groups": "all"})
    provider = telemetry.provider
    spans: list[Any] = []
    provider.add_queue(_Keep(spans))  # type: ignore[union-attr]
    record(count)
    encode = WireEncoder(provider.resource, provider.limits).encode  # type: ignore[union-attr]
    started = time.perf_counter()
    for first in range(0, count, 512):
        request_bytes([encode(s) for s in spans[first : first + 512]])
    wire = count / (time.perf_counter() - started)
    readable = converter_for(provider).readable  # type: ignore[arg-type]
    started = time.perf_counter()
    for first in range(0, count, 512):
        encode_spans([readable(s) for s in spans[first : first + 512]]).SerializeToString()
    sdk = count / (time.perf_counter() - started)
    telemetry.shutdown()
    spans.clear()  # freed now, not when the collector finds the pipeline's cycles
    return wire, sdk


class _Keep:
    """An export queue that keeps the fast provider's ended spans in a list."""

    def __init__(self, spans: list[Any]) -> None:
        self.put = spans.append

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def producer_cost(exporter: str, count: int, directory: str) -> float:
    """Thread CPU seconds per recorded span with *exporter* installed (chrome or otlp)."""
    config: dict[str, Any] = {
        "enabled": True,
        "exporters": [exporter],
        "span_groups": "all",
        "output_dir": directory,
        "max_queue_size": count + 1000,
        "max_export_batch_size": 512,
    }
    telemetry = at.configure(config)
    record(1000)
    telemetry.flush(30)
    started = time.thread_time()
    record(count)
    cost = (time.thread_time() - started) / count
    telemetry.flush(120)
    telemetry.shutdown()
    return cost


def per_span_cost(config: dict[str, Any], count: int, *, rank: int = 0) -> float:
    """Wall seconds per span under *config* (minimum of five runs)."""
    telemetry = at.configure(config, rank=rank, world_size=8)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        record(count)
        best = min(best, (time.perf_counter() - started) / count)
    telemetry.shutdown()
    return best


def main() -> int:
    """Run the figures; exit status 1 if a target is missed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds, repeats, count = (2.0, 3, 50_000) if args.quick else (4.0, 5, 100_000)
    print(
        f"bench_otlp: {time.strftime('%Y-%m-%d')}, {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} cpus"
    )
    missed = []
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    floor, sdk_floor = encode_floor(count)
    # The pipeline the floor shut down is cyclic garbage (provider, tracer and queues
    # refer to each other); its kept spans, 220,000 objects, hung off it until the
    # collector's next full pass, which took about 0.5 s, landed inside the gRPC
    # keep-up round, stopped the producing thread, and the burst that caught up
    # afterwards overflowed the queue (20,000 spans dropped in 3 runs of 3). The spans
    # are let go in encode_floor and the rest is collected here, untimed.
    gc.collect()
    print(
        f"  floor: encode alone, {floor:,.0f} spans/s (OpenTelemetry's encoder after "
        f"conversion to ReadableSpan: {sdk_floor:,.0f} spans/s)"
    )
    # Offered 5 % above the target: the exported rate counts the final flush's tail
    # too, so an offer of exactly 50,000/s could never read 50,000/s exported.
    offer = 1.05 * TARGET
    for protocol in ("http/protobuf", "grpc"):
        for rate in sorted({offer, min(offer, 0.5 * floor)}, reverse=True):
            result = keep_up(protocol, rate, seconds)
            print(
                f"  keep-up {protocol:13s} offered {result['offered']:8,.0f}/s: exported "
                f"{result['exported_rate']:8,.0f}/s, dropped {result['dropped']}, "
                f"flushed {result['flushed']}"
            )
            if rate == offer and (result["dropped"] or result["exported_rate"] < TARGET):
                missed.append(
                    f"keep-up {protocol} (floor {floor:,.0f}/s: "
                    f"{'below' if floor < 50_000 else 'above'} the target)"
                )
    with tempfile.TemporaryDirectory() as directory:
        chrome, otlp = [], []
        receiver, env = start_receiver("http/protobuf")
        os.environ.update(env)
        try:
            for i in range(2 * repeats + 1):  # pairs, which one first alternating
                for exporter in ("chrome", "otlp") if i % 2 else ("otlp", "chrome"):
                    cost = producer_cost(exporter, count, directory)
                    (chrome if exporter == "chrome" else otlp).append(cost)
        finally:
            receiver.kill()
            receiver.wait()
    pairs = sorted(o / c for o, c in zip(otlp, chrome, strict=True))
    ratio = statistics.median(pairs)
    print(
        f"  producer: otlp / chrome, median of {len(pairs)} pairs {ratio:.3f}x "
        f"(pairs {pairs[0]:.3f}-{pairs[-1]:.3f}; best otlp {min(otlp) * 1e6:.2f} us/span, "
        f"chrome {min(chrome) * 1e6:.2f} us/span) [<= 1.10x]"
    )
    if ratio > 1.10:
        missed.append("producer cost")
    skipping = {"enabled": True, "exporters": ["memory"], "span_groups": "all"}
    disabled = skipped = float("inf")
    for _ in range(repeats):  # interleaved: both see the same machine
        disabled = min(disabled, per_span_cost({"enabled": False}, count))
        skipped = min(skipped, per_span_cost({**skipping, "export_ranks": "first"}, count, rank=3))
    ratio = skipped / disabled
    print(
        f"  non-exporting rank: {skipped * 1e9:.0f} ns/span, disabled {disabled * 1e9:.0f} "
        f"ns/span: {ratio:.3f}x [<= 1.10x]"
    )
    if ratio > 1.10:
        missed.append("non-exporting rank")
    if missed:
        print(f"  MISSED: {'; '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
