"""The session writer's queue is bounded: a write that never returns (a hung NFS or
Lustre mount) refuses finished records past ``max_pending``, counts and warns, and
records flow again once the write returns."""

from __future__ import annotations

import json
import logging
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from _hung_writes import hang_writes

from asynctrace._session_tracer import SessionTracer
from asynctrace._session_writer import MIN_QUEUED

_BOUND = MIN_QUEUED  # the default max_pending too


def records(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of a sessions file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "asynctrace" and r.levelno == logging.WARNING and text in r.getMessage()
    ]


def _queued(tracer: SessionTracer) -> int:
    writer = tracer._writer
    with writer._lock:
        return len(writer._pending) + len(writer._batch)


def test_a_hung_write_bounds_the_queue_counts_the_loss_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Finished sessions behind a writer stuck in ``write``: at most ``max_pending``
    are kept, the rest are counted in ``failed`` and warned about once, memory stays
    bounded, and once the write returns every kept record and every new one is
    written."""
    path = tmp_path / "sessions-r0.jsonl"
    tracer = SessionTracer(path, run_id="t", flush_threshold=10)
    gate, inside = hang_writes(tracer._writer._file)
    past = 20_000  # finalized once the queue is full
    finished = _BOUND + 1_000 + past
    try:
        caplog.set_level(logging.WARNING, logger="asynctrace")
        for i in range(20):  # the writer takes a batch and hangs in its first write
            tracer.finalize(tracer.register(i), None, "accepted", None)
        assert inside.wait(30.0)
        for i in range(20, finished - past):
            tracer.finalize(tracer.register(i), None, "accepted", None)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(past):
                tracer.finalize(tracer.register(i), None, "accepted", None)
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        stats = tracer.stats()
        kept = finished - stats["failed"]  # queued, or in the write that hangs
        assert _queued(tracer) <= kept <= _BOUND
        assert stats["written"] == 0
        # Past the bound memory stays put; kept, the 20,000 records would take ~10 MB.
        assert grown < 2_000_000, grown
        assert len(_warnings(caplog, "further finished sessions are not kept")) == 1
        assert "session_tracer.max_pending" in _warnings(caplog, "not kept")[0]
        # A task finalized as a whole is refused the same way (the list path).
        for _ in range(3):
            tracer.register("task")
        assert tracer.finalize(None, "task", "rejected", "stale") == 3
        assert tracer.stats()["failed"] == finished - kept + 3
    finally:
        gate.set()
    assert tracer.flush(30.0) is False  # records were refused since the last flush
    assert tracer.stats()["written"] == kept  # every record kept is written, none lost
    # The writer caught up: records are kept and written again.
    later: list[str] = []
    for _ in range(3):  # flushed as a program would
        for i in range(500):
            later.append(tracer.register(i))
            tracer.finalize(later[-1], None, "accepted", None)
        assert tracer.flush(30.0) is True
    assert tracer.shutdown(30.0) is True
    stats = tracer.stats()
    assert stats["written"] == kept + len(later)
    assert stats["written"] + stats["failed"] == finished + 3 + len(later)
    lines = records(path)
    assert len(lines) == stats["written"]
    assert [r["session_id"] for r in lines[-len(later) :]] == later
    assert len(_warnings(caplog, "further finished sessions are not kept")) == 1


def test_sessions_pending_at_shutdown_are_queued_past_the_bound(tmp_path: Path) -> None:
    """At shutdown the sessions still pending (``max_pending`` at most already) are all
    queued, even behind a full queue: a writer that catches up within the shutdown
    timeout writes them."""
    path = tmp_path / "sessions-r0.jsonl"
    tracer = SessionTracer(path, run_id="t", flush_threshold=10)
    gate, inside = hang_writes(tracer._writer._file)
    try:
        for i in range(_BOUND + 500):  # fills the queue, and refuses the rest
            tracer.finalize(tracer.register(i), None, "accepted", None)
        assert inside.wait(30.0)
        open_ids = [tracer.register(i) for i in range(500)]
        tracer.finalize_all_pending("unfinished at shutdown")
        assert _queued(tracer) > _BOUND
    finally:
        gate.set()
    assert tracer.shutdown(30.0) is False  # the refused ones
    lines = records(path)
    pending = [r["session_id"] for r in lines if r["status"] == "pending"]
    assert pending == open_ids
    assert tracer.stats()["written"] + tracer.stats()["failed"] == _BOUND + 500 + len(open_ids)
