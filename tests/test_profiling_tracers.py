"""The python profiler's tracers (viztracer): kept, reused and freed so that no capture
loses its threads and no long run exhausts the process. viztracer runs for real."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import asynctrace as at
from asynctrace import _viztracer_tracers

pytest.importorskip("viztracer", reason="the python profiler backend needs viztracer")

from test_profiling_edges import busy, configure


def wait_saved(telemetry: at.Telemetry) -> None:
    """Wait for the captures being saved (the next one may then reuse their tracer)."""
    profiler = telemetry._profiler
    assert profiler is not None
    for saver in list(profiler._saving):
        saver.join(10)


def wait_prepared(telemetry: at.Telemetry) -> None:
    profiler = telemetry._profiler
    assert profiler is not None
    preparing = profiler._preparing
    assert preparing is not None
    preparing.join(10)


def document(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def names(path: Path) -> set[str]:
    """The names of the threads (and tasks) a capture lists."""
    return {
        e["args"]["name"] for e in document(path)["traceEvents"] if e.get("name") == "thread_name"
    }


def in_thread(name: str) -> None:
    thread = threading.Thread(target=busy, args=(200,), name=name)
    thread.start()
    thread.join()


async def task_step(step: int) -> None:
    with at.iteration_scope(step):
        await asyncio.sleep(0)
        async with at.umbrella_span("step", "rl.step", profile=True):
            await asyncio.sleep(0)  # the step's task is resumed while the capture runs
            busy(100)


def earlier_run(out: Path, entries: int, on_tasks: bool) -> None:
    """A configuration with one capture, shut down: its tracers are left behind."""
    telemetry = configure(out, {"steps": [1], "entries": entries})
    try:
        if on_tasks:

            async def main() -> None:
                await asyncio.create_task(task_step(1))

            asyncio.run(main())
        else:
            with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
                busy(100)
    finally:
        assert telemetry.shutdown()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="viztracer's thread hook: < 3.12")
@pytest.mark.parametrize(
    ("entries", "on_tasks"),
    [(10_000, False), (20_000, False), (10_000, True)],
    ids=["same-size", "other-size", "on-tasks"],
)
def test_a_collection_during_a_capture_leaves_its_threads_recorded(
    tmp_path: Path, entries: int, on_tasks: bool
) -> None:
    """Tracers left by earlier configurations (reused, or freed as a capture is prepared,
    never by the cyclic GC): a full collection while a capture runs does not take its
    thread hook away, so a thread started after it is recorded."""
    for run in range(2):
        earlier_run(tmp_path / f"run{run}", 10_000, on_tasks)
    out = tmp_path / "last"
    telemetry = configure(out, {"steps": [2], "entries": entries})
    try:
        wait_prepared(telemetry)
        with at.iteration_scope(2), at.umbrella_span("step", "rl.step", profile=True):
            hook = threading.getprofile()
            gc.collect()  # as the cyclic GC may, at any allocation, on any thread
            assert threading.getprofile() is hook
            in_thread("worker-started-here")
        assert threading.getprofile() is None
    finally:
        assert telemetry.shutdown()
    (path,) = out.glob("profile-*.json")
    assert "worker-started-here" in names(path)


def test_sixty_captures_reuse_a_few_tracers(tmp_path: Path) -> None:
    """Each capture is saved with its own threads only (the tracer it reuses named others
    before), its clock markers, no overflow; the process builds at most three tracers."""
    built = _viztracer_tracers.tracers_built()
    telemetry = configure(tmp_path, {"steps": list(range(1, 61)), "entries": 10_000})
    try:
        for step in range(1, 61):
            with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                in_thread(f"worker-{step}")
            wait_saved(telemetry)
    finally:
        assert telemetry.shutdown()
    assert _viztracer_tracers.tracers_built() - built <= 3
    paths = sorted(tmp_path.glob("profile-*.json"))
    assert len(paths) == 60
    for path in paths:
        step = int(path.name.split("step")[1].split(".")[0])
        threads = {n for n in names(path) if n != "MainThread" and not n.startswith("asynctrace")}
        assert len(threads) == 1, (path.name, threads)
        if sys.version_info < (3, 12):  # from 3.12 its first calls precede its name: Dummy-N
            assert threads == {f"worker-{step}"}, (path.name, threads)
        other = document(path)["otherData"]["asynctrace"]
        assert other["overflow"] is False
        assert isinstance(other["clock_offset_us"], float)


def test_task_tracks_stay_right_when_each_step_is_its_own_task(tmp_path: Path) -> None:
    """A capture that ends inside a task leaves that task in its tracer: later captures
    name their own tasks, never that one (such a tracer is not reused)."""
    before = len(_viztracer_tracers.TRACERS)  # earlier tests' may still be held
    telemetry = configure(tmp_path, {"steps": list(range(1, 7)), "entries": 10_000})
    try:

        async def main() -> None:
            for step in range(1, 7):
                await asyncio.create_task(task_step(step), name=f"task-step-{step}")
                wait_saved(telemetry)

        asyncio.run(main())
    finally:
        assert telemetry.shutdown()
    assert len(_viztracer_tracers.TRACERS) <= before + 3  # the others freed
    paths = sorted(tmp_path.glob("profile-*.json"))
    assert len(paths) == 6
    for path in paths:
        step = int(path.name.split("step")[1].split(".")[0])
        tasks = {name for name in names(path) if name.startswith("task-step-")}
        assert tasks == {f"task-step-{step}"}, (path.name, tasks)


def calls(n: int) -> None:
    for _ in range(n):
        busy(0)


def test_a_tracer_of_another_size_is_not_reused(tmp_path: Path) -> None:
    """profiler.entries holds for every capture: a tracer left by a configuration with
    another buffer size is freed, not reused (its buffer would overflow)."""
    earlier_run(tmp_path / "small", 1_000, on_tasks=False)
    out = tmp_path / "large"
    telemetry = configure(out, {"steps": [2], "entries": 20_000})
    try:
        wait_prepared(telemetry)
        with at.iteration_scope(2), at.umbrella_span("step", "rl.step", profile=True):
            calls(3_000)  # more than 1,000 events, fewer than 20,000
    finally:
        assert telemetry.shutdown()
    (path,) = out.glob("profile-*.json")
    assert document(path)["otherData"]["asynctrace"]["overflow"] is False


def test_a_process_profiling_1100_steps_keeps_running(tmp_path: Path) -> None:
    """viztracer gives back no thread-local storage key a tracer takes (about 1,024 a
    process; past them it exits): 1,100 captures, each step a task of its own, end with
    every step run and the process exiting 0."""
    script = tmp_path / "steps.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, sys, threading
            import asynctrace as at
            from asynctrace import _viztracer_tracers
            STEPS = 1100
            t = at.configure({"enabled": True, "span_groups": "per_step",
                              "exporters": ["chrome"], "output_dir": sys.argv[1],
                              "profiler": {"steps": list(range(STEPS)), "entries": 1000}})
            ran = 0
            async def step(i):
                global ran
                with at.iteration_scope(i):
                    async with at.umbrella_span("step", "rl.step", profile=True):
                        await asyncio.sleep(0)
                        sum(range(50))
                ran += 1
            async def main():
                for i in range(STEPS):
                    await asyncio.create_task(step(i))
                    for saver in list(t._profiler._saving):
                        saver.join(10)
            asyncio.run(main())
            assert t.shutdown()
            print("ran", ran, "built", _viztracer_tracers.tracers_built(),
                  "alive", len(_viztracer_tracers.TRACERS))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran, built, alive = (int(word) for word in done.stdout.split()[1::2])
    assert ran == 1100
    assert built <= _viztracer_tracers.BUDGET
    assert alive <= 8  # a spare, an idle one, those being saved: never one per step
    assert len(list(tmp_path.glob("profile-*.json"))) == 1100


def test_builders_asked_for_at_once_leave_one_spare_and_no_tracer_held_by_nothing(
    tmp_path: Path,
) -> None:
    """Two builders at once each took a tracer, and the later one's spare replaced the
    other's: that tracer was held by nothing any capture would take. Once the process
    could build no more, a step then found none free and ran unprofiled (from 3.12
    viztracer's monitoring callbacks keep the last-started tracer referenced, so it was
    not even reclaimed later)."""
    telemetry = configure(tmp_path, {"steps": list(range(1, 5)), "entries": 1_000})
    profiler = telemetry._profiler
    assert profiler is not None

    def taken() -> int:
        return sum(t not in _viztracer_tracers.IDLE for t in _viztracer_tracers.TRACERS)

    try:
        held = []
        for _ in range(3):  # three tracers built, taken from the profiler, then given back
            wait_prepared(telemetry)
            spare, profiler._spare = profiler._spare, None
            assert spare is not None
            held.append(spare)
            profiler._prepare_spare()
        wait_prepared(telemetry)
        for backend in held:
            backend.discard()
        del held, spare
        gc.collect()
        before = taken()  # the spare, and any tracer an earlier test left in use
        builders = []
        for _ in range(4):
            profiler._prepare_spare()
            builders.append(profiler._preparing)
        for builder in builders:
            assert builder is not None
            builder.join(10)
        gc.collect()
        assert profiler._spare is not None
        assert taken() == before, f"{taken() - before} more tracers out of the idle list"
        for step in range(1, 5):
            with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                busy(50)
            wait_saved(telemetry)
    finally:
        assert telemetry.shutdown()
    assert len(list(tmp_path.glob("profile-*.json"))) == 4
