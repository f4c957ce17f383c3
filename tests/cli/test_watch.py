"""``asynctrace watch``: the live view, in a real pty, against a demo run still writing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from asynctrace.cli._follower import Follower
from asynctrace.cli._watch_state import State
from asynctrace.cli.watch import _poll

from ._helpers import Result

pexpect = pytest.importorskip("pexpect")
pytest.importorskip("rich")

DEMO = (
    "import sys\n"
    "from asynctrace_contrib.demo import run_demo\n"
    "run_demo(sys.argv[1], steps=int(sys.argv[2]), prompts=8)\n"
)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_steps_appear_in_a_pty_as_a_running_demo_finishes_them(tmp_path: Path) -> None:
    """Steps show up one by one while the demo runs; Ctrl-C leaves with status 0."""
    pytest.importorskip("fastapi")
    steps = 40
    demo = subprocess.Popen(
        [sys.executable, "-c", DEMO, str(tmp_path), str(steps)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="140", LINES="60")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "asynctrace", "watch", str(tmp_path), "--interval", "0.1"],
        env=env,
        dimensions=(60, 140),
        timeout=60,
        # Ctrl-C as in a user's terminal: a suite started in the background (`nox ... &` from
        # a script) ignores SIGINT, and every process it starts would inherit that.
        preexec_fn=_default_sigint,
    )
    seen_while_running: set[int] = set()
    seen: set[int] = set()
    try:
        while steps not in seen:
            child.expect(r"steps finished: (\d+)")
            count = int(child.match.group(1))
            seen.add(count)
            if demo.poll() is None:
                seen_while_running.add(count)
        assert demo.wait(60) == 0
        child.expect(r"finished \(40 steps\)")
        child.sendintr()  # Ctrl-C
        child.expect(pexpect.EOF)
        child.close()
    finally:
        if demo.poll() is None:
            demo.kill()
        child.close(force=True)
    assert child.exitstatus == 0
    partial = {n for n in seen_while_running if 0 < n < steps}
    assert len(partial) >= 2, (seen_while_running, seen)  # steps appeared as they finished


def _line(**fields: object) -> str:
    return json.dumps(fields) + "\n"


def test_a_rank_that_stopped_writing_is_shown(tmp_path: Path, run: Callable[..., Result]) -> None:
    """No new line for --stale seconds and no end line: the rank is shown as stopped."""
    old = time.time() - 120
    step = {"kind": "step", "name": "rl.step", "iteration": 3, "wall_s": 2.0,
            "productive_s": 1.0, "overhead_s": 0.5, "idle_s": 0.0, "wasted_s": 0.0,
            "unattributed_s": 0.5, "goodput": 0.5, "spans": {"rl.train": 1.0}, "time": old,
            "exporters": {"chrome": [10, 4, 1]}}  # fmt: skip
    (tmp_path / "goodput-r1.jsonl").write_text(_line(**step))
    os.utime(tmp_path / "goodput-r1.jsonl", (old, old))
    (tmp_path / "goodput-r0.jsonl").write_text(_line(**step) + _line(kind="end", time=old))
    result = run("watch", tmp_path, "--once", "--stale", "30")
    assert result.code == 0
    text = re.sub(r"\s+", " ", result.out)
    assert "steps finished: 2 ranks: 2 goodput: 50.0%" in text
    # 120 s when the file was written; a loaded machine may take a second or two to get here
    assert re.search(r"r1: stopped writing 12[0-9] s ago \(after 1 steps\)", text), text
    assert "r0: finished (1 steps)" in text
    assert "r1: exporter chrome dropped 4, failed 1" in text
    assert "rl.train" in text


def test_the_follower_reads_complete_lines_and_restarts_on_a_new_file(tmp_path: Path) -> None:
    """A torn tail waits for its newline; a replaced file is read from its start."""
    path = tmp_path / "goodput-r0.jsonl"
    path.write_text('{"a": 1}\n{"b"')
    follower = Follower(path)
    assert list(follower.lines()) == [{"a": 1}]
    with path.open("a") as handle:
        handle.write(": 2}\nnot json\n")
    assert list(follower.lines()) == [{"b": 2}]
    path.unlink()
    path.write_text('{"c": 3}\n')
    assert list(follower.lines()) == [{"c": 3}]


def test_lines_the_view_cannot_read_are_skipped_and_counted(
    tmp_path: Path, run: Callable[..., Result]
) -> None:
    """A goodput line whose numbers are strings or NaN, spans or exporters of the wrong
    shape, or no JSON object at all: skipped and counted in the view, which shows the
    good lines (each of these once ended the view with an internal error)."""
    good = {"kind": "step", "name": "rl.step", "iteration": 1, "wall_s": 2.0,
            "productive_s": 1.0, "goodput": 0.5, "spans": {"rl.train": 1.0},
            "time": time.time()}  # fmt: skip
    bad = [
        _line(**{**good, "goodput": "0.5"}),
        _line(**{**good, "productive_s": "x"}),
        _line(**{**good, "spans": {"a": "x"}}),
        _line(**{**good, "exporters": {"chrome": 5}}),
        _line(**{**good, "wall_s": 10**400}),  # an int no float holds
        _line(**good).replace("2.0", "NaN"),
        "garbage\n",
        "[1, 2]\n",
        "[" * 100_000 + "\n",  # nested deeper than the parser goes
    ]
    (tmp_path / "goodput-r0.jsonl").write_text(_line(**good) + "".join(bad))
    result = run("watch", tmp_path, "--once")
    assert result.code == 0, result.err
    text = re.sub(r"\s+", " ", result.out)
    assert "steps finished: 2 ranks: 1 goodput: 50.0%" in text  # (the exporters line's step)
    assert "skipped: 4 lines that are not JSON objects, 5 with fields the view cannot read" in text


def test_not_a_directory_is_an_error(tmp_path: Path, run: Callable[..., Result]) -> None:
    """A missing directory exits with status 2 and one line."""
    result = run("watch", tmp_path / "missing")
    assert result.code == 2
    assert "not a directory" in result.err


def _step(iteration: int, **fields: object) -> str:
    step = {"kind": "step", "name": "rl.step", "iteration": iteration, "wall_s": 2.0,
            "productive_s": 1.0, "overhead_s": 0.5, "idle_s": 0.0, "wasted_s": 0.0,
            "unattributed_s": 0.5, "goodput": 0.5, "leaves": 2, "spans": {"rl.train": 1.0},
            "time": time.time()}  # fmt: skip
    return _line(**{**step, **fields})


def _iterations(follower: Follower) -> list[object]:
    return [line.get("iteration") for line in follower.lines()]


def test_bucket_seconds_that_overflow_the_bar_never_stop_the_view(
    tmp_path: Path, run: Callable[..., Result]
) -> None:
    """Bucket seconds over a tiny wall time draw a full bar (this once ended the view with
    an OverflowError); seconds no step can hold (negative, or more than ``leaves`` times
    the wall time) are skipped and counted."""
    lines = [
        _step(1),
        _step(2, wall_s=1e-300, productive_s=1e300, leaves=None),  # no count to bound it
        _step(3, wall_s=1e-300, productive_s=1e300),  # 2 leaves cannot give 1e300 s
        _step(4, idle_s=-1.0),
        _step(5, leaves=-1),
        _step(6, productive_s=2.0, overhead_s=2.0),  # two leaves over the whole step: possible
    ]
    (tmp_path / "goodput-r0.jsonl").write_text("".join(lines))
    result = run("watch", tmp_path, "--once")
    assert result.code == 0, result.err
    text = re.sub(r"\s+", " ", result.out)
    assert re.search(r"steps finished: 3 ranks: 1 goodput: [\d.]+e\+\d+%", text), text
    assert "skipped: 0 lines that are not JSON objects, 3 with fields the view cannot read" in text
    rows = [row for row in result.out.splitlines() if row.startswith("r0 ")]
    assert [row.split()[1] for row in rows] == ["1", "2", "6"]
    assert rows[1].endswith("█" * 30)  # the bar is full, never longer


def test_a_file_written_anew_in_place_is_read_from_its_start(tmp_path: Path) -> None:
    """A re-run writing the file again on the same inode (truncated and rewritten, longer
    than what was read) is read from its start: no line lost, no torn line counted."""
    path = tmp_path / "goodput-r0.jsonl"
    path.write_text("".join(_step(i) for i in range(3)))
    follower = Follower(path)
    assert _iterations(follower) == [0, 1, 2]
    inode = path.stat().st_ino
    with path.open("w") as handle:  # same inode, new content
        handle.write("".join(_step(i) for i in range(100, 110)))
    assert path.stat().st_ino == inode
    assert _iterations(follower) == list(range(100, 110))
    assert follower.restarted
    assert follower.skipped == 0
    assert _iterations(follower) == []
    assert not follower.restarted


def test_a_file_deleted_and_created_again_is_read_from_its_start(tmp_path: Path) -> None:
    """A re-run into the same directory: the file is deleted and created again between two
    polls (ext4 often gives it the same inode back)."""
    path = tmp_path / "goodput-r0.jsonl"
    path.write_text("".join(_step(i) for i in range(3)))
    follower = Follower(path)
    assert _iterations(follower) == [0, 1, 2]
    path.unlink()
    path.write_text("".join(_step(i) for i in range(100, 110)))
    assert _iterations(follower) == list(range(100, 110))
    assert follower.skipped == 0


def test_copytruncate_rotation_loses_no_line(tmp_path: Path) -> None:
    """Truncated to nothing and grown past the point read before (logrotate's
    copytruncate): every new line is read."""
    path = tmp_path / "goodput-r0.jsonl"
    path.write_text("".join(_step(i) for i in range(4)))
    follower = Follower(path)
    assert _iterations(follower) == [0, 1, 2, 3]
    with path.open("r+") as handle:
        handle.truncate(0)
    with path.open("a") as handle:
        handle.write("".join(_step(i) for i in range(100, 106)))
    assert _iterations(follower) == list(range(100, 106))
    assert follower.skipped == 0


def test_an_appended_file_is_never_read_twice(tmp_path: Path) -> None:
    """Growing by appends only, the file is read on from where it was, never restarted."""
    path = tmp_path / "goodput-r0.jsonl"
    follower = Follower(path)
    read: list[object] = []
    for i in range(50):
        with path.open("a") as handle:
            handle.write(_step(i)[:40] if i % 7 == 0 else _step(i))
        read += _iterations(follower)
        assert not follower.restarted
        if i % 7 == 0:
            with path.open("a") as handle:
                handle.write(_step(i)[40:])
    read += _iterations(follower)
    assert read == list(range(50))


def _totals(state: State) -> tuple[int, int, float, int, int]:
    return (state.total_steps, sum(state.statuses.values()), state.wall, state.skipped,
            state.unreadable)  # fmt: skip


def test_a_file_replaced_by_a_copy_counts_once(tmp_path: Path) -> None:
    """Replaced by a rename (rsync's temporary file): read again, and what the file gave
    before is dropped first; a shorter replacement shows only what it holds."""
    goodput = tmp_path / "goodput-r0.jsonl"
    sessions = tmp_path / "sessions-r0.jsonl"
    goodput_text = "".join(_step(i) for i in range(3)) + "garbage\n" + _step(9, goodput="x")
    sessions_text = "".join(
        _line(status="accepted" if i % 4 else "failed", generate_s=0.1 * i) for i in range(12)
    )
    goodput.write_text(goodput_text)
    sessions.write_text(sessions_text)
    followers: dict[Path, Follower] = {}
    state = State()
    _poll(tmp_path, followers, state)
    before = _totals(state)
    assert before == (3, 12, 6.0, 1, 1)
    for path, text in ((goodput, goodput_text), (sessions, sessions_text)):
        temporary = tmp_path / f".{path.name}.tmp"
        temporary.write_text(text)
        os.replace(temporary, path)
    _poll(tmp_path, followers, state)
    assert _totals(state) == before
    assert len(state.steps) == 3
    assert sum(len(values) for values in state.phases.values()) == 12
    assert [rank.steps for rank in state.ranks.values()] == [3]
    temporary = tmp_path / ".goodput.tmp"
    temporary.write_text(_step(7))
    os.replace(temporary, goodput)
    _poll(tmp_path, followers, state)
    assert _totals(state) == (1, 12, 2.0, 0, 0)
    assert [line["iteration"] for _, _, line in state.steps] == [7]


def test_a_torn_last_line_counts_once_its_writer_is_gone(
    tmp_path: Path, run: Callable[..., Result]
) -> None:
    """An unfinished last line waits for its newline while the file is fresh; it counts as
    unreadable with --once, or once the file has not changed for --stale seconds, and not
    if its newline comes after all."""
    path = tmp_path / "goodput-r0.jsonl"
    whole = _step(2)
    path.write_text(_step(1) + whole[:30])
    result = run("watch", tmp_path, "--once")
    assert result.code == 0, result.err
    assert "skipped: 1 lines that are not JSON objects, 0 with fields" in re.sub(
        r"\s+", " ", result.out
    )
    followers: dict[Path, Follower] = {}
    state = State()
    _poll(tmp_path, followers, state, stale=60)
    assert (state.total_steps, state.unreadable) == (1, 0)  # fresh: its newline may come
    _poll(tmp_path, followers, state, stale=60, now=time.time() + 120)
    assert state.unreadable == 1  # no change for two minutes: its writer is gone
    with path.open("a") as handle:
        handle.write(whole[30:])
    _poll(tmp_path, followers, state, stale=60, now=time.time() + 120)
    assert (state.total_steps, state.unreadable) == (2, 0)


def test_memory_stays_bounded_reading_a_large_file(tmp_path: Path) -> None:
    """A 24 MB sessions file already written when the view starts is read in chunks: what
    one poll allocates at its peak is a fraction of the file, not a multiple of it."""
    line = _line(status="accepted", generate_s=0.01, reward_s=0.02, detail="x" * 400)
    count = 24_000_000 // len(line)
    path = tmp_path / "sessions-r0.jsonl"
    with path.open("w") as handle:
        for _ in range(count // 1000):
            handle.write(line * 1000)
    state = State()
    tracemalloc.start()
    try:
        _poll(tmp_path, {}, state)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(state.statuses.values()) == count // 1000 * 1000
    assert peak < 8_000_000, peak


def test_an_overlong_unfinished_line_is_skipped_not_held(tmp_path: Path) -> None:
    """A line past 16 MiB without its newline is dropped as it grows (counted once); the
    lines after its newline are read."""
    path = tmp_path / "goodput-r0.jsonl"
    with path.open("w") as handle:
        handle.write(_step(1) + '{"kind": "step", "name": "')
        for _ in range(17):
            handle.write("x" * (1 << 20))
    follower = Follower(path)
    assert _iterations(follower) == [1]
    assert follower.skipped == 1
    assert not follower.torn
    with path.open("a") as handle:
        handle.write('"}\n' + _step(2))
    assert _iterations(follower) == [2]
    assert follower.skipped == 1
