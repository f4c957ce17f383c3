"""Runtime edges: what a shutdown stops first."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import asynctrace as at
from asynctrace import _session_tracer
from asynctrace._running import shutdown
from asynctrace._state import GATE


@pytest.fixture(autouse=True)
def _no_telemetry_left_running() -> Iterator[None]:
    yield
    shutdown(timeout_s=2.0)


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_spans_stop_being_recorded_before_the_session_backlog_is_written(
    tmp_path: Path, provider: str
) -> None:
    """Sessions closed first, while spans still recorded: code running on during the
    shutdown (a loop the SIGTERM handler lets run on) went on recording spans for as long
    as the session backlog took to write, which the span shutdown then had to write too
    (a SIGTERM exit took seconds in a tight loop, and once past the shutdown timeout)."""
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "provider": provider,
            "session_tracer": {"enabled": True, "flush_threshold": 100_000},
        }
    )
    with at.task_scope(1):
        for _ in range(20_000):  # a backlog the session shutdown writes
            with at.session_scope():
                at.trace_session_event("finalized", status="accepted")
    stop = threading.Event()
    late = [0]  # spans recorded with the session tracer gone

    def run_on() -> None:
        while not stop.is_set():
            sessions_gone = _session_tracer.current_tracer() is None
            with at.managed_span("generation", "busy"):
                pass
            late[0] += sessions_gone and bool(GATE.enabled)

    thread = threading.Thread(target=run_on)
    thread.start()
    try:
        assert telemetry.shutdown(timeout_s=10)
    finally:
        stop.set()
        thread.join()
    assert late[0] <= 1, f"{late[0]} spans recorded while the session backlog was written"
