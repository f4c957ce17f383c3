"""``asynctrace watch``: the live view, in a real pty, against a demo run still writing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from asynctrace.cli.watch import Follower

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
    assert follower.lines() == [{"a": 1}]
    with path.open("a") as handle:
        handle.write(": 2}\nnot json\n")
    assert follower.lines() == [{"b": 2}]
    path.unlink()
    path.write_text('{"c": 3}\n')
    assert follower.lines() == [{"c": 3}]


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
    ]
    (tmp_path / "goodput-r0.jsonl").write_text(_line(**good) + "".join(bad))
    result = run("watch", tmp_path, "--once")
    assert result.code == 0, result.err
    text = re.sub(r"\s+", " ", result.out)
    assert "steps finished: 2 ranks: 1 goodput: 50.0%" in text  # (the exporters line's step)
    assert "skipped: 3 lines that are not JSON objects, 5 with fields the view cannot read" in text


def test_not_a_directory_is_an_error(tmp_path: Path, run: Callable[..., Result]) -> None:
    """A missing directory exits with status 2 and one line."""
    result = run("watch", tmp_path / "missing")
    assert result.code == 2
    assert "not a directory" in result.err
