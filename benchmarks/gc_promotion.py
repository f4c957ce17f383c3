"""Full garbage collections that buffered spans bring on in a program with a large heap.

Usage: python benchmarks/gc_promotion.py [--heap N] [--spans N] [--rate N]

CPython collects its oldest generation (a *full* collection, which walks
every tracked object of the program) once the objects promoted into it since
the last one exceed a quarter of those it already holds. A span that waits in
an export queue while a younger generation is collected survives it and is
promoted; at any realistic rate a span waits through many such collections,
so every tracked object a span leaves in the queue counts towards the next
full collection of the whole heap.

Each variant runs in a fresh process: a heap of ``--heap`` tracked objects
(one-element lists, the program's long-lived state), then ``--spans`` leaf
spans in steps of 100, paced at ``--rate`` spans a second (the chrome
exporter writing on its thread, as configured by default), and counts the
full collections during the spans and the time they took (``gc.callbacks``):

- telemetry off (the same loop, no span recorded);
- the fast provider; the same after ``gc.freeze()`` (the heap moved out of
  the collector's reach: full collections still happen, over the spans only);
- the SDK provider;
- AReaL 1.0.4's ``perf_tracer`` (``trace_scope`` into its buffer, saved every
  10,000 spans), if it can be loaded (``_areal.py``).

A reference script: no target; always exits 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
VARIANTS = ("off", "fast", "fast+freeze", "sdk", "areal")


def _paced(spans: int, rate: float, body: Any) -> None:
    """*spans* calls of *body* in steps of 100, each step started on its schedule."""
    began = time.perf_counter()
    for step in range(spans // 100):
        due = began + step * 100 / rate
        while time.perf_counter() < due:
            time.sleep(0.0005)
        body(step)


def _run(variant: str, heap_size: int, spans: int, rate: float) -> dict[str, Any]:
    heap = [[i] for i in range(heap_size)]  # noqa: F841 - the program's long-lived state
    gc.collect()
    if variant == "fast+freeze":
        gc.freeze()
    pauses: list[float] = []
    started = [0.0]

    def watch(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                pauses.append(time.perf_counter() - started[0])

    with tempfile.TemporaryDirectory() as tmp:
        telemetry: Any = None
        if variant == "areal":
            sys.path.insert(0, str(HERE))
            from _areal import PerfTracerConfig, load_perf_tracer

            tracer = load_perf_tracer()
            tracer.configure(
                PerfTracerConfig(experiment_name="gc", trial_name="t", fileroot=tmp, enabled=True),
                rank=0,
            )
            scope = tracer.trace_scope

            def body(step: int) -> None:
                for _ in range(100):
                    with scope("rl.update", category="compute", args={"global_step": step}):
                        pass
                if step % 100 == 99:
                    tracer.save()

        else:
            import asynctrace as at

            if variant != "off":
                provider = "sdk" if variant == "sdk" else "fast"
                telemetry = at.configure(
                    {
                        "enabled": True,
                        "provider": provider,
                        "span_groups": "all",
                        "exporters": ["chrome"],
                        "output_dir": tmp,
                    }
                )

            def body(step: int) -> None:
                with at.iteration_scope(step):
                    for _ in range(100):
                        with at.managed_span("policy_update", "rl.update"):
                            pass

        body(0)  # warm
        gc.callbacks.append(watch)
        began = time.perf_counter()
        _paced(spans, rate, body)
        seconds = time.perf_counter() - began
        gc.callbacks.remove(watch)
        if telemetry is not None:
            telemetry.shutdown()
    return {"full": len(pauses), "pause_ms": sum(pauses) * 1e3, "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heap", type=int, default=1_000_000)
    parser.add_argument("--spans", type=int, default=300_000)
    parser.add_argument("--rate", type=float, default=50_000.0)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(_run(args.variant, args.heap, args.spans, args.rate)))
        return 0
    print(
        f"python {platform.python_version()}: a heap of {args.heap:,} tracked objects, "
        f"{args.spans:,} spans at {args.rate:,.0f}/s, each variant in a fresh process"
    )
    for variant in VARIANTS:
        sizes = ["--heap", str(args.heap), "--spans", str(args.spans), "--rate", str(args.rate)]
        done = subprocess.run(
            [sys.executable, __file__, "--variant", variant, *sizes],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(f"  {variant:12s} could not run: {done.stderr.strip().splitlines()[-1:]}")
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"  {variant:12s} full collections {result['full']:3d}, "
            f"{result['pause_ms']:7.1f} ms in them, over {result['seconds']:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
