"""Profiling at the edges: fork, threads, shutdown during a capture, names that collide, a
full buffer, a marker that raises, odd configuration values. The ``python`` backend
(viztracer) runs for real; forks run in a child interpreter of their own."""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _profiling_helpers import about, captures, configure

import asynctrace as at
from asynctrace import ConfigurationError

pytest.importorskip("viztracer", reason="the python profiler backend needs viztracer")

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="viztracer's hooks: < 3.12")


def busy(n: int) -> int:
    """CPU work the profiler sees as Python calls."""
    return sum(i * i for i in range(n))


def run_script(tmp_path: Path, body: str, timeout_s: float = 60) -> str:
    """Run *body* in a fresh interpreter (fork there, not in the test process)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")


@needs_fork
def test_a_child_forked_right_after_configure_does_not_hang(tmp_path: Path) -> None:
    """The backend is imported where configure() runs: a fork while the profiler is being
    prepared does not hand the child a held import lock (its first profiled step would
    wait for good)."""
    out = run_script(
        tmp_path,
        """
        import faulthandler, os, sys, asynctrace as at
        t = at.configure({"enabled": True, "span_groups": "per_step", "exporters": ["chrome"],
                          "output_dir": sys.argv[1], "profiler": {"steps": [2]}})
        pid = os.fork()
        if pid == 0:
            faulthandler.dump_traceback_later(10, exit=True)  # a hang: reported, exit 1
            for step in range(1, 4):
                with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                    pass
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        assert t.shutdown()
        """,
    )
    assert "child 0" in out


def test_no_thread_runs_under_the_hook_outside_a_capture(tmp_path: Path) -> None:
    """A configured profiler hooks no thread until a capture starts, and none after it
    stops: threads started then run at full speed. Threads started during a capture are
    recorded in it."""
    telemetry = configure(tmp_path, {"steps": [2]})
    try:
        seen: list[object] = []

        def look() -> None:
            seen.append(sys.getprofile())
            busy(200)

        def in_thread() -> None:
            thread = threading.Thread(target=look, name="worker-started-here")
            thread.start()
            thread.join()

        preparing = telemetry._profiler._preparing  # type: ignore[union-attr]
        assert preparing is not None
        preparing.join(10)  # the tracer built ahead of the step, as configure() started it
        assert threading.getprofile() is None
        in_thread()
        with at.iteration_scope(2), at.umbrella_span("step", "rl.step", profile=True):
            in_thread()  # recorded
        assert threading.getprofile() is None
        assert sys.getprofile() is None
        in_thread()
        assert seen[0] is None, seen
        assert seen[2] is None, seen
    finally:
        assert telemetry.shutdown()
    (name,) = captures(tmp_path)
    events = json.loads((tmp_path / name).read_text())["traceEvents"]
    threads = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert "worker-started-here" in threads, threads
    assert any("look" in str(e.get("name")) for e in events)


def test_a_failing_start_marker_leaves_no_tracer_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start marker raising: the tracer is stopped again (it would trace the rest of
    the process), the step runs unprofiled, no file is left."""
    from asynctrace import _errors
    from asynctrace._viztracer_backend import PythonBackend

    tracers: list[Any] = []

    def failing_marker(self: Any, name: str) -> None:
        tracers.append(self._tracer)
        raise RuntimeError("marker failed")

    monkeypatch.setattr(PythonBackend, "_marker", failing_marker)
    strict = _errors.set_strict(False)
    try:
        telemetry = configure(tmp_path, {"steps": [2]})
        with at.iteration_scope(2), at.umbrella_span("step", "rl.step", profile=True):
            busy(100)
        assert telemetry.shutdown()
    finally:
        _errors.set_strict(strict)
    assert tracers
    assert not tracers[0].enable
    assert sys.getprofile() is None
    assert threading.getprofile() is None
    assert captures(tmp_path) == []


@needs_fork
def test_a_child_forked_inside_a_profiled_step_runs_untraced(tmp_path: Path) -> None:
    """The capture is the parent's: the child stops it (unsaved) and runs with no hook."""
    out = run_script(
        tmp_path,
        """
        import os, sys, threading, asynctrace as at
        t = at.configure({"enabled": True, "span_groups": "per_step", "exporters": ["chrome"],
                          "output_dir": sys.argv[1], "profiler": {"steps": [1]}})
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
            pid = os.fork()
            if pid == 0:
                print("child", sys.getprofile(), threading.getprofile(), flush=True)
                os._exit(0)
            os.waitpid(pid, 0)
            print("parent", type(sys.getprofile()).__name__, flush=True)
        assert t.shutdown()
        print(sorted(os.listdir(sys.argv[1])))
        """,
    )
    assert "child None None" in out
    assert "parent VizTracer" in out  # the parent's capture ran on
    assert "'profile-r0-step1.python.json'" in out


