"""Run in a child process by the session tests.

Usage: python _session_child.py MODE OUTPUT_DIR SPANS(0|1)

Configures the session tracer (span telemetry on or off, by SPANS) into
OUTPUT_DIR with a flush threshold larger than the work, finishes 300 sessions
of 3 tasks, then, by MODE: ``exit`` returns; ``flush-kill`` calls ``flush()``,
prints ``flushed True`` and waits to be killed; ``sigterm`` prints ``ready``
and waits for SIGTERM (handle_sigterm on).
"""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys
import time

import asynctrace


async def work() -> None:
    async def sample(task: int) -> None:
        with asynctrace.task_scope(task), asynctrace.session_scope():
            async with asynctrace.atrace_session_phase("generate"):
                await asyncio.sleep(0)
            asynctrace.trace_session_event("finalized", status="accepted")

    await asyncio.gather(*(sample(i % 3) for i in range(300)))


def main() -> None:
    mode, output_dir, spans = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if mode == "sigterm":
        # A child inherits the spawning thread's signal mask (and an ignored SIGTERM): a
        # test runner's worker that had SIGTERM blocked would make this child deaf to it.
        # Said on stderr (shown if the test fails), then put as a fresh process has it.
        blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        if signal.SIGTERM in blocked:
            print("SIGTERM was blocked when this child started", file=sys.stderr, flush=True)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
            print("SIGTERM was ignored when this child started", file=sys.stderr, flush=True)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    telemetry = asynctrace.configure(
        {
            "enabled": spans,
            "exporters": ["memory"],
            "output_dir": output_dir,
            "run_id": "sessions-child",
            "handle_sigterm": mode == "sigterm",
            "session_tracer": {"enabled": True, "flush_threshold": 10_000},
        }
    )
    asyncio.run(work())
    if mode == "flush-kill":
        print("flushed", telemetry.flush(10.0), flush=True)
        time.sleep(60)
    elif mode == "sigterm":
        # Dies of SIGTERM at once; alive 25 s on, it is stuck: every thread's stack to
        # stderr (shown with the failed test), then exit.
        faulthandler.dump_traceback_later(25, exit=True)
        print("ready", flush=True)
        time.sleep(60)


if __name__ == "__main__":
    main()
