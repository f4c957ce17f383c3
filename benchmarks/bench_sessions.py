"""Session tracer figures.

Usage: python benchmarks/bench_sessions.py [--quick]

1. lifecycle: register + 2 phases + finalize, per session, with the tracer
   running and its writer idle while sessions run; the writer drains the
   records between chunks of 1,000 sessions (untimed; the writer thread's CPU
   time per record is reported apart) [<= 5 us]. Also reported: the same loop with every
   record kept queued until the end.
   The anchor, in the same process: AReaL 1.0.4's session tracer running the
   same lifecycle the way its own API does it (``set_task_id``,
   ``register_task``, ``register_session``, ``set_session_id``, the two
   ``trace_session_phase`` blocks, ``trace_session_event("mark_finalized")``),
   in chunks of 1,000 sessions alternating with ours, its finished records
   dropped between chunks as its flush would (untimed; it writes them on the
   calling thread) [reported: ours / AReaL's, the median over rounds]. The
   target is absolute and this VM's speed drifts by a third from day to day;
   the ratio says how far ours is from the seed's tracer on the machine of the
   run (the issue's 5 us against the seed's 15-22 us is 0.23-0.33x). If AReaL
   cannot be loaded (``pip install --no-deps areal==1.0.4 orjson colorlog``)
   the script says so loudly and exits 1.
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
import logging
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asynctrace as at
from asynctrace._session_tracer import SessionTracer, install

sys.path.insert(0, str(Path(__file__).parent))
from _areal import AnchorMissing, PerfTracerConfig, SessionTracerConfig, load_perf_tracer

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


def _areal_sessions(pt: Any, first: int, count: int) -> None:
    """The same lifecycle through AReaL's session tracer, as its API does it."""
    for i in range(first, first + count):
        pt.set_task_id(i)
        pt.register_task(i)
        session_id = pt.register_session(i)
        pt.set_session_id(session_id)
        with pt.trace_session_phase("generate"):
            pass
        with pt.trace_session_phase("reward"):
            pass
        pt.trace_session_event("mark_finalized", session_id=session_id, status="accepted")


def versus_areal(pt: Any, rounds: int, sessions: int = 10 * CHUNK) -> tuple[float, float, float]:
    """Ours and AReaL's lifecycle in alternating chunks: best of each (us) and the
    median over rounds of ours / AReaL's."""
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        config = PerfTracerConfig(
            experiment_name="bench",
            trial_name="sessions",
            fileroot=tmp,
            enabled=True,
            session_tracer=SessionTracerConfig(enabled=True, flush_threshold=10 * sessions),
        )
        pt.configure(config, rank=0)
        anchor = pt.get_session_tracer()
        tracer = SessionTracer(Path(tmp) / "s.jsonl", flush_threshold=10 * sessions)
        install(tracer)
        try:
            for round_ in range(rounds):
                spent = [0.0, 0.0]
                for first in range(0, sessions, CHUNK):
                    order = (0, 1) if (round_ + first // CHUNK) % 2 else (1, 0)
                    for side in order:
                        start = time.perf_counter()
                        if side == 0:
                            _sessions(first, CHUNK)
                        else:
                            _areal_sessions(pt, first, CHUNK)
                        spent[side] += time.perf_counter() - start
                        if side == 0:
                            assert tracer.flush(60.0)
                        else:  # what its flush does, without the file
                            anchor._records.clear()
                            anchor._ready.clear()
                            anchor._task_to_sessions.clear()
                ours.append(spent[0] / sessions * 1e6)
                theirs.append(spent[1] / sessions * 1e6)
        finally:
            install(None)
            tracer.shutdown(30.0)
            pt.reset()
    ratio = statistics.median(o / a for o, a in zip(ours, theirs, strict=True))
    return min(ours), min(theirs), ratio


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
    try:
        pt = load_perf_tracer()
    except AnchorMissing as exc:
        print(f"!!! MISSING: AReaL's tracer could not be loaded ({exc}); no anchor measured")
        ok_anchor = False
    else:
        pt.logger.setLevel(logging.WARNING)
        ours_us, areal_us, ratio = versus_areal(pt, 3 if args.quick else 7)
        ok_anchor = True
        print(
            f"     anchor: AReaL's session tracer, the same lifecycle in alternating chunks: "
            f"{areal_us:.2f} us per session (ours {ours_us:.2f} us in the same rounds); "
            f"ours / AReaL's {ratio:.2f} (median of the rounds)"
        )
    base = min(asyncio.run(_max_lag(0)) for _ in range(3))
    stall = min(asyncio.run(_max_lag(10_000)) for _ in range(3))
    ok_stall = stall <= 1.0
    print(
        f"{'ok  ' if ok_stall else 'MISS'} longest loop stall while flushing 10,000 sessions: "
        f"{stall:.3f} ms (idle probe: {base:.3f} ms)  (target <= 1 ms)"
    )
    return 0 if ok_life and ok_stall and ok_anchor else 1


if __name__ == "__main__":
    sys.exit(main())