@needs_fork
def test_captures_of_one_rank_in_two_processes_keep_both(tmp_path: Path) -> None:
    """A forked child profiling the same step under the same rank: each capture gets a
    file of its own (the name is claimed by creating the file), each whole."""
    run_script(
        tmp_path,
        """
        import os, sys, time, asynctrace as at
        t = at.configure({"enabled": True, "span_groups": "per_step", "exporters": ["chrome"],
                          "output_dir": sys.argv[1], "profiler": {"steps": [2]}})
        def loop():
            for step in range(1, 4):
                with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                    sum(range(1000))
        pid = os.fork()
        if pid == 0:
            loop()
            t.shutdown()
            os._exit(0)
        loop()
        os.waitpid(pid, 0)
        assert t.shutdown()
        """,
    )
    names = captures(tmp_path)
    assert names == ["profile-r0-step2.python.json", "profile-r0-step2_2.python.json"], names
    pids = {about(tmp_path / name)["pid"] for name in names}
    assert len(pids) == 2


def test_a_capture_never_overwrites_a_file_already_there(tmp_path: Path) -> None:
    """A capture of an earlier run in the same ``profiler.output`` is kept."""
    earlier = tmp_path / "profile-r0-step1.python.json"
    earlier.write_text('{"traceEvents": [], "earlier": true}')
    telemetry = configure(tmp_path, {"steps": [1]})
    with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
        busy(100)
    assert telemetry.shutdown()
    assert json.loads(earlier.read_text())["earlier"] is True
    assert captures(tmp_path) == [earlier.name, "profile-r0-step1_2.python.json"]
    assert about(tmp_path / "profile-r0-step1_2.python.json")["backend"] == "python"


def test_captures_are_named_with_the_role_as_the_trace_files(tmp_path: Path) -> None:
    """A role other than worker is in the name (``profile-driver-r0-...``), as in
    ``traces-driver-r0.jsonl``: a driver and worker rank 0 sharing a directory do not
    take each other's names."""
    from asynctrace._profile_names import capture_prefix
    from asynctrace._profiler import Profiler
    from asynctrace._profiler_settings import ProfilerSettings

    assert capture_prefix(0, "driver") == "profile-driver-r0"
    assert capture_prefix(0, "worker") == capture_prefix(0, None) == "profile-r0"
    settings = ProfilerSettings.parse("profiler", {"steps": [1], "output": str(tmp_path)})
    telemetry = configure(tmp_path, {"steps": []})
    profiler = Profiler(settings, tmp_path, 0, "driver")
    try:
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step") as span:
            backend = profiler.start(1, span)
            assert backend is not None
            busy(100)
            profiler.stop(backend)
    finally:
        assert profiler.close(10)
        assert telemetry.shutdown()
    assert captures(tmp_path) == ["profile-driver-r0-step1.python.json"]


def test_a_full_buffer_is_recorded_and_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """viztracer's buffer is circular: a step with more events than ``profiler.entries``
    loses its earliest ones. The capture says so (``overflow: true``), a warning says
    what to raise; the alignment still holds (the end marker is kept)."""
    from asynctrace import _capture_finish

    _capture_finish._warned.discard("overflow")
    telemetry = configure(tmp_path, {"steps": [1, 2], "entries": 1000})
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
            for _ in range(3000):
                busy(1)
        assert telemetry.shutdown()
    (name,) = captures(tmp_path)
    recorded = about(tmp_path / name)
    assert recorded["overflow"] is True
    assert recorded["clock_error_us"] >= 0
    assert "raise profiler.entries" in caplog.text


def test_a_capture_that_fits_says_no_overflow(tmp_path: Path) -> None:
    telemetry = configure(tmp_path, {"steps": [1]})
    with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
        busy(100)
    assert telemetry.shutdown()
    assert about(tmp_path / "profile-r0-step1.python.json")["overflow"] is False


def test_shutdown_during_a_capture_stops_and_saves_it(tmp_path: Path) -> None:
    """shutdown() inside a profiled step (a SIGTERM handler, say): the capture is stopped
    and saved before shutdown returns, marked truncated; nothing traces on."""
    telemetry = configure(tmp_path, {"steps": [1]})
    with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
        busy(1000)
        assert telemetry.shutdown()
        assert sys.getprofile() is None
        assert threading.getprofile() is None
        (name,) = captures(tmp_path)
        recorded = about(tmp_path / name)
        assert recorded["truncated"] is True
        assert recorded["clock_error_us"] >= 0
        busy(10)
    assert sys.getprofile() is None


