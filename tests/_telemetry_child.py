"""Run in a child process by the process-level runtime tests.

Usage: python _telemetry_child.py MODE OUTPUT_DIR [COUNT]

Configures the chrome exporter into OUTPUT_DIR (run id ``child``), ends COUNT
spans named ``span-<i>`` in concurrent asyncio tasks, then, by MODE:

- ``exit``: returns normally (atexit shuts telemetry down);
- ``sigterm``: handle_sigterm on, leaves a span open, prints ``ready`` and waits;
- ``sigterm-chain``: like ``sigterm`` with a previous Python handler that exits 7;
- ``sigterm-ignored``: like ``sigterm`` with SIG_IGN as the previous handler;
  prints ``survived`` once telemetry is shut down, then exits 0;
- ``sigterm-wrapped``: like ``sigterm``, with a handler installed after
  asynctrace's that calls it (the default action was the previous one);
- ``sigterm-after-fork``: like ``sigterm``, after a forked child (one span of
  its own) has exited normally, through ``sys.exit`` and its exit hooks;
- ``flush-kill``: calls ``flush()``, prints ``flushed True``, and waits to be killed;
- ``heavy``: ends spans as fast as it can, forever, with a short schedule delay.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import asynctrace
from asynctrace._running import current_telemetry
from asynctrace._runtime import configure


async def _spans(count: int) -> None:
    async def one(i: int) -> None:
        with asynctrace.managed_span("generation", f"span-{i}"):
            await asyncio.sleep(0)

    await asyncio.gather(*(one(i) for i in range(count)))


def main() -> None:
    mode, output_dir = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    if mode == "sigterm-chain":

        def previous(signum: int, frame: object) -> None:
            with open(os.path.join(output_dir, "previous-handler-ran"), "w") as marker:
                marker.write("yes")
            os._exit(7)

        signal.signal(signal.SIGTERM, previous)
    elif mode == "sigterm-ignored":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": output_dir,
            "run_id": "child",
            "handle_sigterm": mode.startswith("sigterm"),
            "schedule_delay_millis": 5 if mode == "heavy" else 1000,
        }
    )
    if mode == "sigterm-wrapped":
        ours = signal.getsignal(signal.SIGTERM)
        assert callable(ours)

        def wrapper(signum: int, frame: object) -> None:
            ours(signum, frame)  # type: ignore[arg-type]

        signal.signal(signal.SIGTERM, wrapper)
    if mode == "sigterm-after-fork":
        pid = os.fork()
        if pid == 0:
            with asynctrace.managed_span("generation", "in-the-child"):
                pass
            sys.exit(0)  # the exit hooks run, the inherited telemetry's among them
        os.waitpid(pid, 0)
    if mode == "heavy":
        i = 0
        while True:
            with asynctrace.managed_span("generation", f"heavy-{i}", attributes={"i": i}):
                pass
            i += 1
    asyncio.run(_spans(count))
    if mode == "exit":
        print("ended", flush=True)
        return
    if mode == "flush-kill":
        print(f"flushed {telemetry.flush(10.0)}", flush=True)
        time.sleep(60)
        return
    # sigterm modes: one span still open when the signal arrives.
    asynctrace.managed_span("generation", "open-at-sigterm").__enter__()
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.01)
        if mode == "sigterm-ignored" and current_telemetry() is None:
            print("survived", flush=True)
            return


if __name__ == "__main__":
    main()
