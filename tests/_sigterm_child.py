"""A traced program for the SIGTERM tests, killed at a moment chosen by the test.

Usage: python _sigterm_child.py MODE OUTPUT_DIR

Configures chrome spans and session records into OUTPUT_DIR with
``handle_sigterm`` on, prints ``ready``, then, by MODE:

- ``session-lock``: the main thread holds the session tracer's lock nearly
  all the time (as it does inside ``finalize``), so the signal lands inside it;
- ``span-lock`` (SDK provider): the main thread holds an open span's lock
  nearly all the time (as the SDK does inside ``Span.end``);
- ``busy-async``: an event loop that yields only through ``asyncio.sleep(0)``,
  opening spans and finalizing sessions; ``busy-sync``: the same without a loop.

Before ``ready`` it writes ``N`` finished sessions and spans, so the test knows
what must be on disk. In the busy modes every span ended and every session
finalized while telemetry was still on is counted in ``progress`` (written at
each step, before the next one starts), so the test can compare what was ended
with what was written. (The handler may let the program run on for a moment
while telemetry shuts down; what it ends then is not recorded, by design.)
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import asynctrace as at
from asynctrace import _session_tracer
from asynctrace._state import GATE

N = 200


_progress_fd = -1


def _progress(out: str, spans: int, sessions: int) -> None:
    # Spans ended and sessions finalized so far, in place, in one write (a kill
    # lands before it or after it, never inside).
    global _progress_fd
    if _progress_fd < 0:
        _progress_fd = os.open(os.path.join(out, "progress"), os.O_WRONLY | os.O_CREAT)
    os.pwrite(_progress_fd, f"{spans:012d} {sessions:012d}".encode(), 0)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": out,
            "run_id": "child",
            "handle_sigterm": True,
            "provider": "sdk" if mode == "span-lock" else "fast",
            "session_tracer": {"enabled": True, "flush_threshold": 50},
        }
    )
    with at.task_scope(1):
        for i in range(N):
            with at.managed_span("generation", f"span-{i}"), at.session_scope():
                at.trace_session_event("finalized", status="accepted")
    tracer = _session_tracer.current_tracer()
    assert tracer is not None
    print("ready", flush=True)
    if mode == "session-lock":
        with at.task_scope(2), at.session_scope():  # still pending at the signal
            while True:
                with tracer._lock:
                    time.sleep(0.05)
                time.sleep(0.001)
    if mode == "span-lock":
        with at.managed_span("generation", "open-at-sigterm") as span:
            lock = span._lock  # type: ignore[attr-defined]
            while True:
                with lock:
                    time.sleep(0.05)
                time.sleep(0.001)
    if mode == "busy-sync":
        _busy_sync(out)
    asyncio.run(_busy_async(out))


def _busy_sync(out: str) -> None:
    spans = sessions = 0
    with at.task_scope(3):
        while True:
            with at.managed_span("generation", "busy"):
                with at.session_scope():
                    with at.trace_session_phase("generate"):
                        pass
                    at.trace_session_event("finalized", status="accepted")
                    sessions += _session_tracer.current_tracer() is not None
            spans += bool(GATE.enabled)
            _progress(out, spans, sessions)


async def _busy_async(out: str) -> None:
    spans = sessions = 0
    with at.task_scope(3):
        while True:
            with at.managed_span("generation", "busy"):
                with at.session_scope():
                    async with at.atrace_session_phase("generate"):
                        await asyncio.sleep(0)
                    at.trace_session_event("finalized", status="accepted")
                    sessions += _session_tracer.current_tracer() is not None
            spans += bool(GATE.enabled)
            _progress(out, spans, sessions)
            await asyncio.sleep(0)


if __name__ == "__main__":
    main()