def test_shutdown_on_another_thread_during_a_capture(tmp_path: Path) -> None:
    """Stopped from the shutdown's thread (one started before the capture, as a signal
    handler's), the capture is saved; the span's thread drops the tracer's hook when the
    span ends."""
    calls: queue.Queue[Callable[[], bool]] = queue.Queue()
    results: list[bool] = []
    closer = threading.Thread(target=lambda: results.append(calls.get()()))
    closer.start()
    telemetry = configure(tmp_path, {"steps": [1]})
    with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
        busy(1000)
        calls.put(telemetry.shutdown)
        closer.join(30)
    assert results == [True]
    assert sys.getprofile() is None
    assert about(tmp_path / "profile-r0-step1.python.json")["truncated"] is True


@pytest.mark.parametrize(
    "iteration", [pytest.param(True, id="bool"), pytest.param(1.0, id="float")]
)
def test_an_iteration_equal_to_a_step_but_no_integer_is_no_step(
    tmp_path: Path, iteration: object
) -> None:
    """``True == 1`` and ``1.0 == 1``, but neither is step 1: no capture (it would be
    named ``stepna``)."""
    telemetry = configure(tmp_path, {"steps": [1]})
    with at.managed_span(
        "policy_update", "odd", attributes={"rl.iteration": iteration}, profile=True
    ):
        busy(100)
    assert telemetry.shutdown()
    assert captures(tmp_path) == []


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"backend": ["python"]}, r"profiler.backend: \['python'\] is not accepted; accepted"),
        ({"backend": {"a": 1}}, r"profiler.backend: \{'a': 1\} is not accepted; accepted"),
        ({"entries": 10}, r"profiler.entries: 10 is not accepted; accepted: an integer"),
        ({"entries": True}, r"profiler.entries: True is not accepted"),
        ({"entries": "many"}, r"profiler.entries: 'many' is not accepted"),
    ],
)
def test_bad_values_fail_at_configuration(
    tmp_path: Path, block: dict[str, Any], message: str
) -> None:
    """A backend that is no string (a list, a mapping) or a bad buffer size: a
    ConfigurationError naming the key, the value and what is accepted."""
    with pytest.raises(ConfigurationError, match=message):
        configure(tmp_path, block)


def test_a_process_killed_during_a_capture_leaves_a_capture_convert_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The claimed file of a capture never saved holds an empty trace: ``convert`` says it
    was not merged, and why; the rest converts."""
    run_script(
        tmp_path,
        """
        import os, sys, asynctrace as at
        t = at.configure({"enabled": True, "span_groups": "per_step", "exporters": ["chrome"],
                          "output_dir": sys.argv[1], "profiler": {"steps": [1, 2]}})
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
            pass
        for saver in t._profiler._saving:  # the first capture saved
            saver.join(10)
        with at.iteration_scope(2), at.umbrella_span("step", "rl.step", profile=True):
            os._exit(0)  # killed inside the profiled step
        """,
    )
    assert captures(tmp_path) == [
        "profile-r0-step1.python.json",
        "profile-r0-step2.python.json",
    ]
    from asynctrace.cli import main as cli

    assert cli(["convert", str(tmp_path), "-o", str(tmp_path / "t.json"), "--no-progress"]) == 0
    said = capsys.readouterr()
    assert "profile-r0-step2.python.json: no clock alignment recorded" in said.out + said.err


def test_building_a_tracer_never_hooks_other_threads_even_for_a_moment(tmp_path: Path) -> None:
    """viztracer's constructor sets the threads' profile hook: while a capture's tracer is
    built on one thread, a thread started on another must still start unhooked. The
    building thread is switched away from as often as the interpreter allows."""
    from asynctrace._profiler_settings import ProfilerSettings
    from asynctrace._viztracer_backend import PythonBackend

    settings = ProfilerSettings.parse("profiler", {"steps": [1], "output": str(tmp_path)})
    seen: set[object] = set()
    done = threading.Event()

    def build() -> None:
        for _ in range(40):
            PythonBackend(settings).prepare()
        done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        builder = threading.Thread(target=build)
        builder.start()
        looks = 0
        while not done.is_set() or looks < 1000:
            seen.add(threading.getprofile())
            looks += 1
        builder.join()
    finally:
        sys.setswitchinterval(interval)
    assert seen == {None}
    assert threading.getprofile() is None
