"""Runtime edges: captures whatever the environment says, get_tracer() binding late, signal
handlers during a shutdown, spans open at a capture's end, a profiler that cannot start,
stall watchdogs over a reconfiguration, messages naming variables, abandoned spans."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _forks import exit_code, fork_quietly
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace as at
from asynctrace import ConfigurationError, managed_span
from asynctrace._running import current_telemetry, shutdown
from asynctrace._runtime import configure
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]

# A tracer taken at import, before anything is configured (the OpenTelemetry idiom).
MODULE_TRACER = at.get_tracer()


@pytest.fixture(autouse=True)
def _no_telemetry_left_running() -> Iterator[None]:
    yield
    shutdown(timeout_s=2.0)


def _names(exporter: Any) -> list[str]:
    return [span.name for span in exporter.get_finished_spans()]


# -- capture_spans --------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_SAMPLER": "always_off"},
        {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.0"},
        {"OTEL_SDK_DISABLED": "true"},
    ],
    ids=["always_off", "ratio_0", "sdk_disabled"],
)
def test_a_capture_records_every_span_whatever_the_otel_variables_say(
    provider: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture's provider (either kind) reads neither OTEL_TRACES_SAMPLER nor
    OTEL_SDK_DISABLED: every span of the block is captured."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with capture_spans("all", provider=provider) as captured:
        for _ in range(10):
            with managed_span("reward", "score"):
                pass
    assert captured.names() == ["score"] * 10


@pytest.mark.parametrize("provider", PROVIDERS)
def test_spans_open_when_a_capture_exits_are_captured_truncated(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A span still open when the block exits is ended then, tagged truncated, and captured
    once; its owner ending it later does nothing and logs nothing."""
    with caplog.at_level(logging.DEBUG):
        with capture_spans("all", provider=provider) as captured:
            with managed_span("reward", "closed"):
                pass
            left_open = managed_span("reward", "left_open")
            left_open.__enter__()
        at_exit = [(s.name, (s.attributes or {}).get("asynctrace.truncated")) for s in captured]
        left_open.__exit__(None, None, None)
    assert at_exit == [("closed", None), ("left_open", True)]
    assert captured.names() == ["closed", "left_open"]
    assert "already shutdown" not in caplog.text
    assert "ended span" not in caplog.text


def test_a_blank_provider_variable_is_unset_for_a_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ASYNCTRACE_PROVIDER=" " is unset, as configure() reads it: the capture runs on fast."""
    monkeypatch.setenv("ASYNCTRACE_PROVIDER", " ")
    with capture_spans("all") as captured:
        with managed_span("reward", "score"):
            pass
    assert captured.names() == ["score"]
    assert type(captured.provider).__name__ == "FastTracerProvider"


@pytest.mark.parametrize("provider", [1, TracerProvider(), b"sdk"], ids=["int", "obj", "bytes"])
def test_a_capture_refuses_a_provider_that_is_no_name_with_a_configuration_error(
    provider: Any,
) -> None:
    """A provider that is not a name is refused as a ConfigurationError naming the key,
    the value and the accepted names (not an AttributeError)."""
    with pytest.raises(ConfigurationError, match=r"provider: .* accepted: fast, sdk"):
        with capture_spans(provider=provider):
            pass


# -- get_tracer() --------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_tracer_taken_before_a_configuration_records_into_the_running_one(
    provider: str,
) -> None:
    """get_tracer() binds late: taken at import or under a configuration since replaced,
    its spans (and those of its decorator) go to the configuration running when they
    start; with none running they are not recorded."""
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    config = {"enabled": True, "span_groups": "all", "provider": provider}

    @MODULE_TRACER.start_as_current_span("decorated")
    def decorated() -> None:
        pass

    assert not MODULE_TRACER.start_span("unconfigured").is_recording()
    telemetry = configure({**config, "exporters": [first]})
    with MODULE_TRACER.start_as_current_span("at_import") as span:
        assert span.is_recording()
    cached = at.get_tracer()  # under the first configuration
    decorated()
    telemetry = configure({**config, "exporters": [second]})
    with cached.start_as_current_span("cached"):
        cached.start_span("child").end()
    decorated()
    with pytest.raises(ValueError), cached.start_as_current_span("raised"):
        raise ValueError("token=hunter2")
    assert telemetry.flush(10)
    assert _names(first) == ["at_import", "decorated"]
    assert _names(second) == ["child", "cached", "decorated", "raised"]
    (raised,) = [s for s in second.get_finished_spans() if s.name == "raised"]
    assert "hunter2" not in str(raised.status.description)
    shutdown(5.0)
    assert not cached.start_span("after").is_recording()


# -- a signal handler during a shutdown -------------------------------------------------


class SignalsInShutdown:
    """An exporter whose shutdown() (on its export thread) sends SIGUSR1 to the main
    thread, and waits until the handler has run there."""

    def __init__(self) -> None:
        self.handled = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
        self.handled.wait(30)

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def test_flush_and_shutdown_in_a_signal_handler_during_shutdown_return_at_once() -> None:
    """A signal handler that interrupts shutdown() on the main thread and calls flush()
    and shutdown() gets False at once (they cannot wait for the shutdown paused under
    them); the shutdown then finishes and writes everything."""
    exporter = SignalsInShutdown()
    telemetry = configure(
        {"enabled": True, "span_groups": "all", "exporters": ["memory", exporter]}
    )
    memory = telemetry.memory_exporter
    with managed_span("reward", "s"):
        pass
    results: dict[str, Any] = {}

    def on_usr1(signum: int, frame: object) -> None:
        started = time.monotonic()
        results["flush"] = at.flush(10.0)
        results["shutdown"] = at.shutdown(10.0)
        results["took"] = time.monotonic() - started
        exporter.handled.set()

    previous = signal.signal(signal.SIGUSR1, on_usr1)
    try:
        assert telemetry.shutdown(60.0) is True
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert (results["flush"], results["shutdown"]) == (False, False)
    assert results["took"] < 5.0  # half the 10 s they would have waited for themselves
    assert memory is not None
    assert _names(memory) == ["s"]
    assert at.flush(1.0) is True  # the shutdown's result now
    assert at.shutdown(1.0) is True


class HeldInShutdown:
    """An exporter whose shutdown() waits until *release* is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.entered.set()
        self.release.wait(30)

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_during_another_threads_shutdown_knows_no_thread_inside_it() -> None:
    """The threads inside shutdown() at fork() are not in the child: none of its own
    threads (which may get one of their idents) is taken for one of them."""
    exporter = HeldInShutdown()
    telemetry = configure({"enabled": True, "span_groups": "all", "exporters": [exporter]})
    closing = threading.Thread(target=telemetry.shutdown, args=(30.0,))
    closing.start()
    try:
        assert exporter.entered.wait(10)
        assert telemetry._in_shutdown  # the closing thread is inside shutdown()
        pid = fork_quietly()
        if pid == 0:  # the child: report through the exit status, never return to pytest
            os._exit(0 if not telemetry._in_shutdown else 1)
        assert exit_code(pid) == 0
    finally:
        exporter.release.set()
        closing.join(30)


