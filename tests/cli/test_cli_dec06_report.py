"""report's waterfall and sessions, capture events in convert, --grace, watch's phase keys."""

from __future__ import annotations

import io
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from asynctrace.cli._follower import Follower
from asynctrace.cli._watch_state import MAX_PHASE_KEYS, State
from asynctrace.cli._watch_view import render
from asynctrace.cli.watch import _poll

from ._helpers import GOLDEN, Result, write_lines
from .test_areal_files import areal_files

_Run = Callable[..., Result]


def _waterfall_rows(page: str) -> list[str]:
    """The first line of each drawn row's tooltip (the span's name), in the waterfall."""
    segment = page[page.index("<h2>Step waterfall") :]
    segment = segment[: segment.index("<h2>", 5)]
    return [tip.split("\n")[0] for tip in re.findall(r'data-tip="([^"&]*)', segment)]


def test_report_draws_the_waterfall_of_an_areal_step(tmp_path: Path, run: _Run) -> None:
    """AReaL's own events (no ids) are drawn under their step, as goodput parents them."""
    traces = areal_files(tmp_path, role="")
    page = tmp_path / "report.html"
    result = run("report", traces, "-o", page, "--no-progress")
    assert result.code == 0, result.err
    rows = _waterfall_rows(page.read_text())
    assert rows[0] == "train.step"
    assert sorted(rows[1:]) == ["actor.ppo_update", "ckpt.save", "rollout.wait"]
    assert "not drawn" not in page.read_text()


