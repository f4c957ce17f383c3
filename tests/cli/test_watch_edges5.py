"""``asynctrace watch``: output that is not a terminal, SIGTERM, deleted files, steps in
time order, and ranks of one name in different directories."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asynctrace.cli._follower import Follower
from asynctrace.cli._watch_state import State
from asynctrace.cli._watch_view import render
from asynctrace.cli.watch import _poll

pytest.importorskip("rich")

WAIT = 60.0  # a bound for a loaded host, never reached when the view works


def _step(rank: int, iteration: int, at: float, **fields: object) -> str:
    step = {"kind": "step", "name": "rl.step", "iteration": iteration, "rank": rank,
            "wall_s": 1.0, "productive_s": 1.0, "leaves": 1,
            "spans": {f"r{rank}.span{iteration}": 1.0}, "time": at}  # fmt: skip
    return json.dumps({**step, **fields}) + "\n"


def _replace(path: Path, text: str) -> None:
    """Write *path* whole at once: a poll never sees half of it."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _view(state: State, directory: Path, show: int = 15, now: float = 0.0) -> str:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=300, color_system=None).print(
        render(state, directory, 60.0, show, now or time.time())
    )
    return out.getvalue()


def _wait_for(path: Path, pattern: str, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace")
        if re.search(pattern, content):
            return content
        assert process.poll() is None, content
        time.sleep(0.02)
    raise AssertionError(f"{pattern!r} never written: {path.read_text(errors='replace')!r}")


# -- output that is not a terminal, SIGTERM --------------------------------------------------


def test_a_view_is_printed_per_change_to_a_file_and_sigterm_leaves_with_status_0(
    tmp_path: Path,
) -> None:
    """``watch DIR > log``: each poll that changed the view prints it once (no redraw, no
    repeat when nothing changed), while it runs; SIGTERM ends it like Ctrl-C, status 0."""
    run = tmp_path / "run"
    run.mkdir()
    goodput = run / "goodput-r0.jsonl"
    now = time.time()
    _replace(goodput, _step(0, 1, now))
    log, errors = tmp_path / "watch.log", tmp_path / "watch.err"
    with log.open("wb") as out, errors.open("wb") as err:
        watch = subprocess.Popen(
            [sys.executable, "-m", "asynctrace", "watch", str(run), "--interval", "0.05"],
            stdout=out,
            stderr=err,
            env=dict(os.environ, COLUMNS="200"),
        )
    try:
        _wait_for(log, r"steps\s+finished: 1\s", watch)
        _replace(goodput, _step(0, 1, now) + _step(0, 2, now))
        _wait_for(log, r"steps\s+finished: 2\s", watch)
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=WAIT)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, errors.read_text()
    assert errors.read_text() == ""
    text = log.read_text()
    assert text.count("asynctrace watch ") == 2, text  # one view per change
    assert "\x1b" not in text  # plain text: no cursor movement, no colour


def test_sigterm_in_a_terminal_leaves_the_last_view_with_status_0(tmp_path: Path) -> None:
    """On a terminal (a pty), SIGTERM (``timeout``, a batch scheduler) leaves like Ctrl-C:
    the last view stays drawn and the status is 0, not death by the signal."""
    pexpect = pytest.importorskip("pexpect")
    (tmp_path / "goodput-r0.jsonl").write_text(_step(0, 1, time.time()))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="140", LINES="60")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "asynctrace", "watch", str(tmp_path), "--interval", "0.05"],
        env=env,
        dimensions=(60, 140),
        timeout=WAIT,
    )
    try:
        child.expect(r"steps finished: 1 ")
        child.kill(signal.SIGTERM)
        child.expect(pexpect.EOF)
        child.close()
    finally:
        child.close(force=True)
    assert (child.exitstatus, child.signalstatus) == (0, None)


# -- a deleted file ---------------------------------------------------------------------------


