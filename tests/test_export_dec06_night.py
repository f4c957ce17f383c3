"""Export edges: an output directory replaced by a file, flush helpers of a hung span
processor, urllib3's request lines over OTLP/HTTP."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _forks
import pytest
from _child_script import run_script
from _otlp_receiver import OtlpReceiver
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor

import asynctrace
from asynctrace import managed_span

PROVIDERS = ["fast", "sdk"]


def _config(out: Path, provider: str, **extra: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "span_groups": "all",
        "provider": provider,
        "exporters": ["chrome"],
        "output_dir": str(out),
        "session_tracer": {"enabled": True},
        **extra,
    }


def _records(tag: str, count: int) -> None:
    """*count* spans, and as many session records."""
    for i in range(count):
        with managed_span("generation", f"{tag}-{i}"), asynctrace.session_scope():
            asynctrace.trace_session_event("finalized", status="accepted")


# 1. the output directory replaced by a file: the files' lines are lost, and counted


def _by_a_file(out: Path) -> None:
    out.write_text("")


def _by_a_symlink_loop(out: Path) -> None:  # a path no stat() can follow (ELOOP)
    os.symlink(out.name, out)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
@pytest.mark.parametrize("replace", [_by_a_file, _by_a_symlink_loop], ids=["file", "loop"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_output_directory_replaced_counts_what_it_held_lost(
    tmp_path: Path,
    provider: str,
    replace: Callable[[Path], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    out = tmp_path / "out"
    telemetry = asynctrace.configure(_config(out, provider))
    _records("a", 5)
    assert telemetry.flush(5)
    shutil.rmtree(out)
    replace(out)
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        _records("b", 4)
        assert not telemetry.flush(5)  # nowhere to write: said so
    chrome = telemetry.stats()["chrome"]
    assert telemetry.sessions is not None
    sessions = telemetry.sessions.stats()
    telemetry.shutdown(5)
    assert (chrome.exported, chrome.lost, chrome.failed) == (5, 5, 4)
    assert (sessions["lost"], sessions["failed"]) == (5, 4)
    assert caplog.text.count("was deleted or replaced") == 2  # the trace and the session file


# 2. a user's span processor whose flush hangs: one flush helper, not one per flush()


class _HangingFlush(SpanProcessor):
    """A span processor whose ``force_flush`` hangs until released (a stuck exporter
    behind it); in a forked child it answers at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.parent = os.getpid()
        self.flushes = 0

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self.flushes += 1
        if os.getpid() == self.parent:
            self.release.wait(_forks.HANG_S)
        return True


def _flush_helpers() -> int:
    return sum(t.name == "asynctrace-flush" for t in threading.enumerate())


def test_flushes_behind_a_hung_processor_share_one_helper(tmp_path: Path) -> None:
    telemetry = asynctrace.configure(_config(tmp_path, "sdk"))
    processor = _HangingFlush()
    trace.get_tracer_provider().add_span_processor(processor)  # type: ignore[attr-defined]
    try:
        assert [telemetry.flush(0.01) for _ in range(10)] == [False] * 10
        assert _flush_helpers() == 1
        assert processor.flushes == 1  # the later flushes waited for it, none started again
        pid = _forks.fork_quietly()
        if pid == 0:  # the child has no helper of the parent's to wait for
            os._exit(0 if telemetry.flush(5) and processor.flushes == 2 else 1)
        assert _forks.exit_code(pid) == 0
    finally:
        processor.release.set()
    assert telemetry.flush(5)  # the hung one done: the next flush runs its own
    assert processor.flushes == 2
    assert _flush_helpers() == 0
    assert telemetry.shutdown(5)


def test_a_provider_with_only_asynctraces_processors_flushes_without_a_helper(
    tmp_path: Path,
) -> None:
    telemetry = asynctrace.configure(_config(tmp_path, "sdk"))
    _records("a", 3)
    started: list[str] = []

    def seen(frame: Any, event: str, arg: Any) -> None:  # runs first in each new thread
        started.append(threading.current_thread().name)
        sys.setprofile(None)

    before = threading.getprofile()
    threading.setprofile(seen)
    try:
        assert telemetry.flush(5)
    finally:
        threading.setprofile(before)  # type: ignore[arg-type]
    assert "asynctrace-flush" not in started
    assert telemetry.shutdown(5)


# 3. a token in the OTLP/HTTP endpoint's query string: urllib3's request lines redacted


