"""Output files: a rank passed alone, processes sharing a file, an unreadable torn tail,
new directory entries made durable, a rotated file not counted lost."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _shared_file import append_from_another_process

import asynctrace
from asynctrace import ConfigurationError, configure, managed_span
from asynctrace._files import AppendFile
from asynctrace._rank_env import env_rank

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and flock")


def _records(tmp: Path, tag: str, count: int = 5) -> None:
    for i in range(count):
        with managed_span("generation", f"{tag}-{i}"), asynctrace.session_scope():
            asynctrace.trace_session_event("finalized", status="accepted")


def _config(out: Path) -> dict[str, object]:
    return {
        "enabled": True,
        "span_groups": "all",
        "exporters": ["chrome"],
        "output_dir": str(out),
        "session_tracer": {"enabled": True},
    }


# 1. init_worker(config, rank=rank), as mp.spawn workers pass it


def test_a_rank_passed_without_a_world_size_says_to_pass_one() -> None:
    with pytest.raises(ConfigurationError) as alone:
        env_rank({}, rank=3)
    assert "init_worker(config, rank=3, world_size=N)" in str(alone.value)
    one_task_sbatch = {"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}
    with pytest.raises(ConfigurationError) as outer:
        env_rank(one_task_sbatch, rank=3)
    message = str(outer.value)
    assert message.startswith("SLURM_NTASKS: 1 (set by the launcher")
    assert "init_worker(config, rank=3, world_size=N)" in message
    # what the docs show works, inside a one-task allocation too
    assert env_rank(one_task_sbatch, rank=3, world_size=4) == (3, 4)
    assert env_rank({}, rank=0) == (0, 1)
    assert env_rank({"WORLD_SIZE": "8"}, rank=3) == (3, 8)
    with pytest.raises(ConfigurationError, match="without a rank"):
        env_rank({"WORLD_SIZE": "4"})  # every process would be rank 0: still refused


def test_init_worker_with_the_rank_and_world_size_an_mp_spawn_worker_knows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "1")
    with pytest.raises(ConfigurationError, match=r"world_size=N"):
        asynctrace.init_worker({"enabled": False}, rank=3)
    telemetry = asynctrace.init_worker({"enabled": False}, rank=3, world_size=4)
    assert (telemetry.settings.rank, telemetry.settings.world_size) == (3, 4)
    telemetry.shutdown()


# 2. two processes of one rank: one file, one warning


def test_a_second_process_on_the_same_file_is_warned_once(tmp_path: Path) -> None:
    path = tmp_path / "traces-r0.jsonl"
    mine = AppendFile(path)
    try:
        run = append_from_another_process(path)
        assert run.returncode == 0, run.stderr
        assert run.stderr.count("is being written by another process too") == 1
        assert str(path) in run.stderr
        assert "own rank" in run.stderr
    finally:
        mine.close()
    # the first process gone, the file is free: no warning
    again = append_from_another_process(path)
    assert again.returncode == 0
    assert "another process" not in again.stderr
    assert path.read_bytes().count(b'"other"') == 2  # written all the same


def _in_child(body: str, *, wait: bool = True) -> tuple[int, str]:
    """Fork; the child runs *body* (a callable's name in this module's globals) and
    sends what it logged back through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read)
            stream = os.fdopen(write, "w")
            handler = logging.StreamHandler(stream)
            logging.getLogger("asynctrace").addHandler(handler)
            globals()[body]()
            handler.flush()
            stream.flush()
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    if not wait:
        return pid, ""
    with os.fdopen(read) as got:
        text = got.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return pid, text


_CHILD_CONFIG: dict[str, object] = {}


def _child_configures_itself() -> None:
    child = asynctrace.init_worker(_CHILD_CONFIG)
    child.shutdown(5)


def test_a_forked_child_configuring_the_parents_rank_is_warned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    _CHILD_CONFIG.clear()
    _CHILD_CONFIG.update(_config(tmp_path))
    parent = asynctrace.init_worker(_CHILD_CONFIG)
    try:
        _, logged = _in_child("_child_configures_itself")
    finally:
        parent.shutdown(5)
    assert f"{tmp_path / 'traces-r0.jsonl'} is being written by another process" in logged
    assert f"{tmp_path / 'sessions-r0.jsonl'} is being written by another process" in logged


