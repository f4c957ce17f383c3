"""Runtime edges: concurrent shutdowns, SIGTERM handlers over many configurations, a
configure() short of resources, a relative output directory, forks, and from_env copies."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _forks import exit_code
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

import asynctrace as at
from asynctrace import ConfigurationError, managed_span
from asynctrace._config import TelemetryConfig
from asynctrace._running import current_telemetry, flush, shutdown
from asynctrace._runtime import configure


@pytest.fixture(autouse=True)
def _no_telemetry_left_running() -> Iterator[None]:
    yield
    shutdown(timeout_s=2.0)


class HeldExporter:
    """An exporter whose export() waits until the test lets it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(30)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def _shutting_down_elsewhere(timeout_s: float) -> tuple[at.Telemetry, HeldExporter, Any]:
    """A handle whose exporter is held inside export(), shut down on another thread."""
    held = HeldExporter()
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory", held],
            "schedule_delay_millis": 5,
            "shutdown_timeout_s": timeout_s,
        }
    )
    with managed_span("reward", "x"):
        pass
    assert held.entered.wait(10)
    results: list[bool] = []
    stopper = threading.Thread(target=lambda: results.append(telemetry.shutdown()))
    stopper.start()
    deadline = time.monotonic() + 10
    while telemetry.enabled and time.monotonic() < deadline:  # the shutdown has begun
        time.sleep(0.001)
    assert not telemetry.enabled
    return telemetry, held, (stopper, results)


# ---------------------------------------------------------------------------
# shutdown() and flush() while another thread shuts down.


def test_a_shutdown_that_gives_up_waiting_for_another_threads_shutdown_returns_false() -> None:
    """The second caller waited, the first shutdown had not finished: not a success."""
    telemetry, held, (stopper, results) = _shutting_down_elsewhere(30.0)
    try:
        assert telemetry.shutdown(timeout_s=0.2) is False
        assert telemetry.flush(timeout_s=0.2) is False  # its flush is still running
        assert stopper.is_alive()
    finally:
        held.release.set()
    stopper.join(10)
    assert results == [True]
    assert telemetry.shutdown(timeout_s=0.2) is True  # finished well: its result
    assert telemetry.flush(timeout_s=0.2) is True


def test_a_flush_during_another_threads_shutdown_waits_for_it() -> None:
    """flush() returns once the shutdown has written everything, not before."""
    telemetry, held, (stopper, results) = _shutting_down_elsewhere(30.0)
    threading.Timer(0.2, held.release.set).start()
    assert telemetry.flush(timeout_s=20) is True
    assert held.release.is_set()  # it could not have finished before the exporter
    stopper.join(10)
    assert results == [True]


def test_after_a_failed_shutdown_flush_and_shutdown_say_it_failed() -> None:
    """The exporter outlasted the shutdown timeout: spans were abandoned, never True."""
    telemetry, held, (stopper, results) = _shutting_down_elsewhere(0.3)
    try:
        stopper.join(10)
        assert results == [False]
        assert telemetry.shutdown(timeout_s=1.0) is False
        assert telemetry.flush(timeout_s=1.0) is False
    finally:
        held.release.set()


# ---------------------------------------------------------------------------
# SIGTERM handlers closed off the main thread, over many configurations.

_OFF_MAIN_SCRIPT = r"""
import json, os, signal, sys, tempfile, threading, time
import asynctrace as at

calls = []
def user(signum, frame):
    calls.append(signum)
signal.signal(signal.SIGTERM, user)
config = {"enabled": True, "exporters": ["memory"], "handle_sigterm": True,
          "provider": os.environ.get("PROVIDER", "fast")}

def depth():
    handler, count = signal.getsignal(signal.SIGTERM), 0
    while type(getattr(handler, "__self__", None)).__name__ == "SigtermHandler":
        count += 1
        handler = handler.__self__.previous
    return count, handler is user

def cycle():
    telemetry = at.configure(config)
    stopper = threading.Thread(target=telemetry.shutdown)  # asyncio.to_thread(shutdown)
    stopper.start()
    stopper.join()

cycle()
fds_one = len(os.listdir("/proc/self/fd"))
for _ in range(40):
    cycle()
deadline = time.monotonic() + 5  # the last helper told to end may still be ending
while threading.active_count() > 1 and time.monotonic() < deadline:
    time.sleep(0.01)
out = {"fds_one": fds_one, "fds_many": len(os.listdir("/proc/self/fd")),
       "depth_many": depth(), "threads": threading.active_count()}
at.configure({"enabled": False})  # any configure on the main thread puts the user's back
out["after_disabled"] = signal.getsignal(signal.SIGTERM) is user
out["fds_disabled"] = len(os.listdir("/proc/self/fd"))
mode = sys.argv[1]
if mode == "live":  # a running configuration: shut down by the signal, then the user's
    telemetry = at.configure(config)
    out["depth_live"] = depth()
elif mode == "stale":  # closed off the main thread: the signal goes straight on
    cycle()
os.kill(os.getpid(), signal.SIGTERM)
deadline = time.monotonic() + 10
while not calls and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.3)  # a second call, if any, would come by now
out["calls"] = len(calls)
out["current"] = at.current_telemetry() is not None
print(json.dumps(out))
"""


