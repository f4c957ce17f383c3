"""asynctrace's own threads block the signals a process is sent, so the kernel delivers
them to the application's threads: Python runs handlers on the main thread but wakes it
only for a signal delivered there, and one that lands on a writer thread waits until the
main thread's sleep ends on its own (a SIGTERM handled a minute late)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from asynctrace._own_threads import APPLICATION_SIGNALS

_CHILD = """
import asyncio, json, sys, threading, time
import asynctrace as at

telemetry = at.configure({
    "enabled": True,
    "span_groups": "all",
    "exporters": ["chrome"],
    "output_dir": sys.argv[1],
    "handle_sigterm": True,
    "session_tracer": {"enabled": True},
})


def masks():
    found = {}
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/status") as status:
                blocked = next(l for l in status if l.startswith("SigBlk:")).split()[1]
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        found[thread.name] = int(blocked, 16)
    return found


async def main():
    async with at.umbrella_span("step", "rl.step"):
        with at.session_scope():
            at.trace_session_event("finalized", status="accepted")
        await asyncio.sleep(0.2)  # the loop's watchdog is up
        return masks()


found = asyncio.run(main())
telemetry.flush(5.0)
found.update(masks())
print(json.dumps(found))
telemetry.shutdown()
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_asynctrace_threads_leave_process_signals_to_the_application(tmp_path: Path) -> None:
    """The export, session, SIGTERM-helper and loop-watchdog threads block SIGTERM, SIGINT and
    the other process signals; the main thread blocks none of them."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    masks: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    ours = {name: mask for name, mask in masks.items() if name.startswith("asynctrace-")}
    assert {"asynctrace-sessions", "asynctrace-sigterm", "asynctrace-loop-watchdog"} <= set(
        ours
    ), masks
    assert any(name.startswith("asynctrace-export-") for name in ours), masks
    wanted = sum(1 << (int(s) - 1) for s in APPLICATION_SIGNALS)
    for name, mask in ours.items():
        assert mask & wanted == wanted, (name, hex(mask))
    assert masks["MainThread"] & (1 << (signal.SIGTERM - 1)) == 0
