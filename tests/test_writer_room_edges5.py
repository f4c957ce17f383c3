"""The session writer's bound counts the records it holds: each chunk written makes room
while it works through a backlog, and a new episode of refusals after it caught up is
warned about again (at most once a minute). Also: AReaL's ``PerfTracer`` refuses a rank
that is not an integer with a ConfigurationError, and the warning about a file shared
by two processes shows an ``init_worker`` call that works as written."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from _shared_file import append_from_another_process

import asynctrace
from asynctrace import _session_writer, _session_writer_room
from asynctrace._files import AppendFile
from asynctrace._session_tracer import SessionTracer
from asynctrace._session_writer import MIN_QUEUED

_BOUND = MIN_QUEUED  # the default max_pending too


class _Disk:
    """The tracer's file, answering writes only as the test allows (a hung mount).

    ``hang_after(n)``: *n* more writes go through, then writes wait until the next
    ``hang_after`` or ``answer``; ``hung`` counts the times a write started waiting.
    """

    def __init__(self, tracer: SessionTracer) -> None:
        out = tracer._writer._file
        self._write = out.write
        self._cond = threading.Condition()
        self._allowed: int | None = None
        self.hung = 0
        out.write = self._gated  # type: ignore[method-assign]

    def _gated(self, data: bytes, lines: int | None = None) -> tuple[int, OSError | None]:
        with self._cond:
            if self._allowed == 0:
                self.hung += 1
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._allowed != 0)
            if self._allowed is not None:
                self._allowed -= 1
        return self._write(data, lines)

    def hang_after(self, writes: int) -> None:
        with self._cond:
            self._allowed = writes
            self._cond.notify_all()

    def answer(self) -> None:
        with self._cond:
            self._allowed = None
            self._cond.notify_all()

    def wait_hung(self, times: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.hung >= times, 30.0)


def _finalize(tracer: SessionTracer, count: int) -> None:
    for i in range(count):
        tracer.finalize(tracer.register(i), None, "accepted", None)


def _full_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
        and "further finished sessions are not kept" in r.getMessage()
    ]


def test_each_chunk_written_makes_room_while_the_backlog_drains(tmp_path: Path) -> None:
    """The mount answers again, writes part of the backlog and hangs again: the sessions
    finalized meanwhile are kept up to what was written (not refused until the whole
    backlog is written), and past that the records held stay at the bound."""
    path = tmp_path / "sessions-r0.jsonl"
    tracer = SessionTracer(path, run_id="t", flush_threshold=10)
    disk = _Disk(tracer)
    total = 0
    try:
        disk.hang_after(0)
        _finalize(tracer, 20)  # the writer takes them and hangs in its first write
        assert disk.wait_hung(1)
        _finalize(tracer, _BOUND)
        total = 20 + _BOUND
        refused = tracer.stats()["failed"]
        assert refused == 20  # as many as the bound are held
        disk.hang_after(50)  # 50 writes (the hung one, then 49 chunks), then it hangs again
        assert disk.wait_hung(2)
        stats = tracer.stats()
        written = stats["written"]
        assert written >= 20 + 49 * 32  # 32 records a chunk, more when starved
        # Room for what was written: these are all kept.
        _finalize(tracer, 1_000)
        total += 1_000
        assert tracer.stats()["failed"] == refused
        # Past it, refused: the records held (waiting, or in the backlog and the chunk
        # being written) are the bound, no more.
        _finalize(tracer, written)
        total += written
        stats = tracer.stats()
        assert stats["failed"] > refused
        assert stats["written"] == written
        assert total - stats["failed"] - stats["written"] == _BOUND
    finally:
        disk.answer()
    assert tracer.flush(30.0) is False  # records were refused since the last flush
    assert tracer.shutdown(30.0) is True
    stats = tracer.stats()
    assert stats["written"] + stats["failed"] == total
    with path.open("rb") as lines:
        assert sum(1 for _ in lines) == stats["written"]


@pytest.mark.parametrize("interval", [0.0, 3600.0], ids=["interval-past", "within-interval"])
def test_a_new_episode_of_refusals_is_warned_about_again_at_most_once_an_interval(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    interval: float,
) -> None:
    """One warning an episode (refusals until the writer has written all it held), a
    second episode warned about again ("again", with the refusals in all), unless the
    last warning is more recent than the interval."""
    monkeypatch.setattr(_session_writer_room, "_WARN_FULL_EVERY_S", interval)
    bound = 2_000  # a smaller floor than MIN_QUEUED: two fills stay quick
    monkeypatch.setattr(_session_writer, "MIN_QUEUED", bound)
    caplog.set_level(logging.WARNING, logger="asynctrace")
    path = tmp_path / "sessions-r0.jsonl"
    tracer = SessionTracer(path, run_id="t", flush_threshold=10, max_pending=bound)
    disk = _Disk(tracer)
    try:
        for episode in (1, 2):
            disk.hang_after(0)
            _finalize(tracer, 10)  # the writer takes them and hangs
            assert disk.wait_hung(episode)
            _finalize(tracer, bound + 30)  # 10 + 30 refused: the bound less the 10 held
            assert len(_full_warnings(caplog)) == (1 if interval else episode)
            disk.answer()
            assert tracer.flush(30.0) is False  # caught up: everything held is written
            assert tracer.flush(30.0) is True
        assert tracer.stats()["failed"] == 80
    finally:
        disk.answer()
        assert tracer.shutdown(30.0) is True
    warnings = _full_warnings(caplog)
    # Logged at an episode's first refusal, with the refusals in all.
    assert "(1 refused so far" in warnings[0]
    assert "session_tracer.max_pending" in warnings[0]
    if not interval:
        assert "are again held" in warnings[1]
        assert "(41 refused so far" in warnings[1]


# AReaL's PerfTracer: a rank that is not an integer


def _areal_config(root: Path) -> Any:
    loader = pytest.importorskip("_areal_loader")
    return loader.PerfTracerConfig(
        experiment_name="e",
        trial_name="t",
        fileroot=str(root),
        enabled=True,
        session_tracer=loader.SessionTracerConfig(enabled=True, flush_threshold=1),
    )


@pytest.mark.parametrize("rank", ["1", "", 1.0, True, -1, None])
def test_a_perf_tracer_rank_that_is_no_integer_is_a_configuration_error(
    tmp_path: Path, rank: Any
) -> None:
    """AReaL's own ``rank < 0`` raises TypeError for ``"1"``: here every rank that is not
    a non-negative integer is refused when the tracer is built, naming rank."""
    ours = pytest.importorskip("asynctrace_contrib.areal")
    config = _areal_config(tmp_path)
    try:
        with pytest.raises(asynctrace.ConfigurationError) as refused:
            ours.configure(config, rank=rank)
        message = str(refused.value)
        assert message.startswith(f"rank: {rank!r} is not accepted; accepted: an integer >= 0")
        with pytest.raises(asynctrace.ConfigurationError, match=r"^rank: "):
            ours.PerfTracer(config, rank=rank)  # the tracer alone too (AReaL: a ValueError)
        tracer = ours.configure(config, rank=1)  # an integer is as before
        assert tracer.rank == 1
    finally:
        ours.reset()


# Two processes of one rank: the warning's advice works as written


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs flock")
def test_the_shared_file_warning_shows_an_init_worker_call_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "traces-r0.jsonl"
    mine = AppendFile(path)
    try:
        run = append_from_another_process(path)
    finally:
        mine.close()
    assert run.returncode == 0, run.stderr
    advice = "init_worker(config, rank=..., world_size=...)"
    assert advice in run.stderr
    # Followed as written (no launcher variables), it configures a rank of its own.
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    telemetry = asynctrace.init_worker({"enabled": False}, rank=3, world_size=4)
    try:
        assert (telemetry.settings.rank, telemetry.settings.world_size) == (3, 4)
    finally:
        telemetry.shutdown()
    assert json.loads(path.read_text().splitlines()[-1]) == {"who": "other"}
