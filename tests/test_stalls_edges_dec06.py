"""Event-loop stalls at more edges: a loop stopped and run again, a stall still in progress
at shutdown or on SIGTERM, a block deep inside a library.

Real loops, real threads, real blocking calls, a real signal in a real
subprocess and the real watchdog. A measurement that a loaded machine can
spoil (a watchdog kept off the CPU for the whole block) is taken again, up to
three times; a defect shows in every try.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _stall_helpers import no_watchdog_left, watchdogs, within_tries  # noqa: F401 (autouse)

import asynctrace as at
from asynctrace import _stalls
from asynctrace.testing import capture_spans

STALL = _stalls.SPAN_NAME


def _spin(seconds: float) -> None:
    """Hold the loop thread (and the GIL, most of the time) for *seconds*."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


def _seconds(span: Any) -> float:
    return float(span.end_time - span.start_time) / 1e9


# ---------------------------------------------------------------------------
# A loop stopped and run again: run_until_complete once per step.


def test_a_loop_run_again_after_a_pause_dates_its_stall_from_the_block() -> None:
    """A synchronous pause between two runs of a loop is no part of the next run's stall.

    The loop is not running for 0.3 s between steps, then blocks 40 ms at
    the start of the next one (threshold 20 ms). Its stall starts within a
    quarter threshold of the block, not halfway into the pause before it.
    """

    async def step(i: int) -> None:
        _spin(0.04)  # building the batch, before the step's span starts
        async with at.umbrella_span("step", f"train.step{i}"):
            await asyncio.sleep(0.01)

    def attempt(_: int) -> None:
        with capture_spans("per_step") as captured:
            _stalls.set_threshold(20.0)
            loop = asyncio.new_event_loop()
            try:
                for i in range(4):
                    loop.run_until_complete(step(i))
                    time.sleep(0.3)  # the synchronous part of the training loop
            finally:
                loop.close()
                _stalls.set_threshold(_stalls.DEFAULT_THRESHOLD_MS)
        stalls = captured.by_name(STALL)
        assert stalls, "no stall sampled (a loaded machine): try again"
        # A 40 ms block: at most a quarter threshold more; the pause would add ~150 ms.
        assert max(_seconds(span) for span in stalls) < 0.12, [_seconds(s) for s in stalls]

    within_tries(attempt)


# ---------------------------------------------------------------------------
# A stall still in progress when the telemetry stops.


def test_a_stall_in_progress_at_shutdown_is_recorded_truncated_under_its_step() -> None:
    """shutdown() from another thread while the loop is blocked records the stall so far."""

    def attempt(_: int) -> None:
        telemetry = at.configure(
            {
                "enabled": True,
                "span_groups": "per_step",
                "exporters": ["memory"],
                "loop_stall_threshold_ms": 20,
            }
        )
        exporter = telemetry.memory_exporter
        assert exporter is not None
        hung = threading.Lock()
        hung.acquire()

        async def main() -> None:
            async with at.umbrella_span("step", "train.step"):
                await asyncio.sleep(0.02)
                hung.acquire(timeout=10.0)  # stands for a deadlock in synchronous code
            hung.release()

        loop_thread = threading.Thread(target=asyncio.run, args=(main(),))
        loop_thread.start()
        try:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:  # until the watchdog has sampled the block
                stalls = [m.stall for m in list(_stalls._monitors.values())]
                sampled = [stall.samples for stall in stalls if stall is not None]
                if sampled and sampled[0] >= 3:
                    break
                time.sleep(0.005)
            else:
                raise AssertionError("the block was not sampled (a loaded machine)")
            assert telemetry.shutdown(10.0)
        finally:
            hung.release()
            loop_thread.join(10.0)
            telemetry.shutdown()
        spans: list[Any] = list(exporter.get_finished_spans())
        (stall,) = [s for s in spans if s.name == STALL]
        (step,) = [s for s in spans if s.name == "train.step"]
        attributes: dict[str, Any] = dict(stall.attributes or {})
        assert attributes.get("asynctrace.truncated") is True
        assert attributes["asynctrace.stall.samples"] >= 3
        assert attributes["asynctrace.stall.coroutine"].endswith("main")
        assert stall.parent is not None
        assert stall.parent.span_id == step.context.span_id
        assert step.start_time <= stall.start_time < stall.end_time

    within_tries(attempt)


