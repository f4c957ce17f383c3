"""Volume: a million per-prompt spans through the chrome exporter, in bounded memory."""

from __future__ import annotations

import asyncio
import resource
import time
from pathlib import Path

import asynctrace as at
from asynctrace._runtime import configure

from ._soak import report, scale

FULL = 1_000_000


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # pragma: no cover


def test_a_million_per_prompt_spans_in_bounded_memory(tmp_path: Path) -> None:
    """RSS grows at most 100 MB; every span is exported or counted as dropped."""
    count = int(FULL * min(1.0, 0.25 * scale()))  # 250,000 by default; 1,000,000 from scale 4
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            # every span counted below is the test's: a loop stall a slow machine causes
            # would add one of the monitor's (a minute-long one still would)
            "loop_stall_threshold_ms": 60_000,
        }
    )

    async def main() -> None:
        with at.iteration_scope(1), at.umbrella_span("step", "step"):
            for start in range(0, count, 1000):
                with at.per_prompt_scope():
                    for i in range(start, start + 1000):
                        with at.managed_span("generation", "prompt", attributes={"i": i}):
                            pass
                await asyncio.sleep(0)

    before = _rss_mb()
    started = time.monotonic()
    asyncio.run(main())
    took = time.monotonic() - started
    peak = _rss_mb()
    assert telemetry.shutdown(30.0) in (True, False)
    stats = telemetry.stats()["chrome"]
    growth = peak - before
    assert growth <= 100, growth
    assert stats.exported + stats.dropped + stats.failed == count + 1  # + the step umbrella
    report(
        "volume",
        spans=count,
        spans_per_s=round(count / took),
        rss_growth_mb=round(growth, 1),
        exported=stats.exported,
        dropped=stats.dropped,
    )
