"""Profiling at the edges, continued: no thread to be had, what a capture holds, shutdown
during a capture, a failed save, one request answered once, the schedule's validation,
reconfiguration, labels in ``report``, a span ended on another thread. The ``python``
backend (viztracer) runs for real."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _profiling_helpers import captures, configure
from opentelemetry import trace

import asynctrace as at
from asynctrace import ConfigurationError, _profile_requests, _profiling

pytest.importorskip("viztracer", reason="the python profiler backend needs viztracer")

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="viztracer's hooks: < 3.12")

# A credential as a training script might hard-code it: no capture may hold it.
API_KEY = "sk-live-asynctrace-test-9f3b7c"


def busy(n: int) -> int:
    """CPU work the profiler sees as Python calls."""
    return sum(i * i for i in range(n))


def spans(out: Path, name: str = "rl.step") -> list[dict[str, Any]]:
    lines = (out / "traces-r0.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines if line.strip()]
    return [e for e in events if e.get("ph") == "X" and e.get("name") == name]


@pytest.fixture(autouse=True)
def _warnings_told_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the profiler's once-per-process warnings afresh."""
    monkeypatch.setattr(_profiling, "_warned", set())


def _no_thread_named(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Threads named *name* fail to start, as at the process's thread limit."""
    start = threading.Thread.start

    def refused(self: threading.Thread) -> None:
        if self.name == name:
            raise RuntimeError("can't start new thread")  # what CPython raises then
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refused)


def test_no_thread_to_save_a_capture_leaves_the_step_and_its_span_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No thread can be started to save the capture when the step ends: the step goes on,
    its span ends (and is exported), the claimed file is given back, and shutdown() says
    a capture was lost, without raising."""
    telemetry = configure(tmp_path, {"steps": [1]})
    _no_thread_named(monkeypatch, "asynctrace-profile-save")
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True) as span:
            busy(100)
        assert trace.get_current_span() is not span
        monkeypatch.undo()
        assert telemetry.shutdown() is False
    assert "could not be saved (no thread to save it)" in caplog.text
    assert captures(tmp_path) == []
    assert len(spans(tmp_path)) == 1


def test_no_thread_to_prepare_the_next_capture_is_not_the_steps_concern(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No thread to build the next capture's tracer ahead: the step ends normally, and the
    next scheduled step builds its tracer as it starts."""
    telemetry = configure(tmp_path, {"steps": [1, 2]})
    _no_thread_named(monkeypatch, "asynctrace-profile-prepare")
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        for step in (1, 2):
            with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                busy(100)
    monkeypatch.undo()
    assert "could not be prepared" in caplog.text
    assert "did not stop" not in caplog.text
    assert telemetry.shutdown()
    assert captures(tmp_path) == ["profile-r0-step1.python.json", "profile-r0-step2.python.json"]


def _use_the_key() -> str:
    return API_KEY.upper()


def test_a_capture_holds_no_source_code(tmp_path: Path) -> None:
    """A capture holds events, not the source of the files they ran in (viztracer's
    ``file_info``): a secret written in the script stays out of it."""
    telemetry = configure(tmp_path, {"steps": [1]})
    with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
        _use_the_key()
    assert telemetry.shutdown()
    (name,) = captures(tmp_path)
    text = (tmp_path / name).read_text()
    assert "file_info" not in json.loads(text)
    assert "_use_the_key" in text  # the call is recorded, by name
    assert API_KEY not in text


def test_shutdown_stops_a_capture_before_it_ends_the_open_spans(tmp_path: Path) -> None:
    """shutdown() while another thread is in a profiled step: the capture stops before the
    step's span is ended (truncated), so each of its events lies inside the span."""
    telemetry = configure(tmp_path, {"steps": [1]})
    inside, stop = threading.Event(), threading.Event()

    def step() -> None:
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
            inside.set()
            while not stop.is_set():
                busy(50)

    worker = threading.Thread(target=step)
    worker.start()
    try:
        assert inside.wait(30)
        busy(20_000)  # the capture holds events of the step by now
        assert telemetry.shutdown(30)
    finally:
        stop.set()
        worker.join(30)
    (span,) = spans(tmp_path)
    assert span["args"]["asynctrace.truncated"] is True
    (name,) = captures(tmp_path)
    document = json.loads((tmp_path / name).read_text())
    about = document["otherData"]["asynctrace"]
    offset, error = about["clock_offset_us"], about["clock_error_us"]
    ends = [
        e["ts"] + e.get("dur", 0) + offset
        for e in document["traceEvents"]
        if e.get("ph") != "M" and "ts" in e
    ]
    assert len(ends) > 10
    late = [end for end in ends if end > span["ts"] + span["dur"] + error + 1]
    assert late == [], f"{len(late)} of {len(ends)} events end after the span"


