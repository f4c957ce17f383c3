"""Session tracer limits: the shutdown timeout, the pending-session bound, redacted names."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import asynctrace as at
from asynctrace._session_record import Record
from asynctrace._session_tracer import EVICTED, SessionTracer, install
from asynctrace._session_writer import SessionWriter


def records(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of a sessions file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "asynctrace" and r.levelno == logging.WARNING and text in r.getMessage()
    ]


# -- a writer that does not finish within the shutdown timeout ---------------------------

_EXIT_CHILD = textwrap.dedent(
    """
    import sys

    import asynctrace as at

    count = int(sys.argv[2])
    telemetry = at.configure(
        {
            "output_dir": sys.argv[1],
            "shutdown_timeout_s": 0.01,
            "session_tracer": {"enabled": True},
        }
    )
    print(telemetry.sessions.path, flush=True)
    with at.task_scope(1):
        for _ in range(count):
            with at.session_scope():
                pass
    # a normal return: the exit hook shuts the tracer down within 0.01 s
    """
)

_NOT_WRITTEN = re.compile(r"(\d+) session records were not written .* (\d+) more were being")


def test_records_a_writer_could_not_write_before_exit_are_counted_and_logged(
    tmp_path: Path,
) -> None:
    """At exit the daemon writer is stopped wherever it is: what it had not written by the
    end of ``shutdown_timeout_s`` is logged with its number (and the key to raise), and that
    number with the lines in the file accounts for every session."""
    count = 60_000
    result = subprocess.run(
        [sys.executable, "-c", _EXIT_CHILD, str(tmp_path), str(count)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    path = Path(result.stdout.splitlines()[0])
    found = _NOT_WRITTEN.search(result.stderr)
    assert found is not None, result.stderr[-2000:]
    assert "shutdown_timeout_s" in result.stderr
    unwritten, in_flight = int(found[1]), int(found[2])
    assert unwritten > 0
    lines = len(path.read_text().splitlines()) if path.exists() else 0
    # The chunk being written when the process ended may or may not have reached the file.
    assert count - in_flight <= lines + unwritten <= count


def test_shutdown_past_its_timeout_counts_what_the_writer_did_not_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``shutdown()`` past its timeout returns ``False``; the writer stops after the chunk
    it is writing, and every record is either in the file (``written``) or counted in
    ``failed``, as the warning says."""
    path = tmp_path / "sessions-r0.jsonl"
    tracer = SessionTracer(path, run_id="t")
    count = 100_000
    for task in range(count):
        tracer.register(task)
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        assert tracer.shutdown(0.0) is False
    (message,) = _warnings(caplog, "were not written")
    found = _NOT_WRITTEN.search(message)
    assert found is not None
    failed = tracer.stats()["failed"]
    assert failed == int(found[1]) > 0
    tracer._writer._thread.join(60)  # it ends after its chunk in flight
    assert not tracer._writer._thread.is_alive()
    stats = tracer.stats()
    assert stats["failed"] == failed
    assert stats["written"] + stats["failed"] == count
    assert len(records(path)) == stats["written"]
    assert tracer.shutdown(5.0) is True  # said once: nothing more failed since
    assert len(_warnings(caplog, "were not written")) == 1


# -- the bound on pending sessions -------------------------------------------------------


def test_past_max_pending_the_oldest_sessions_are_written_as_pending_evicted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Sessions nobody finalizes stop at ``max_pending``: the oldest are written as
    ``pending`` with the reason ``evicted``, counted, warned about once; their task entries
    go with them, and a later event for one of them is dropped and counted."""
    path = tmp_path / "sessions-r0.jsonl"
    tracer = SessionTracer(path, run_id="t", max_pending=1_000)
    previous = install(tracer)
    try:
        ids: list[str] = []
        with caplog.at_level(logging.WARNING, logger="asynctrace"):
            for first in range(0, 2_500, 250):  # with time for the writer to keep up
                ids += [tracer.register(task) for task in range(first, first + 250)]
                assert tracer.flush(10.0)
        stats = tracer.stats()
        assert stats["live_sessions"] <= 1_000
        assert stats["live_tasks"] == stats["live_sessions"]
        assert stats["evicted"] == 2_500 - stats["live_sessions"]
        assert len(_warnings(caplog, "session_tracer.max_pending")) == 1
        evicted = stats["evicted"]
        tracer.count(ids[0], "tokens", 1)  # the first one went first
        assert tracer.stats()["dropped_events"] == 1
        assert tracer.finalize(ids[-1], None, "accepted", None) == 1  # the newest is live
        assert tracer.flush(10.0)
        written = records(path)
        gone = [r for r in written if r["status"] == "pending"]
        assert len(gone) == evicted
        assert {r["reason"] for r in gone} == {EVICTED}
        assert [r["session_id"] for r in gone] == ids[:evicted]  # oldest first, in order
        assert [r["task_id"] for r in gone] == list(range(evicted))
    finally:
        install(previous)
        tracer.shutdown(10.0)
    assert tracer.stats()["failed"] == 0


def test_records_with_no_room_in_the_writer_queue_are_counted_not_kept(tmp_path: Path) -> None:
    """A room given with records refuses only what goes past it, counted in ``failed``,
    as the writer's own bound does."""
    path = tmp_path / "sessions-r0.jsonl"
    writer = SessionWriter(path, rank=0, role=None, run_id="t", flush_threshold=10**9)
    try:
        assert writer.add([Record(f"f{i}", i, 1) for i in range(50)], "accepted", None, 2) == 0
        evicted = [Record(f"e{i}", i, 1) for i in range(10)]
        assert (writer.add(evicted, "pending", EVICTED, 2, 20), writer.failed) == (10, 10)
        fitting = [Record(f"g{i}", i, 1) for i in range(5)]
        assert writer.add(fitting, "pending", EVICTED, 2, 60) == 0
    finally:
        assert writer.shutdown(30.0) is False  # ten were not written
    assert writer.written == 55
    assert [r["session_id"][0] for r in records(path)] == ["f"] * 50 + ["g"] * 5


