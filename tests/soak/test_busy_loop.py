"""A busy event loop (it yields only through ``asyncio.sleep(0)``) at 20,000 spans/s."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asynctrace as at
from asynctrace._runtime import configure
from asynctrace.export import read_chrome_trace

from ._soak import report, scale

RATE = 20_000


def test_the_writer_keeps_up_with_a_busy_loop(tmp_path: Path) -> None:
    """Nothing dropped, and the backlog never holds more than the 1 s durability bound."""
    seconds = 5.0 * scale()
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
        }
    )
    worst_backlog_s = 0.0

    async def main() -> int:
        nonlocal worst_backlog_s
        ended = 0
        started = time.monotonic()
        next_sample = started
        while (now := time.monotonic()) - started < seconds:
            due = int((now - started) * RATE)
            while ended < due:
                with at.managed_span("generation", "busy", attributes={"i": ended}):
                    pass
                ended += 1
                if ended % 50 == 0:
                    await asyncio.sleep(0)
            if now >= next_sample:  # the queue's backlog, in seconds of spans
                stats = telemetry.stats()["chrome"]
                worst_backlog_s = max(worst_backlog_s, (stats.queued + stats.in_flight) / RATE)
                next_sample = now + 0.05
            await asyncio.sleep(0)
        return ended

    ended = asyncio.run(main())
    stats = telemetry.stats()["chrome"]
    dropped = stats.dropped
    assert telemetry.shutdown(10.0)
    written = sum(
        e["name"] == "busy"
        for e in read_chrome_trace(tmp_path / "traces-r0.jsonl").complete_events()
    )
    assert dropped == 0
    assert written == ended
    assert worst_backlog_s <= 1.0
    report(
        "busy-loop",
        spans=ended,
        rate=RATE,
        dropped=dropped,
        worst_backlog_s=round(worst_backlog_s, 3),
    )