def test_a_save_that_fails_leaves_no_half_written_capture(tmp_path: Path) -> None:
    """The disk fills up while captures are saved (a file size limit here): no capture is
    left half-written under its name (its file keeps the empty trace ``convert`` reports
    as not saved), no temporary file stays, and shutdown() returns False."""
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import resource, signal, sys
            import asynctrace as at
            t = at.configure({"enabled": True, "span_groups": "per_step",
                              "exporters": ["chrome"], "output_dir": sys.argv[1],
                              "profiler": {"steps": [1]}})
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
            def f(i): return i
            with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
                for i in range(20_000):
                    f(i)
            print("shutdown", t.shutdown(30))
            """
        )
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(script), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shutdown False" in done.stdout, done.stdout + done.stderr
    assert "saving the profile" in done.stderr
    assert captures(out) == ["profile-r0-step1.python.json"]
    assert json.loads((out / "profile-r0-step1.python.json").read_text()) == {"traceEvents": []}
    assert sorted(p.name for p in out.iterdir()) == [
        "profile-r0-step1.python.json",
        "traces-r0.jsonl",
    ]


def test_one_request_is_answered_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each touch of ``profile-next-step`` is answered by one capture, however the request
    watcher's look at the file interleaves with a capture answering it (the watcher polls
    without pause here, switching threads as often as the interpreter allows)."""
    monkeypatch.setattr(_profile_requests, "_POLL_S", 0.0)
    telemetry = configure(tmp_path, {"steps": [], "entries": 1000})
    profiler = _profiling.active_profiler()
    assert profiler is not None
    request = tmp_path / "profile-next-step"
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        while not profiler._request.watched:
            time.sleep(0.001)
        requests = 60
        for trial in range(requests):
            new = tmp_path / "request.tmp"
            new.write_text(str(trial))
            stamp = (trial + 1) * 1_000_000_000
            os.utime(new, ns=(stamp, stamp))
            new.replace(request)  # one change, seen whole
            while profiler._request.pending is None:
                time.sleep(0)
            for _ in range(20):  # spans that ask, after the one request
                with at.iteration_scope(trial), at.umbrella_span("step", "rl.step", profile=True):
                    pass
    finally:
        sys.setswitchinterval(interval)
    assert telemetry.shutdown(60)
    assert len(captures(tmp_path)) == requests


def test_the_watcher_records_a_request_under_the_requests_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watcher compares the file with the request last answered and records a new one
    in one step, under the lock a capture answering a request takes: a capture cannot
    answer between the two (which would leave the same request pending again)."""
    monkeypatch.setattr(_profile_requests, "_POLL_S", 0.01)
    telemetry = configure(tmp_path, {"steps": []})
    profiler = _profiling.active_profiler()
    assert profiler is not None
    request = profiler._request
    while not request.watched:
        time.sleep(0.001)
    with request.lock:
        (tmp_path / "profile-next-step").touch()
        time.sleep(0.2)  # many polls' time: each waits for the lock
        assert request.pending is None
    deadline = time.monotonic() + 30
    while request.pending is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert request.pending is not None
    assert telemetry.shutdown()


def test_a_request_pending_at_reconfiguration_is_still_answered(tmp_path: Path) -> None:
    """configure() again on the same directory: a request made before (and not answered)
    is answered by the new configuration's next span that asks."""
    telemetry = configure(tmp_path, {"steps": []})
    profiler = _profiling.active_profiler()
    assert profiler is not None
    while not profiler._request.watched:
        time.sleep(0.001)
    (tmp_path / "profile-next-step").touch()
    while profiler._request.pending is None:
        time.sleep(0.01)
    assert telemetry.shutdown()
    telemetry = configure(tmp_path, {"steps": []})
    time.sleep(0.05)  # the new watcher's first look at the file
    with at.iteration_scope(7), at.umbrella_span("step", "rl.step", profile=True):
        busy(100)
    assert telemetry.shutdown()
    assert captures(tmp_path) == ["profile-r0-step7.python.json"]