_SIGTERM_IN_A_STALL = """
import asyncio, os, signal, sys, threading, time
import asynctrace as at

at.configure({"enabled": True, "span_groups": "per_step", "exporters": ["chrome"],
              "output_dir": sys.argv[1], "handle_sigterm": True,
              "loop_stall_threshold_ms": 20})
from asynctrace import _stalls

def spin(seconds):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass

def term_once_sampled():
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        stalls = [m.stall for m in list(_stalls._monitors.values())]
        if any(stall is not None and stall.samples >= 3 for stall in stalls):
            break
        time.sleep(0.005)
    os.kill(os.getpid(), signal.SIGTERM)

async def main():
    async with at.umbrella_span("step", "train.step"):
        await asyncio.sleep(0.02)
        threading.Thread(target=term_once_sampled, daemon=True).start()
        spin(30)  # SIGTERM arrives while this stall is being sampled
        print("not reached")

asyncio.run(main())
"""


def test_a_stall_in_progress_on_sigterm_is_exported_truncated(tmp_path: Path) -> None:
    """SIGTERM in the middle of a stall: the process ends (no deadlock) and the stall is
    in the trace, truncated, under its step, on the blocked task's track."""
    env = {k: v for k, v in os.environ.items() if k != "ASYNCTRACE_STRICT"}
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM_IN_A_STALL, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "not reached" not in done.stdout
    events = [
        json.loads(line)
        for path in tmp_path.glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    (stall,) = [e for e in events if e.get("name") == STALL]
    (step,) = [e for e in events if e.get("name") == "train.step"]
    assert stall["args"].get("asynctrace.truncated") is True
    assert stall["args"]["asynctrace.stall.coroutine"] == "main"
    assert stall["args"]["parent_span_id"] == step["args"]["span_id"]
    if os.environ.get("ASYNCTRACE_PROVIDER") != "sdk":  # the SDK's: the stopping thread's track
        assert stall["tid"] == step["tid"]  # the task's track


# ---------------------------------------------------------------------------
# A block deep inside a library.


def _nested(depth: int) -> list[Any]:
    value: list[Any] = [list(range(200_000))]  # the slow part sits at the bottom
    for _ in range(depth):
        value = [value]
    return value


_DEEP = _nested(200)  # copy.deepcopy: two frames a level, some 400 of the standard library


def copy_deeply_for(seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        copy.deepcopy(_DEEP)


@pytest.mark.parametrize("where", ["task", "callback"])
def test_a_block_hundreds_of_frames_deep_in_a_library_is_a_stall_with_its_caller(
    where: str,
) -> None:
    """Some 400 frames of copy.deepcopy above the program's own: its stall names the
    program's function, in a task or in a callback the loop calls outside any task."""

    async def main() -> None:
        async with at.umbrella_span("step", "train.step"):
            await asyncio.sleep(0.02)
            if where == "task":
                copy_deeply_for(0.2)
            else:
                asyncio.get_running_loop().call_soon(copy_deeply_for, 0.2)
            await asyncio.sleep(0.3 if where == "callback" else 0.01)

    def attempt(_: int) -> None:
        with capture_spans("per_step") as captured:
            asyncio.run(main())
        stalls = captured.by_name(STALL)
        assert stalls, "no stall recorded"
        attributes: dict[str, Any] = dict(stalls[0].attributes or {})
        assert attributes["code.function.name"] == "copy_deeply_for", attributes
        # Every sample found the program's frames, however deep the copy was then.
        in_stacks = sum(int(s.rsplit(" ", 1)[1]) for s in attributes["asynctrace.stall.stacks"])
        assert in_stacks >= 0.8 * attributes["asynctrace.stall.samples"], attributes

    within_tries(attempt)


# ---------------------------------------------------------------------------
# asyncio.run() once per request.


def test_asyncio_run_per_request_keeps_one_watchdog_that_watches_each_new_loop() -> None:
    """Each new loop of the thread is watched by the watchdog of the one closed before it:
    no thread per loop piles up, and a block in the last loop is still a stall."""

    async def request(block_s: float) -> None:
        async with at.umbrella_span("step", "serve.request"):
            await asyncio.sleep(0)
            _spin(block_s)
            await asyncio.sleep(0)

    def attempt(_: int) -> None:
        with capture_spans("per_step") as captured:
            seen: set[threading.Thread] = set()
            peak = 0
            for _i in range(200):
                asyncio.run(request(0.0))
                alive = set(watchdogs())
                seen |= alive
                peak = max(peak, len(alive))
            asyncio.run(request(0.2))
            seen |= set(watchdogs())
        assert peak <= 2, peak
        assert len(seen) <= 3, len(seen)
        assert len(captured.by_name(STALL)) == 1

    within_tries(attempt)


def test_a_stall_in_progress_when_a_capture_ends_is_captured_truncated() -> None:
    """A coroutine blocks inside a step and leaves ``capture_spans`` before the loop runs
    again: the stall the watchdog is sampling is recorded into the capture, truncated."""

    async def main() -> tuple[list[int], Any]:
        with capture_spans("per_step") as captured:
            _stalls.set_threshold(20.0)
            async with at.umbrella_span("step", "train.step"):
                await asyncio.sleep(0.02)
                _spin(0.3)  # a block the watchdog samples
                stalls = [m.stall for m in list(_stalls._monitors.values())]
                sampled = [stall.samples for stall in stalls if stall is not None]
        await asyncio.sleep(0.05)
        return sampled, captured

    def attempt(_: int) -> None:
        sampled, captured = asyncio.run(main())
        assert sampled, sampled  # (else the watchdog never ran: again)
        assert sampled[0] > 0, sampled
        (stall,) = captured.by_name(STALL)
        assert stall.attributes["asynctrace.truncated"] is True

    within_tries(attempt)


def test_a_loop_adopted_while_its_old_watchdog_posts_to_the_closed_loop_is_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old loop's watchdog loses the CPU between seeing its loop running and posting the
    heartbeat (held here in the one call between the two); meanwhile the loop closes and the
    next ``asyncio.run()`` takes the monitor over. The post fails on the closed loop: the
    watchdog goes on watching the new loop, whose stall is recorded."""
    hold = threading.Event()
    in_selector = _stalls._Monitor._in_selector

    def held_once(self: Any) -> bool:
        if hold.is_set():
            hold.clear()
            time.sleep(0.2)  # the watchdog thread off the CPU
            return False
        return bool(in_selector(self))

    monkeypatch.setattr(_stalls._Monitor, "_in_selector", held_once)

    async def first() -> None:
        async with at.umbrella_span("step", "first"):
            await asyncio.sleep(0.03)
            hold.set()  # the watchdog's next round is held
            await asyncio.sleep(0.03)

    async def second() -> None:
        async with at.umbrella_span("step", "second"):
            await asyncio.sleep(0.4)  # the held watchdog wakes and posts to the closed loop
            _spin(0.3)
            await asyncio.sleep(0.05)

    def attempt(_: int) -> None:
        with capture_spans("per_step") as captured:
            _stalls.set_threshold(20.0)
            asyncio.run(first())
            asyncio.run(second())
        assert not hold.is_set()  # the held round happened
        assert len(captured.by_name(STALL)) == 1

    within_tries(attempt)
