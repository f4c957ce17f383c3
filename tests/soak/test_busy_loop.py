"""A busy event loop (it yields only through ``asyncio.sleep(0)``) at 20,000 spans/s."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from asynctrace._runtime import configure
from asynctrace.export import read_chrome_trace

from ._busy_child import RATE, paced
from ._soak import report, scale

CHILD = Path(__file__).parent / "_busy_child.py"


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
    next_sample = time.monotonic()

    def sample() -> None:  # the queue's backlog, in seconds of spans, every 50 ms
        nonlocal worst_backlog_s, next_sample
        if (now := time.monotonic()) >= next_sample:
            stats = telemetry.stats()["chrome"]
            worst_backlog_s = max(worst_backlog_s, (stats.queued + stats.in_flight) / RATE)
            next_sample = now + 0.05

    ended = asyncio.run(paced(RATE, seconds, sample))
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


def test_sigkill_of_a_busy_loop_loses_at_most_the_durability_bound(tmp_path: Path) -> None:
    """SIGKILL at 20,000 spans/s: the newest span on disk ended at most 1 s before the kill."""
    runs = max(2, round(4 * scale()))
    worst_age = 0.0
    rates = []
    for run in range(runs):
        out = tmp_path / str(run)
        out.mkdir()
        with subprocess.Popen(
            [sys.executable, str(CHILD), str(out)], stdout=subprocess.PIPE, text=True
        ) as child:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            started = time.time()
            time.sleep(3.0 + 0.5 * run)
            killed = time.time()
            child.kill()
            child.wait(timeout=10)
        events = read_chrome_trace(out / "traces-r0.jsonl").complete_events()  # torn tail skipped
        ends = [(e["ts"] + e["dur"]) / 1e6 for e in events if e["name"] == "busy"]
        assert ends
        age = killed - max(ends)
        worst_age = max(worst_age, age)
        rates.append(len(ends) / (killed - started))
        assert age <= 1.0, (run, age)  # schedule_delay_millis: 1000
    report(
        "busy-loop-sigkill",
        runs=runs,
        rate=RATE,
        worst_newest_span_age_s=round(worst_age, 3),
        spans_on_disk_per_s=round(min(rates)),
    )