# -- a profiler that cannot start --------------------------------------------------------


def test_a_profiler_that_cannot_start_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configure() whose profiler cannot start a thread raises a ConfigurationError
    naming the profiler, and leaves no export thread or telemetry running."""
    configure(
        {"enabled": True, "exporters": ["chrome"], "output_dir": tmp_path, "span_groups": "all"}
    )
    start = threading.Thread.start

    def refused(self: threading.Thread) -> None:
        if self.name == "asynctrace-profile-requests":
            raise RuntimeError("can't start new thread")  # what CPython raises then
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refused)
    with pytest.raises(ConfigurationError, match=r"^profiler: .*can't start new thread"):
        configure(
            {
                "enabled": True,
                "exporters": ["chrome"],
                "output_dir": tmp_path,
                "span_groups": "all",
                "profiler": {"steps": [3], "backend": "python"},
            }
        )
    monkeypatch.undo()
    assert current_telemetry() is None
    assert not at.enabled_span_groups()
    assert [t.name for t in threading.enumerate() if t.name.startswith("asynctrace-export")] == []


# -- loop-stall watchdogs over a reconfiguration ---------------------------------------


def test_a_loop_watched_before_a_reconfiguration_is_watched_after_it(tmp_path: Path) -> None:
    """Reconfigured from inside a running loop, within an open step: a block after it is
    recorded as a stall by the new configuration, with no new step started."""
    first, second = InMemorySpanExporter(), InMemorySpanExporter()

    def config(exporter: InMemorySpanExporter) -> dict[str, Any]:
        return {
            "enabled": True,
            "exporters": [exporter],
            "span_groups": "all",
            "loop_stall_threshold_ms": 20,
        }

    configure(config(first))

    async def main() -> at.Telemetry:
        with at.umbrella_span("step", "step"):
            await asyncio.sleep(0.01)
            telemetry = configure(config(second))
            for _ in range(5):  # a block the watchdog cannot miss, however loaded the host
                await asyncio.sleep(0.05)
                time.sleep(0.3)
                await asyncio.sleep(0.05)
                assert telemetry.flush(10)
                if "asynctrace.loop_stall" in _names(second):
                    break
        return telemetry

    asyncio.run(main()).shutdown(5.0)
    assert "asynctrace.loop_stall" in _names(second)


# -- configuration messages ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("ASYNCTRACE_RUN_ID", "../etc", r"^ASYNCTRACE_RUN_ID: '\.\./etc' is not accepted"),
        ("ASYNCTRACE_EXPORT_RANKS", "5", r"^ASYNCTRACE_EXPORT_RANKS: \[5\] names no rank"),
    ],
)
def test_a_bad_variable_is_named_in_the_message(
    var: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_id and export_ranks read from their variables are refused naming the variable,
    as every other setting is."""
    monkeypatch.setenv("ASYNCTRACE_ENABLED", "true")
    monkeypatch.setenv("ASYNCTRACE_EXPORTERS", "memory")
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigurationError, match=message):
        configure()


def test_a_bad_run_id_given_in_the_configuration_is_named_by_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run_id given in the configuration (the variable saying another) names the key."""
    monkeypatch.setenv("ASYNCTRACE_RUN_ID", "fine")
    with pytest.raises(ConfigurationError, match=r"^run_id: '\.\./etc' is not accepted"):
        configure({"enabled": True, "exporters": ["memory"], "run_id": "../etc"})


# -- the shutdown summary -----------------------------------------------------------------


class HeldExporter:
    """An exporter whose export() waits until the test lets it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(30)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def test_spans_in_flight_at_an_abandoning_shutdown_are_not_reported_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A shutdown that abandons an exporter inside export() says its spans in flight may
    still be written, and does not count them as dropped in its summary; they are."""
    held = HeldExporter()
    telemetry = configure({"enabled": True, "span_groups": "all", "exporters": [held]})
    for _ in range(5):
        with managed_span("reward", "s"):
            pass
    try:
        telemetry.flush(0.0)  # the five spans go to export() in one batch
        assert held.entered.wait(10)
        with caplog.at_level(logging.INFO, logger="asynctrace"):
            assert telemetry.shutdown(0.1) is False
    finally:
        held.release.set()
    assert "5 spans in flight; its thread may still write them" in caplog.text
    assert "dropped" not in caplog.text
    deadline = time.monotonic() + 10
    while held.exported < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held.exported == 5
