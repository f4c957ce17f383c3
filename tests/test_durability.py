"""``flush()`` makes the files durable: ``fdatasync`` after the lines it waits for.

The real writers and files; the only stand-in is a recorder around the
``fdatasync`` call itself, which reads the file at that moment (so the test
sees what a power loss right after it would keep), or fails as a disk would.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import asynctrace as at
from asynctrace import _files


class Syncs:
    """Each ``fdatasync``: the file's path and its lines at that moment."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str]]] = []
        self.fail = False

    def __call__(self, fd: int) -> None:
        if self.fail:
            raise OSError(errno.EIO, "Input/output error")
        path = os.readlink(f"/proc/self/fd/{fd}")
        self.seen.append((path, Path(path).read_text().splitlines()))
        os.fsync(fd)

    def of(self, path: Path) -> list[list[str]]:
        """The lines *path* held at each of its syncs."""
        return [lines for name, lines in self.seen if name == str(path.absolute())]


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Syncs:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to name a descriptor's file")
    recorder = Syncs()
    monkeypatch.setattr(_files, "_datasync", recorder)
    return recorder


def _configure(tmp_path: Path, threshold: int = 32) -> at.Telemetry:
    return at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "session_tracer": {"enabled": True, "flush_threshold": threshold},
        }
    )


def _session(task: int) -> None:
    with at.task_scope(task), at.session_scope(), at.managed_span("generation", f"gen-{task}"):
        at.trace_session_event("finalized", status="accepted")


def test_flush_syncs_the_trace_and_the_sessions_after_their_lines(
    tmp_path: Path, syncs: Syncs
) -> None:
    telemetry = _configure(tmp_path)
    try:
        _session(1)
        assert telemetry.flush(10)
        traces = syncs.of(telemetry.trace_file)  # type: ignore[arg-type]
        sessions = syncs.of(tmp_path / "sessions-r0.jsonl")
        assert traces
        assert any('"gen-1"' in line for line in traces[-1])
        assert sessions
        assert any('"task_id":1' in line for line in sessions[-1])
    finally:
        telemetry.shutdown()


def test_flush_syncs_sessions_the_threshold_wrote_already(tmp_path: Path, syncs: Syncs) -> None:
    """A record written by the threshold, before the flush, is still made durable by it."""
    telemetry = _configure(tmp_path, threshold=1)
    try:
        _session(7)
        path = tmp_path / "sessions-r0.jsonl"
        for _ in range(500):  # the writer takes it on its own (threshold 1)
            if '"task_id":7' in path.read_text():
                break
            os.sched_yield()
        before = len(syncs.of(path))
        assert telemetry.flush(10)
        after = syncs.of(path)
        assert len(after) > before
        assert any('"task_id":7' in line for line in after[-1])
    finally:
        telemetry.shutdown()


def test_a_disk_that_cannot_sync_fails_that_flush_once(tmp_path: Path, syncs: Syncs) -> None:
    telemetry = _configure(tmp_path)
    try:
        syncs.fail = True
        _session(2)
        assert not telemetry.flush(10)
        syncs.fail = False
        _session(3)
        assert telemetry.flush(10)
    finally:
        telemetry.shutdown()