def test_no_warning_for_this_process_again_with_forked_children_alive(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A child forked (not configuring) keeps no lock of the parent's: the parent
    configured again on the same files, while the child lives, is not warned."""
    first = configure(_config(tmp_path))
    read, write = os.pipe()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: waits until the parent says so
        os.close(write)
        os.write(ready_write, b"r")  # past the fork hooks, which closed what it inherited
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    os.close(ready_write)
    os.read(ready_read, 1)  # (a parent configured again within microseconds may be warned)
    os.close(ready_read)
    try:
        first.shutdown(5)
        with caplog.at_level(logging.WARNING, logger="asynctrace"):
            second = configure(_config(tmp_path))
            again = configure(_config(tmp_path))  # the same process, twice: not warned
            again.shutdown(5)
        assert second is not again
        assert "another process" not in caplog.text
    finally:
        os.write(write, b"x")
        os.close(write)
        os.waitpid(pid, 0)


# 3. a torn tail this process may write but not read


def _write_after_unreadable_torn_tail(path: Path) -> None:
    out = AppendFile(path)
    out.write(b'{"b":2}\n', 1)
    out.close()


def test_an_unreadable_torn_tail_is_closed_off() -> None:
    directory = Path(tempfile.mkdtemp(prefix="asynctrace-wo-"))
    try:
        directory.chmod(0o777)
        path = directory / "wo.jsonl"
        path.write_bytes(b'{"a":1}\n{"torn":')
        path.chmod(0o222)  # writable, not readable (root excepted: the child is not root)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                if os.geteuid() == 0:  # root reads anything: write as nobody
                    os.setgid(65534)
                    os.setuid(65534)
                _write_after_unreadable_torn_tail(path)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        path.chmod(0o644)
        lines = [line for line in path.read_bytes().split(b"\n") if line]
        assert lines == [b'{"a":1}', b'{"torn":', b'{"b":2}']
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# 4. a new file's directory entry, and each new directory's, synced at the first flush


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What os.fsync is called on (the real fsync still runs)."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names descriptors by /proc")
def test_the_first_flush_syncs_the_new_entries(tmp_path: Path, synced: list[str]) -> None:
    out = tmp_path / "new" / "run"
    telemetry = configure(_config(out))
    _records(tmp_path, "a")
    assert telemetry.flush(5)
    for directory in (out, out.parent, tmp_path):  # run/ holds the files, new/ holds run/...
        assert str(directory) in synced
    synced.clear()
    _records(tmp_path, "b")
    assert telemetry.flush(5)
    assert not [name for name in synced if os.path.isdir(name)]  # once only
    telemetry.shutdown(5)


# 5. a file renamed away (logrotate) keeps its lines: not lost


def test_a_rotated_file_is_not_counted_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    telemetry = configure(_config(tmp_path))
    _records(tmp_path, "a")
    assert telemetry.flush(5)
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        for name in ("traces-r0.jsonl", "sessions-r0.jsonl"):
            os.rename(tmp_path / name, tmp_path / f"{name}.1")
        _records(tmp_path, "b")
        assert telemetry.flush(5)
    stats = telemetry.stats()
    assert stats["chrome"].lost == 0
    assert telemetry.sessions is not None
    assert telemetry.sessions.stats()["lost"] == 0
    assert caplog.text.count("was renamed away (rotated)") == 2
    assert "went with the old file" not in caplog.text
    # deleted, not renamed: its spans are lost, and said so
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        os.unlink(tmp_path / "traces-r0.jsonl")
        _records(tmp_path, "c")
        assert telemetry.flush(5)
    assert telemetry.stats()["chrome"].lost == 5
    assert "went with the old file" in caplog.text
    assert telemetry.shutdown(5)
    spans = [
        json.loads(line)["name"]
        for name in ("traces-r0.jsonl.1", "traces-r0.jsonl")
        for line in (tmp_path / name).read_text().splitlines()
        if json.loads(line).get("ph") == "X"
    ]
    assert spans == [f"a-{i}" for i in range(5)] + [f"c-{i}" for i in range(5)]
