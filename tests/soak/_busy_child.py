"""A busy event loop at 20,000 spans/s until it is killed (the busy-loop SIGKILL soak).

Usage: python _busy_child.py OUTPUT_DIR

Chrome spans into OUTPUT_DIR; prints ``ready`` once the loop runs, then opens
and ends ``busy`` spans at 20,000 a second from a loop that yields only
through ``asyncio.sleep(0)``, until SIGKILL.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

import asynctrace as at

RATE = 20_000


async def paced(
    rate: int, seconds: float | None = None, tick: Callable[[], None] | None = None
) -> int:
    """``busy`` spans at *rate* a second for *seconds* (``None``: forever); how many.

    The loop yields only through ``asyncio.sleep(0)`` (every 50 spans, and
    between rounds, where *tick* is called).
    """
    ended = 0
    started = time.monotonic()
    while seconds is None or time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        while ended < due:
            with at.managed_span("generation", "busy", attributes={"i": ended}):
                pass
            ended += 1
            if ended % 50 == 0:
                await asyncio.sleep(0)
        if tick is not None:
            tick()
        await asyncio.sleep(0)
    return ended


async def main() -> None:
    print("ready", flush=True)
    await paced(RATE)


if __name__ == "__main__":
    at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": sys.argv[1],
            "run_id": "busy",
        }
    )
    asyncio.run(main())