class _UserFilter(logging.Filter):
    """The application's own filter on a urllib3 logger: kept, and still run."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen += 1
        return True


@pytest.mark.parametrize("provider", PROVIDERS)
def test_urllib3_does_not_log_a_query_token_of_the_endpoint(
    tmp_path: Path,
    provider: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = logging.getLogger("urllib3.connectionpool")
    connection = logging.getLogger("urllib3.connection")
    own = _UserFilter()
    pool.addFilter(own)
    level = connection.level
    connection.setLevel(logging.ERROR)
    try:
        with OtlpReceiver("http/protobuf") as receiver:
            for key, value in receiver.env(timeout_s=5).items():
                monkeypatch.setenv(key, value)
            monkeypatch.setenv(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                f"{receiver.traces_endpoint}?api_key=QUERYSECRET3",
            )
            config = {**_config(tmp_path, provider), "exporters": ["otlp"]}
            with caplog.at_level(logging.DEBUG, logger="urllib3.connectionpool"):
                telemetry = asynctrace.configure(config)
                _records("a", 2)
                telemetry.flush(5)  # the receiver answers 404 to a query: not the point here
                telemetry.shutdown(5)
        requests = [r.getMessage() for r in caplog.records if r.name == "urllib3.connectionpool"]
        assert any("/v1/traces?api_key=REDACTED" in line for line in requests), requests
        assert "QUERYSECRET3" not in caplog.text
        assert own in pool.filters  # the application's filter kept
        assert own.seen  # and still run
        assert connection.level == logging.ERROR  # and its level
    finally:
        pool.removeFilter(own)
        connection.setLevel(level)


# 4. flush() from a signal handler while the main thread starts its flush helper


HANG_S = 30  # the child prints its stacks and exits with 1 after this long

_USER_PROCESSOR = """
import inspect, signal, sys
import asynctrace
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from asynctrace.export import _sdk_processors

telemetry = asynctrace.configure({{"enabled": True, "provider": "sdk", "exporters": ["chrome"],
                                  "output_dir": {out!r}, "span_groups": "all"}})

class Quick(SpanProcessor):
    flushes = 0

    def force_flush(self, timeout_millis=30_000):
        Quick.flushes += 1
        return True

trace.get_tracer_provider().add_span_processor(Quick())
"""


def _run_child(out: Path, body: str) -> list[str]:
    """*body* after an SDK provider with a user's processor is set up, in a child that
    dumps its stacks and exits after ``HANG_S``: a hang fails the test, never the suite."""
    return run_script(_USER_PROCESSOR.format(out=str(out)) + textwrap.dedent(body), HANG_S)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1 (POSIX)")
@pytest.mark.parametrize("text", ["running = _flushing.get(key)", "helper.start()"])
def test_a_flush_from_a_signal_handler_while_the_helper_starts_returns_at_once(
    tmp_path: Path, text: str
) -> None:
    """SIGUSR1 lands while the main thread's flush looks up or starts the provider's flush
    helper (``Thread.start()`` waits on an event, where handlers run): the handler's
    flush returns ``False`` at once, starts no second helper, and the interrupted flush
    completes."""
    out = _run_child(
        tmp_path,
        f"""
        source, first = inspect.getsourcelines(_sdk_processors._flush_once)
        (lineno,) = [first + n for n, line in enumerate(source) if line.strip() == {text!r}]
        answers, raised = [], []
        signal.signal(signal.SIGUSR1, lambda signum, frame: answers.append(telemetry.flush(5)))

        def local(frame, event, arg):
            if event == "line" and frame.f_lineno == lineno and not raised:
                raised.append(True)
                sys.settrace(None)
                frame.f_trace = None
                signal.raise_signal(signal.SIGUSR1)  # its handler runs here
            return local

        def tracer(frame, event, arg):
            if frame.f_code is _sdk_processors._flush_once.__code__ and not raised:
                return local
            return None

        sys.settrace(tracer)
        ok = telemetry.flush(5)
        sys.settrace(None)
        flushes = Quick.flushes
        print(len(raised), len(answers), sum(answers), int(ok), flushes, int(telemetry.flush(5)))
        telemetry.shutdown(5)
        """,
    )
    raised, answered, true_answers, ok, flushes, later = map(int, out)
    assert (raised, answered, true_answers) == (1, 1, 0)  # the handler's flush: False
    assert (ok, flushes, later) == (1, 1, 1)  # the interrupted one ran the only helper


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer (POSIX)")
def test_flushes_from_a_timer_signal_s_handler_during_flushes_complete(tmp_path: Path) -> None:
    """The main thread flushes in a loop while a timer signal every 2 ms runs a handler
    that flushes too: every flush returns, none hangs the process."""
    out = _run_child(
        tmp_path,
        """
        handled, busy = [0, 0], [False]

        def on_alarm(signum, frame):
            if busy[0]:  # a signal that comes during the handler's own flush
                return
            busy[0] = True
            try:
                handled[0] += 1
                handled[1] += telemetry.flush(1)
            finally:
                busy[0] = False

        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
        flushed = 0
        while flushed < 300 or handled[0] < 100:
            telemetry.flush(1)
            flushed += 1
        signal.setitimer(signal.ITIMER_REAL, 0)
        print(flushed, handled[0], handled[1], int(telemetry.flush(5)))
        telemetry.shutdown(5)
        """,
    )
    flushed, handled, handled_ok, last = map(int, out)
    assert flushed >= 300
    assert handled >= 100
    assert handled_ok > 0  # those that found no flush in progress on the thread completed
    assert last == 1
