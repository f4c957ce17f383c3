"""Session tracer figures.

Usage: python benchmarks/bench_sessions.py [--quick]

1. lifecycle: register + 2 phases + finalize, per session, with the tracer
   running and its writer idle while sessions run; the writer drains the
   records between chunks of 1,000 sessions (untimed; the writer thread's CPU
   time per record is reported apart) [<= 5 us]. Also reported: the same loop with every
   record kept queued until the end.
2. stall: the longest event-loop stall while 10,000 finished sessions are
   flushed by the background writer (flush() awaited in a worker thread): a
   probe task yields to the loop continuously and records the longest gap
   between two of its turns; compared with the same probe while nothing is
   flushed [<= 1 ms].

Exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import tempfile
import time
from pathlib import Path

import asynctrace as at
from asynctrace._session_tracer import SessionTracer, install

CHUNK = 1_000  # sessions timed between two (untimed) flushes


def _sessions(first: int, count: int) -> None:
    for i in range(first, first + count):
        with at.task_scope(i), at.session_scope():
            with at.trace_session_phase("generate"):
                pass
            with at.trace_session_phase("reward"):
                pass
            at.trace_session_event("finalized", status="accepted")


def lifecycle_us(count: int, repeats: int, chunk: int = CHUNK) -> tuple[float, float]:
    """Best per-session cost of the lifecycle, and of writing one record.

    The writer is idle while sessions run (its threshold is above the count)
    and drains the finished records between chunks of *chunk* sessions, so
    memory stays in the steady state of a running job instead of growing with
    the count; the drain is measured apart, as the writer thread's CPU time per record.
    With ``chunk == count`` every record stays queued until the end (a
    reference: the garbage collector then walks them all).
    """
    best = best_write = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            tracer = SessionTracer(Path(tmp) / "s.jsonl", flush_threshold=count + 1)
            install(tracer)
            timed = writing = 0.0
            for first in range(0, count, chunk):
                start = time.perf_counter()
                _sessions(first, min(chunk, count - first))
                middle = time.perf_counter()
                cpu = time.process_time()  # this thread waits: the CPU is the writer's
                assert tracer.flush(60.0)
                timed += middle - start
                writing += time.process_time() - cpu
            best = min(best, timed / count * 1e6)
            best_write = min(best_write, writing / count * 1e6)
            install(None)
            tracer.shutdown(30.0)
    return best, best_write


async def _probe(stop: asyncio.Event, lags: list[float]) -> None:
    """Yield to the loop as often as possible; record each gap between turns."""
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0)
        now = time.perf_counter()
        lags.append(now - last)
        last = now


async def _max_lag(flush_sessions: int) -> float:
    lags: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(_probe(stop, lags))
    await asyncio.to_thread(time.sleep, 0)  # start the executor's thread before measuring
    await asyncio.sleep(0.05)
    lags.clear()
    if flush_sessions:
        with tempfile.TemporaryDirectory() as tmp:
            tracer = SessionTracer(Path(tmp) / "s.jsonl", flush_threshold=flush_sessions + 1)
            install(tracer)
            for i in range(flush_sessions):
                with at.task_scope(i % 100), at.session_scope():
                    with at.trace_session_phase("generate"):
                        pass
                    at.trace_session_event("finalized", status="accepted")
            await asyncio.sleep(0.01)
            lags.clear()
            assert await asyncio.to_thread(tracer.flush, 60.0)
            stop.set()  # shutdown() below joins a thread: not part of the figure
            await probe
            install(None)
            tracer.shutdown(30.0)
    else:
        await asyncio.sleep(0.5)
        stop.set()
        await probe
    return max(lags) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count, repeats = (20_000, 3) if args.quick else (100_000, 5)
    print(f"python {platform.python_version()} on {platform.machine()}")
    us, write_us = lifecycle_us(count, repeats)
    retained_us, _ = lifecycle_us(count, repeats, chunk=count)
    ok_life = us <= 5.0
    print(
        f"{'ok  ' if ok_life else 'MISS'} lifecycle (register + 2 phases + finalize): "
        f"{us:.2f} us per session  (target <= 5 us)"
    )
    print(f"     reference: all {count:,} records queued until the end: {retained_us:.2f} us")
    print(f"     reference: writer thread CPU per record written: {write_us:.2f} us")
    base = min(asyncio.run(_max_lag(0)) for _ in range(3))
    stall = min(asyncio.run(_max_lag(10_000)) for _ in range(3))
    ok_stall = stall <= 1.0
    print(
        f"{'ok  ' if ok_stall else 'MISS'} longest loop stall while flushing 10,000 sessions: "
        f"{stall:.3f} ms (idle probe: {base:.3f} ms)  (target <= 1 ms)"
    )
    return 0 if ok_life and ok_stall else 1


if __name__ == "__main__":
    sys.exit(main())