def test_an_unsampled_scheduled_step_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A scheduled step whose trace is not sampled is not profiled; a warning says so, once."""
    telemetry = configure(tmp_path, {"steps": [1, 2]}, sample_rate=0.0)
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        for step in (1, 2):
            with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                busy(10)
    assert telemetry.shutdown()
    assert captures(tmp_path) == []
    assert caplog.text.count("is scheduled in profiler.steps, but its span is not recorded") == 1


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        pytest.param(
            {5: "x"}, r"profiler.steps: \{5: 'x'\} is not accepted; accepted: a list", id="dict"
        ),
        pytest.param(
            range(0, 10**15, 7),
            r"profiler.steps: range\(0, 1000000000000000, 7\) has more than 100000 steps",
            id="huge-range",
        ),
        pytest.param([1.0], r"profiler.steps: 1.0 is not accepted", id="float"),
    ],
)
def test_steps_that_are_no_schedule_fail_at_configuration(
    tmp_path: Path, steps: object, message: str
) -> None:
    """A mapping, a range too long to hold, a float: a ConfigurationError naming the key,
    the value and what is accepted (and at once: a long range is not walked through)."""
    with pytest.raises(ConfigurationError, match=message):
        configure(tmp_path, {"steps": steps})


def test_numpy_integers_are_steps(tmp_path: Path) -> None:
    """A numpy integer in ``profiler.steps`` is the step it stands for, as an
    ``rl.iteration`` of one is."""
    np = pytest.importorskip("numpy")
    telemetry = configure(tmp_path, {"steps": [np.int64(3)]})
    with at.iteration_scope(3), at.umbrella_span("step", "rl.step", profile=True):
        busy(10)
    assert telemetry.shutdown()
    assert captures(tmp_path) == ["profile-r0-step3.python.json"]


def test_captures_go_to_output_dir_when_nothing_else_writes_files(tmp_path: Path) -> None:
    """No exporter writes files: the captures go to the configured ``output_dir``."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    out = tmp_path / "run"
    telemetry = configure(out, {"steps": [1]}, exporters=[InMemorySpanExporter()])
    with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
        busy(10)
    assert telemetry.shutdown()
    assert captures(out) == ["profile-r0-step1.python.json"]


def test_report_tells_the_roles_of_captures_apart(tmp_path: Path) -> None:
    """The driver's capture of a step and worker rank 0's get labels of their own."""
    for role in ("driver", "worker"):
        telemetry = at.configure(
            {
                "enabled": True,
                "span_groups": "per_step",
                "exporters": ["chrome"],
                "output_dir": str(tmp_path),
                "profiler": {"steps": [3]},
            },
            role=role,
        )
        with at.iteration_scope(3), at.umbrella_span("step", "rl.step", profile=True):
            busy(10)
        assert telemetry.shutdown()
    from asynctrace.cli import main as cli

    page = tmp_path / "report.html"
    assert cli(["report", str(tmp_path), "-o", str(page), "--no-progress"]) == 0
    html = page.read_text(encoding="utf-8")
    profiles = html[html.index('id="profiles"') :]
    profiles = profiles[: profiles.index("</table>")]
    assert "driver r0 step 3" in profiles
    assert ">r0 step 3<" in profiles


def test_a_span_ended_on_another_thread_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A profiled span entered on one thread and ended on another: the capture stops and
    is saved, and a warning says the first thread keeps viztracer's idle hook."""
    telemetry = configure(tmp_path, {"steps": [1]})
    opened: list[Any] = []
    entered, ended = threading.Event(), threading.Event()

    def first() -> None:
        with at.iteration_scope(1):
            manager = at.umbrella_span("step", "rl.step", profile=True)
            manager.__enter__()
            opened.append(manager)
        entered.set()
        ended.wait(30)

    def second() -> None:
        try:
            opened[0].__exit__(None, None, None)
        except ValueError:  # its context token belongs to the first thread's context
            pass

    a = threading.Thread(target=first)
    a.start()
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        assert entered.wait(30)
        b = threading.Thread(target=second)
        b.start()
        b.join(30)
        ended.set()
        a.join(30)
    assert telemetry.shutdown()
    assert "ended on another thread than the one it started on" in caplog.text
    assert captures(tmp_path) == ["profile-r0-step1.python.json"]


@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="no fork hooks here")
def test_configuring_again_registers_no_more_fork_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.register_at_fork cannot take a hook back: configure() after configure() with a
    profiler must not add hooks that every later fork runs for the process's life."""
    configure(tmp_path, {"steps": [3], "backend": "python"})  # what it imports, imported
    at.shutdown()
    registered: list[object] = []
    real = os.register_at_fork

    def counting(**hooks: Any) -> None:
        ours = [h for h in hooks.values() if getattr(h, "__module__", "").startswith("asynctrace")]
        if ours:  # (the SDK's TracerProvider registers hooks of its own per provider)
            registered.append({name: getattr(h, "__qualname__", h) for name, h in hooks.items()})
        real(**hooks)

    monkeypatch.setattr(os, "register_at_fork", counting)
    for _ in range(5):
        configure(tmp_path, {"steps": [3], "backend": "python"})
        at.shutdown()
    assert registered == []