def test_a_deleted_file_no_longer_counts(tmp_path: Path) -> None:
    """What a deleted goodput or sessions file gave leaves the totals, the steps shown and the
    ranks; it is never shown as a rank that stopped writing."""
    now = time.time()
    for rank in (0, 1):
        (tmp_path / f"goodput-r{rank}.jsonl").write_text(
            "".join(_step(rank, i, now + rank) for i in range(3))
        )
        (tmp_path / f"sessions-r{rank}.jsonl").write_text(
            json.dumps({"status": "accepted", "generate_s": 0.5}) + "\n"
        )
    followers: dict[Path, Follower] = {}
    state = State()
    _poll(tmp_path, followers, state)
    assert (state.total_steps, len(state.ranks), state.wall) == (6, 2, 6.0)
    (tmp_path / "goodput-r1.jsonl").unlink()
    (tmp_path / "sessions-r1.jsonl").unlink()
    _poll(tmp_path, followers, state)
    assert (state.total_steps, len(state.ranks), state.wall) == (3, 1, 3.0)
    assert [state.label(path) for path, _, _ in state.steps] == ["r0"] * 3
    assert state.statuses == {"accepted": 1}
    assert len(state.phases["generate_s"]) == 1
    assert sorted(p.name for p in followers) == ["goodput-r0.jsonl", "sessions-r0.jsonl"]
    view = _view(state, tmp_path, now=now + 3600)
    assert "r1" not in view
    assert "r0: stopped writing" in view


# -- steps in time order ----------------------------------------------------------------------


def test_the_latest_steps_are_the_latest_in_time_whichever_file(tmp_path: Path) -> None:
    """A rank behind the others (a file name sorted last) never hides their latest steps: the
    steps shown, and the last step whose slowest spans are shown, follow the lines' time."""
    (tmp_path / "goodput-r0.jsonl").write_text("".join(_step(0, i, 2000 + i) for i in (10, 11)))
    (tmp_path / "goodput-r1.jsonl").write_text("".join(_step(1, i, 1000 + i) for i in (1, 2)))
    followers: dict[Path, Follower] = {}
    state = State()
    _poll(tmp_path, followers, state)
    assert [(state.label(p), s["iteration"]) for p, _, s in state.steps] == [
        ("r1", 1),
        ("r1", 2),
        ("r0", 10),
        ("r0", 11),
    ]
    # a later poll: r1 catches up past r0, r0 writes one more older than r1's; merged by time
    with (tmp_path / "goodput-r0.jsonl").open("a") as out:
        out.write(_step(0, 12, 2012))
    with (tmp_path / "goodput-r1.jsonl").open("a") as out:
        out.write(_step(1, 3, 3003))
    _poll(tmp_path, followers, state)
    assert [(state.label(p), s["iteration"]) for p, _, s in state.steps][-3:] == [
        ("r0", 11),
        ("r0", 12),
        ("r1", 3),
    ]
    view = _view(state, tmp_path, show=2)
    assert "slowest leaf spans of the last step (r1, iteration 3)" in view
    assert "r1.span3" in view


# -- ranks of one name in different directories ----------------------------------------------


def test_files_of_one_name_in_different_directories_are_told_apart(tmp_path: Path) -> None:
    """``watch`` follows DIR's subdirectories: two runs' ``goodput-driver-r0.jsonl`` are
    labelled by their paths under DIR; a name no other file has keeps its short label."""
    now = time.time()
    (tmp_path / "a").mkdir()
    (tmp_path / "goodput-driver-r1.jsonl").write_text(_step(1, 1, now - 1))
    (tmp_path / "a" / "goodput-driver-r0.jsonl").write_text(_step(0, 1, now) + '{"kind":"end"}\n')
    followers: dict[Path, Follower] = {}
    state = State()
    _poll(tmp_path, followers, state)
    assert sorted(rank.label for rank in state.ranks.values()) == ["driver-r0", "driver-r1"]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "goodput-driver-r0.jsonl").write_text(_step(0, 2, now + 1))
    _poll(tmp_path, followers, state)
    labels = sorted(rank.label for rank in state.ranks.values())
    assert labels == ["a/driver-r0", "b/driver-r0", "driver-r1"]
    view = _view(state, tmp_path)
    assert "a/driver-r0: finished (1 steps)" in view
    assert "slowest leaf spans of the last step (b/driver-r0, iteration 2)" in view
    rows = [line.split()[0] for line in view.splitlines() if "rl.step" in line]
    assert rows == ["driver-r1", "a/driver-r0", "b/driver-r0"]