def test_memory_stays_bounded_when_no_session_is_ever_finalized(tmp_path: Path) -> None:
    """A program that never finalizes (a lost finalize call) registers on and on: pending
    sessions, their task entries and the records waiting for the writer all stay bounded."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", run_id="t", max_pending=2_000)
    tracemalloc.start()
    try:
        for task in range(10_000):
            tracer.register(task)
        early = tracemalloc.get_traced_memory()[0]
        for task in range(10_000, 80_000):
            tracer.register(task)
        late = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        stats = tracer.stats()
        tracer.shutdown(30.0)
    assert stats["live_sessions"] <= 2_000
    assert stats["live_tasks"] <= 2_000
    # 70,000 more sessions kept would take some 40 MB.
    assert late - early < 4 * 2**20, (early, late)
    final = tracer.stats()
    assert final["written"] + final["failed"] == 80_000


def test_max_pending_is_not_reached_by_sessions_that_are_finalized(tmp_path: Path) -> None:
    """Finalized sessions never count towards the bound, however many there are."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", run_id="t", max_pending=10)
    try:
        for task in range(500):
            session_id = tracer.register(task)
            tracer.finalize(session_id, None, "accepted", None)
        assert tracer.stats()["evicted"] == 0
    finally:
        assert tracer.shutdown(10.0)
    assert {r["status"] for r in records(tmp_path / "sessions-r0.jsonl")} == {"accepted"}


# -- names written redacted --------------------------------------------------------------


def test_task_ids_and_counter_names_are_written_redacted(tracer: SessionTracer) -> None:
    """A string task id and a counter name lose URL userinfo and secret values, as
    exception text does; plain ones are kept, and names that redact alike add up."""
    with at.task_scope("https://u:SECRET5@h.example/item?access_token=SECRET6"):
        with at.session_scope():
            at.increment_counter("token=SECRET8", 2)
            at.increment_counter("token=SECRET9", 3)
            at.increment_counter("output_tokens", 7)
            at.trace_session_event("finalized", status="accepted")
    with at.task_scope("prompt-3"), at.session_scope():
        at.increment_counter("output_tokens")
        at.trace_session_event("finalized", status="accepted")
    with at.task_scope(12), at.session_scope():
        at.trace_session_event("finalized", status="accepted")
    assert tracer.flush(5.0)
    text = Path(tracer.path).read_text()
    assert "SECRET" not in text
    first, second, third = records(Path(tracer.path))
    assert first["task_id"] == "https://h.example/item?access_token=REDACTED"
    assert first["counters"] == {"token=REDACTED": 5, "output_tokens": 7}
    assert (second["task_id"], second["counters"]) == ("prompt-3", {"output_tokens": 1})
    assert third["task_id"] == 12


def test_a_name_found_plain_is_redacted_once_its_word_is_registered_secret(
    tracer: SessionTracer,
) -> None:
    """Remembered plain names are forgotten when ``register_secret_words`` widens what is
    secret."""
    name = "hushword=abc123"
    for _ in range(2):
        with at.task_scope(name), at.session_scope():
            at.trace_session_event("finalized", status="accepted")
        assert tracer.flush(5.0)
        at.register_secret_words(["hushword"])
    before, after = records(Path(tracer.path))
    assert before["task_id"] == name
    assert after["task_id"] == "hushword=REDACTED"


def test_max_pending_is_a_configuration_key_and_a_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``session_tracer.max_pending`` (or ``ASYNCTRACE_SESSION_TRACER_MAX_PENDING``) sets the
    bound; a value below 1 names the key."""
    monkeypatch.setenv("ASYNCTRACE_SESSION_TRACER_MAX_PENDING", "7")
    assert at.TelemetryConfig.from_env().session_tracer.max_pending == 7
    with pytest.raises(at.ConfigurationError, match=r"^session_tracer\.max_pending: 0 "):
        at.TelemetryConfig.from_mapping({"session_tracer": {"max_pending": 0}})
    config = {"output_dir": str(tmp_path), "session_tracer": {"enabled": True, "max_pending": 50}}
    telemetry = at.configure(config)
    try:
        for task in range(120):
            with at.task_scope(task), at.session_scope():
                pass  # never finalized
        stats = telemetry.sessions.stats()
        assert stats["live_sessions"] <= 50
        assert stats["evicted"] >= 70
    finally:
        telemetry.shutdown()