@pytest.mark.parametrize("mode", ["live", "stale"])
def test_shutdowns_off_the_main_thread_leave_one_handler_and_sigterm_reaches_the_user_once(
    mode: str,
) -> None:
    """configure(handle_sigterm) then shutdown() from a worker thread, 41 times: no
    descriptor, thread or handler piles up, and SIGTERM reaches the program's own
    handler exactly once (after the shutdown it asked for, when telemetry runs)."""
    done = subprocess.run(
        [sys.executable, "-c", _OFF_MAIN_SCRIPT, mode],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PROVIDER": os.environ.get("ASYNCTRACE_PROVIDER", "fast")},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["fds_many"] == out["fds_one"], out  # one closed handler's pipes at most
    assert out["depth_many"] == [1, True], out  # the last one, in front of the user's
    assert out["threads"] == 1, out
    assert out["after_disabled"], out
    assert out["fds_disabled"] == out["fds_one"] - 4, out  # its two pipes closed
    if mode == "live":
        assert out["depth_live"] == [1, True], out
    assert out["calls"] == 1, (out, done.stderr)
    assert out["current"] is False, out


# ---------------------------------------------------------------------------
# configure() when the SIGTERM handler cannot be set up.

_EMFILE_SCRIPT = r"""
import json, os, resource, signal, threading
import asynctrace as at
from asynctrace import _state
from opentelemetry import trace

class Exporter:  # a user's exporter: a queue and a worker thread of its own
    def export(self, spans):
        return 0
    def shutdown(self):
        pass

config = {"enabled": True, "exporters": ["memory", Exporter()], "span_groups": "all",
          "handle_sigterm": True, "provider": os.environ.get("PROVIDER", "fast"),
          "output_dir": os.environ["OUT"], "session_tracer": {"enabled": True}}
before = len(os.listdir("/proc/self/fd"))
threads = threading.active_count()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 256), hard))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
for _ in range(int(os.environ["SPARE"])):
    os.close(held.pop())
out = {}
try:
    at.configure(config)
    out["raised"] = None
except Exception as exc:
    out["raised"] = type(exc).__name__
    out["message"] = str(exc)
for fd in held:
    os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
out["fds_leaked"] = len(os.listdir("/proc/self/fd")) - before
out["threads_left"] = threading.active_count() - threads
out["current"] = at.current_telemetry() is not None
out["gate_on"] = _state.GATE.provider is not None
out["global_target"] = getattr(trace.get_tracer_provider(), "target", None) is not None
out["handler_is_default"] = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
telemetry = at.configure(config)  # it works once descriptors are back
out["then"] = telemetry.enabled and at.shutdown(5.0)
print(json.dumps(out))
"""


@pytest.mark.parametrize("spare", [2, 4], ids=["no-pipe", "one-pipe"])
def test_a_sigterm_handler_without_descriptors_is_a_configuration_error_that_leaves_nothing(
    tmp_path: Path, spare: int
) -> None:
    """No descriptor left for the handler's pipes (one is left for the session file):
    ConfigurationError naming handle_sigterm and the OS error; telemetry is off (gate,
    global provider, handle, exporter and session threads, files and pipes)."""
    done = subprocess.run(
        [sys.executable, "-c", _EMFILE_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "SPARE": str(spare),
            "OUT": str(tmp_path),
            "PROVIDER": os.environ.get("ASYNCTRACE_PROVIDER", "fast"),
        },
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["raised"] == "ConfigurationError", out
    assert out["message"].startswith("handle_sigterm: True: "), out
    assert "Too many open files" in out["message"], out
    assert "accepted: " in out["message"], out
    assert out["fds_leaked"] == 0, out
    assert out["threads_left"] == 0, out
    assert (out["current"], out["gate_on"], out["global_target"]) == (False, False, False), out
    assert out["handler_is_default"], out
    assert out["then"] is True, out


# ---------------------------------------------------------------------------
# A relative output directory, then os.chdir().


def test_a_relative_output_dir_is_fixed_for_the_trace_file_and_the_profiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After os.chdir() (Hydra's launcher) the handle still reports the trace file where it
    is, and a profile request in the output directory is seen and answered there."""
    pytest.importorskip("viztracer", reason="the python profiler backend needs viztracer")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": "out",
            "session_tracer": {"enabled": True},
            "profiler": {"steps": [], "backend": "python"},
        }
    )
    out = tmp_path / "a" / "out"
    assert telemetry.trace_file == out / "traces-r0.jsonl"
    os.chdir(tmp_path / "b")
    time.sleep(0.7)  # the request watcher has looked once: a request now is a new one
    (out / "profile-next-step").write_text("")

    async def loop() -> None:
        for step in range(1, 400):
            with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                await asyncio.sleep(0.01)
            if list(out.glob("profile-*.json")):
                return

    asyncio.run(loop())
    assert telemetry.shutdown(10)
    assert len(list(out.glob("profile-r0-step*.python.json"))) == 1
    assert not (tmp_path / "b" / "out").exists()


# ---------------------------------------------------------------------------
# Forks.


def test_a_fork_while_a_thread_is_inside_the_handles_stop_event_does_not_hang(
    tmp_path: Path,
) -> None:
    """A thread holds the stop event's lock (as inside wait() or set()) at fork(): the
    child's configure() shuts the inherited handle down and does not hang on it."""
    telemetry = configure({"enabled": True, "span_groups": "all", "exporters": ["memory"]})
    cond = telemetry._stopped._cond  # type: ignore[attr-defined]
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with cond:
            holding.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                child = configure({"enabled": True, "exporters": ["memory"]})
                code = 0 if child.shutdown(5.0) else 2
            finally:
                os._exit(code)
        assert exit_code(pid, 15, "the forked child, on the inherited stop event") == 0
    finally:
        done.set()
        holder.join(10)


# ---------------------------------------------------------------------------
# The module-level flush of a handle that is gone.


def test_module_flush_and_shutdown_after_a_failed_shutdown_say_it_failed() -> None:
    """The handle is forgotten once shut down; the module-level functions answer its
    result (spans were abandoned: never True) until a new configure() starts a run."""
    telemetry, held, (stopper, _) = _shutting_down_elsewhere(0.3)
    try:
        stopper.join(10)
        assert current_telemetry() is None
        assert flush(1.0) is False
        assert shutdown(1.0) is False
        assert telemetry.flush(1.0) is False
    finally:
        held.release.set()
    configure({"enabled": True, "exporters": ["memory"]})
    assert flush(1.0) is True
    assert shutdown(1.0) is True
    assert flush(1.0) is True  # the last shutdown went well
    assert shutdown(1.0) is True


def test_module_shutdown_waits_for_a_shutdown_still_finishing_elsewhere() -> None:
    """A module-level shutdown while another thread's shutdown is under way (the
    handle already forgotten or not) waits for it and answers its result."""
    _, held, (stopper, results) = _shutting_down_elsewhere(30.0)
    threading.Timer(0.2, held.release.set).start()
    assert shutdown(20) is True
    stopper.join(10)
    assert results == [True]


# ---------------------------------------------------------------------------
# Configuration values.


def test_from_env_gives_a_config_of_its_own(tmp_path: Path) -> None:
    """Changing the result of from_env(base=...) changes nothing in base."""
    base = TelemetryConfig(
        enabled=True,
        exporters=["memory"],
        output_dir=str(tmp_path),
        session_tracer={"enabled": True, "flush_threshold": 5},
        resource_attributes={"team": "rl", "tags": ["a", "b"]},
        span_limits={"max_attributes": 10},
        export_ranks=[0, 1],
        goodput={"file": True, "metrics": "none"},
    )
    derived = TelemetryConfig.from_env({"ASYNCTRACE_ENABLED": "1"}, base=base)
    assert derived == base
    derived.exporters.append("chrome")
    derived.resource_attributes["team"] = "other"
    derived.resource_attributes["tags"].append("c")
    derived.span_limits["max_events"] = 3
    assert isinstance(derived.session_tracer, dict)
    derived.session_tracer["enabled"] = False
    derived.export_ranks.append(2)
    derived.goodput["file"] = False
    assert base.exporters == ["memory"]
    assert base.resource_attributes == {"team": "rl", "tags": ["a", "b"]}
    assert base.span_limits == {"max_attributes": 10}
    assert base.session_tracer == {"enabled": True, "flush_threshold": 5}
    assert base.export_ranks == [0, 1]
    assert base.goodput == {"file": True, "metrics": "none"}


def test_from_env_copies_a_session_tracer_config_and_keeps_exporter_objects() -> None:
    """A SessionTracerConfig is copied; an exporter object is the same object."""
    held = HeldExporter()
    base = TelemetryConfig(
        exporters=["memory", held], session_tracer=at.SessionTracerConfig(enabled=True)
    )
    derived = TelemetryConfig.from_env({}, base=base)
    assert derived.exporters[1] is held
    assert isinstance(derived.session_tracer, at.SessionTracerConfig)
    derived.session_tracer.enabled = False
    assert isinstance(base.session_tracer, at.SessionTracerConfig)
    assert base.session_tracer.enabled is True


@pytest.mark.parametrize("value", [b"chrome", bytearray(b"memory"), memoryview(b"otlp")])
def test_bytes_exporters_are_refused_with_the_value(value: Any) -> None:
    """Bytes are a sequence of numbers, not of names: the message shows the bytes."""
    with pytest.raises(ConfigurationError) as raised:
        TelemetryConfig.from_mapping({"exporters": value})
    message = str(raised.value)
    assert message.startswith(f"exporters: {value!r} is not accepted (bytes: decode them)")
    assert "accepted: a list of exporter names (chrome, otlp, console, memory)" in message