def test_report_draws_an_areal_step_of_a_later_process(tmp_path: Path, run: _Run) -> None:
    """The slowest step in the second of two AReaL processes: its events get the ids
    goodput gave them (numbered on from the first process's), so they are drawn."""
    traces = areal_files(tmp_path, role="")
    slower = []
    for line in (traces / "traces-r0.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("name") == "process_name":
            event["args"]["name"] = "Rank 1, Process"
        for key in ("ts", "dur"):
            if key in event:
                event[key] *= 2
        slower.append(event)
    write_lines(traces / "traces-r1.jsonl", slower)
    page = tmp_path / "report.html"
    result = run("report", traces, "-o", page, "--no-progress")
    assert result.code == 0, result.err
    text = page.read_text()
    assert re.search(r"train\.step · rl\.iteration \d+ · r1 · ", text)  # r1's step drawn
    rows = _waterfall_rows(text)
    assert rows[0] == "train.step"
    assert sorted(rows[1:]) == ["actor.ppo_update", "ckpt.save", "rollout.wait"]


def test_report_counts_a_copied_file_once(tmp_path: Path, run: _Run) -> None:
    """A copy of the run in a subdirectory: each span drawn once, each session counted once."""
    alone = tmp_path / "alone.html"
    assert run("report", GOLDEN, "-o", alone, "--no-progress").code == 0
    directory = tmp_path / "run"
    shutil.copytree(GOLDEN, directory)
    shutil.copytree(GOLDEN, directory / "copy")
    page = tmp_path / "report.html"
    result = run("report", directory, "-o", page, "--no-progress")
    assert result.code == 0, result.err
    assert sorted(_waterfall_rows(page.read_text())) == sorted(_waterfall_rows(alone.read_text()))
    assert len(_waterfall_rows(alone.read_text())) == 12
    assert "; 6 sessions;" in result.err
    assert "skipped 6 session records identical to one read before" in result.err


def test_convert_checks_capture_events_as_trace_events(tmp_path: Path, run: _Run) -> None:
    """A capture's events failing the trace-event checks, and items that are not events,
    are left out and counted in the summary."""
    for name in ("traces-r0.jsonl", "traces-r1.jsonl"):
        shutil.copy(GOLDEN / name, tmp_path)
    events: list[object] = [
        {"ph": "X", "name": "ok", "ts": 10, "dur": 5, "pid": 7, "tid": 1},
        {"ph": "X", "name": "strts", "ts": "abc", "dur": 5, "pid": 7, "tid": 1},
        {"ph": "X", "name": "negdur", "ts": 20, "dur": -50, "pid": 7, "tid": 1},
        {"name": "noph", "ts": 20},
        5,
        "x",
        [1, 2],
        None,
        {"ph": "X", "name": "bigts", "ts": 1e300, "dur": 1, "pid": 7, "tid": 1},
    ]
    about = {
        "clock_offset_us": 1_000_000,
        "clock_error_us": 3,
        "pid": 100,
        "rank": 0,
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "span_id": "000000000000b001",
    }
    capture = tmp_path / "profile-r0-step1.python.json"
    capture.write_text(json.dumps({"traceEvents": events, "otherData": {"asynctrace": about}}))
    out = tmp_path / "trace.json"
    result = run("convert", tmp_path, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    assert "merged 1 profile capture" in result.err
    assert "8 events of profile-r0-step1.python.json" in result.err
    written = json.loads(out.read_text())["traceEvents"]
    from_capture = [e for e in written if e.get("tid", 0) > 3_000_000_000 and e.get("ph") != "M"]
    assert [e["name"] for e in from_capture] == ["ok"]
    assert from_capture[0]["ts"] == 1_000_010


def test_report_draws_sessions_spanning_a_subnormal_time(tmp_path: Path, run: _Run) -> None:
    """A timeline whose times span a subnormal interval is drawn, not a crash."""
    shutil.copy(GOLDEN / "traces-r0.jsonl", tmp_path)
    record = {"session_id": "a", "status": "accepted", "submit_ts": 0.0, "finalized_ts": 5e-324}
    write_lines(tmp_path / "sessions-r0.jsonl", [record])
    page = tmp_path / "report.html"
    result = run("report", tmp_path, "-o", page, "--no-progress")
    assert result.code == 0, result.err
    assert 'id="sessions-timeline"' in page.read_text()


@pytest.mark.parametrize("grace", ["1e9", "1e303", "-1", "nan", "inf"])
def test_goodput_refuses_a_grace_the_live_key_refuses(run: _Run, grace: str) -> None:
    """--grace takes what goodput.grace_s takes; past it, a usage error naming the option."""
    result = run("goodput", GOLDEN, "--grace", grace)
    assert result.code == 2
    assert result.out == ""
    assert f"argument --grace: {grace!r}" in result.err
    assert "at least 0 and below 1e9" in result.err


def test_goodput_takes_a_grace_just_below_the_bound(run: _Run) -> None:
    """A grace below 1e9 s still gives every step."""
    result = run("goodput", GOLDEN, "--grace", "999999999", "--json")
    assert result.code == 0, result.err
    assert len(result.json()["steps"]) == 2


def test_watch_keeps_the_first_phase_keys_and_counts_the_rest(tmp_path: Path) -> None:
    """Values of *_s keys past the first 32 are counted, not kept, and forgotten with
    their file."""
    keys = 3 * MAX_PHASE_KEYS
    records = [
        {"session_id": f"s{i}", "status": "accepted", "total_s": 1.0, f"p{i % keys}_s": 0.5}
        for i in range(4 * keys)
    ]
    path = write_lines(tmp_path / "sessions-r0.jsonl", records)  # type: ignore[arg-type]
    followers: dict[Path, Follower] = {}
    state = State()
    _poll(tmp_path, followers, state, final=True)
    assert len(state.phases) == MAX_PHASE_KEYS
    kept = sum(len(values) for values in state.phases.values())
    assert kept + state.phase_values_left_out == 2 * len(records)
    assert state.phase_values_left_out == 4 * (keys - MAX_PHASE_KEYS + 1)
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render(state, tmp_path, stale=60.0, show=10, now=time.time()))
    shown = f"left out {state.phase_values_left_out} values of *_s keys past the first 32"
    assert shown in console.export_text()
    path.unlink()
    _poll(tmp_path, followers, state, final=True)
    assert state.phases == {}
    assert state.phase_values_left_out == 0


def test_no_step_exit_statuses(tmp_path: Path, run: _Run) -> None:
    """Readable traces without a step: goodput exits 2, report exits 0 with a page saying so."""
    write_lines(
        tmp_path / "traces-r0.jsonl",
        [
            {
                "ph": "X",
                "name": "work",
                "ts": 1_000_000,
                "dur": 10,
                "pid": 1,
                "tid": 1,
                "args": {"trace_id": "1" * 32, "span_id": "1" * 16, "rl.bucket": "productive"},
            }
        ],
    )
    goodput = run("goodput", tmp_path, "--no-progress")
    assert goodput.code == 2
    assert "no step spans found" in goodput.err
    page = tmp_path / "report.html"
    report = run("report", tmp_path, "-o", page, "--no-progress")
    assert report.code == 0, report.err
    assert "No step spans found" in page.read_text()
