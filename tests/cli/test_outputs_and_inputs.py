"""Outputs that are inputs, profile captures among the inputs, pipes, and session
records the report cannot chart: each refused or counted, never lost silently."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ._helpers import GOLDEN, Result, one_line

Run = Callable[..., Result]
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def _write_capture(path: Path, events: list[dict[str, Any]], about: dict[str, Any]) -> Path:
    """A capture as asynctrace saves it, pretty-printed (several lines, as json.dump(indent))."""
    alignment = {"clock_error_us": 3, "pid": 100, "rank": 0, **about}
    document = {"traceEvents": events, "otherData": {"asynctrace": alignment}}
    path.write_text(json.dumps(document, indent=1))
    return path


# -- the output is an input ---------------------------------------------------------


@pytest.mark.parametrize("command", ["report", "convert"])
def test_an_output_that_is_an_input_is_refused_before_anything_is_written(
    run: Run, golden: Path, command: str
) -> None:
    """Named as given, found in a named directory, through a symbolic or a hard link, or
    a profile capture: the command refuses, and the file keeps every byte."""
    trace = golden / "traces-r0.jsonl"
    before = trace.read_bytes()
    os.symlink(trace, golden.parent / "alias.jsonl")
    os.link(trace, golden.parent / "hard.jsonl")
    capture = _write_capture(golden / "profile-r0-step1.python.json", [], {"clock_offset_us": 0})
    capture_bytes = capture.read_bytes()
    cases = [
        ([trace], trace),
        ([golden], trace),
        ([golden], golden.parent / "alias.jsonl"),
        ([golden], golden.parent / "hard.jsonl"),
        ([golden], capture),
        ([trace, capture], capture),
    ]
    for inputs, output in cases:
        result = run(command, *inputs, "-o", output, "--no-progress")
        assert result.code == 2, (inputs, output, result.err)
        assert one_line(result.err).endswith(f"{output}: the output is also an input")
        assert trace.read_bytes() == before
        assert capture.read_bytes() == capture_bytes
    assert not list(golden.glob(".*.tmp"))


def test_report_output_checks_come_before_reading(run: Run, tmp_path: Path) -> None:
    """A directory or a missing directory as the output is refused as convert refuses it,
    before the (here unreadable) input is read."""
    unreadable = tmp_path / "traces-r0.jsonl"
    unreadable.write_text("not json\n")
    result = run("report", unreadable, "-o", tmp_path)
    assert result.code == 2
    assert one_line(result.err).endswith(
        f"{tmp_path}: is a directory; name the output file, e.g. -o {tmp_path / 'report.html'}"
    )
    missing = tmp_path / "nowhere" / "r.html"
    result = run("report", unreadable, "-o", missing)
    assert result.code == 2
    assert one_line(result.err).endswith(f"no such directory: {missing.parent}")


def test_report_dash_writes_the_page_to_stdout(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o -`` is stdout, as for convert: no file named ``-`` appears."""
    monkeypatch.chdir(tmp_path)
    result = run("report", GOLDEN, "-o", "-", "--no-progress")
    assert result.code == 0, result.err
    assert result.out.startswith("<!DOCTYPE html>")
    assert result.out.rstrip().endswith("</html>")
    assert 'id="waterfall"' in result.out
    assert one_line(result.err).startswith("asynctrace report: wrote stdout: ")
    assert not (tmp_path / "-").exists()


# -- session records the report cannot chart ----------------------------------------


def test_session_records_without_an_id_or_a_submit_time_are_counted(
    run: Run, tmp_path: Path
) -> None:
    """Records without a session_id are not sessions and sessions without a submit time
    cannot be drawn on the timeline: both are counted, with why, in the summary line and
    at the top of the page."""
    good = {
        "run_id": "r",
        "task_id": 1,
        "session_id": "1-1",
        "rank": 0,
        "status": "accepted",
        "submit_ts": 1700000000.1,
        "finalized_ts": 1700000000.5,
        "total_s": 0.4,
        "phases": {},
    }
    records = [
        good,
        {**good, "session_id": "1-2", "submit_ts": "later"},
        {**good, "session_id": "1-3", "submit_ts": None},
        {"task_id": 2, "status": "accepted", "submit_ts": 1700000000.2, "total_s": 9.0},
        {"hello": "world"},
    ]
    sessions = tmp_path / "sessions-r0.jsonl"
    sessions.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "r.html"
    result = run("report", GOLDEN / "traces-r0.jsonl", sessions, "-o", out)
    assert result.code == 0, result.err
    err = one_line(result.err)
    no_id = (
        "left out 2 records of the sessions files without a session_id (not counted as "
        "sessions, their durations not charted)"
    )
    no_submit = (
        "left out of the timeline 2 sessions whose submit_ts is missing or not a number "
        "of seconds (counted in the statuses and histograms)"
    )
    assert "; 3 sessions; " in err
    assert no_id in err
    assert no_submit in err
    page = out.read_text(encoding="utf-8")
    notes = page[page.index('id="notes"') :]
    assert no_id in notes
    assert no_submit in notes


# -- profile captures among the inputs ----------------------------------------------


def _trace_with_span(directory: Path) -> Path:
    """The golden rank 0 trace in *directory*, with the trace and span id of a span of it."""
    directory.mkdir(exist_ok=True)
    return Path(shutil.copy(GOLDEN / "traces-r0.jsonl", directory / "traces-r0.jsonl"))


def _span_of(trace: Path) -> tuple[str, str, int]:
    for line in trace.read_text().splitlines():
        event = json.loads(line)
        if event.get("ph") == "X":
            return event["args"]["trace_id"], event["args"]["span_id"], event["ts"]
    raise AssertionError("no span")  # pragma: no cover


@pytest.mark.parametrize("relative", [False, True], ids=["epoch-clock", "backend-clock"])
def test_a_capture_named_among_convert_inputs_is_merged_once(
    run: Run, tmp_path: Path, relative: bool
) -> None:
    """A capture named beside the traces (or matched by a glob) is merged as a capture,
    once, under the process holding its span; it is not read as a trace file too (which
    made a bogus process, and for a capture on its backend's clock a refusal)."""
    trace = _trace_with_span(tmp_path / "run")
    trace_id, span_id, ts = _span_of(trace)
    start = 100 if relative else ts  # the backend's clock may count from its start
    op = {"ph": "X", "name": "PYFUNC", "ts": start, "dur": 5, "pid": 1, "tid": 5}
    thread = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 5, "args": {"name": "Main"}}
    capture = _write_capture(
        tmp_path / "run" / "profile-r0-step1.python.json",
        [op, thread],
        {"clock_offset_us": ts - start + 1, "trace_id": trace_id, "span_id": span_id},
    )
    for inputs in ([trace, capture], [f"{tmp_path / 'run'}/*"]):
        out = tmp_path / "trace.json"
        result = run("convert", *inputs, "-o", out, "--no-progress")
        assert result.code == 0, result.err
        events = json.loads(out.read_text())["traceEvents"]
        merged = [e for e in events if e.get("name") == "PYFUNC"]
        assert len(merged) == 1, merged
        assert merged[0]["ts"] == ts + 1
        assert merged[0]["tid"] >= 3_000_000_000  # a capture track
        err = one_line(result.err)
        assert "1 process from 1 file" in err
        assert "merged 1 profile capture " in err


def test_captures_alone_are_not_traces(run: Run, tmp_path: Path) -> None:
    """Only captures named: convert says that traces are needed, report too."""
    capture = _write_capture(tmp_path / "profile-r0-step1.python.json", [], {"clock_offset_us": 0})
    for command in ("convert", "report"):
        result = run(command, capture, "-o", tmp_path / "out")
        assert result.code == 2
        assert "no trace files among the inputs" in one_line(result.err)


def test_a_capture_named_among_report_inputs_is_linked(run: Run, tmp_path: Path) -> None:
    """report takes a named capture as a capture: linked under "Profiled steps", not
    refused as neither a trace nor a sessions file."""
    trace = _trace_with_span(tmp_path / "run")
    capture = _write_capture(
        tmp_path / "run" / "profile-r0-step4.python.json", [], {"clock_offset_us": 0}
    )
    out = tmp_path / "r.html"
    result = run("report", trace, capture, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    page = out.read_text(encoding="utf-8")
    profiles = page[page.index('id="profiles"') :]
    assert "r0 step 4" in profiles
    assert 'href="run/profile-r0-step4.python.json"' in profiles


# -- pipes ----------------------------------------------------------------------------


def _through_a_pipe(argv: list[str], data: bytes, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the CLI with ``/dev/fd/N`` standing for a pipe holding *data*, as ``<(zcat ...)``
    does; ``{pipe}`` in *argv* is that path."""
    read_end, write_end = os.pipe()
    assert len(data) < 60_000  # fits the pipe's buffer: written before the command starts
    os.write(write_end, data)
    os.close(write_end)
    try:
        path = f"/dev/fd/{read_end}"
        return subprocess.run(
            [sys.executable, "-m", "asynctrace", *(a.replace("{pipe}", path) for a in argv)],
            pass_fds=(read_end,),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(read_end)


@pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="needs /dev/fd")
@pytest.mark.parametrize(
    "argv",
    [
        ["report", "{pipe}", "-o", "r.html"],
        ["convert", "{pipe}", str(GOLDEN / "traces-r1.jsonl"), "-o", "t.json"],
        ["convert", "{pipe}", "--rebase", "-o", "t.json"],
    ],
    ids=["report", "convert-two-inputs", "convert-rebase"],
)
def test_a_pipe_read_more_than_once_is_refused(argv: list[str], tmp_path: Path) -> None:
    """An input read more than once cannot be a pipe (the second read finds it empty):
    refused, naming it and saying what to do, and nothing is written."""
    data = (GOLDEN / "traces-r0.jsonl").read_bytes()
    result = _through_a_pipe(argv, data, tmp_path)
    assert result.returncode == 2, result.stderr
    err = one_line(result.stderr)
    assert ": not a regular file (a pipe?); asynctrace " in err
    assert "must be a regular file or a directory: write it to a file first" in err
    assert err.split(": ")[2].startswith("/dev/fd/")
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="needs /dev/fd")
def test_convert_reads_a_single_pipe_once(tmp_path: Path) -> None:
    """One input and no --rebase: convert reads it once, so a pipe converts whole."""
    data = (GOLDEN / "traces-r0.jsonl").read_bytes()
    result = _through_a_pipe(["convert", "{pipe}", "-o", "t.json"], data, tmp_path)
    assert result.returncode == 0, result.stderr
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert len(events) == len(data.splitlines())


def test_the_timeline_samples_the_sessions_it_can_draw_evenly(run: Run, tmp_path: Path) -> None:
    """Sessions without a submit time take no share of the timeline's sample: of 200
    sessions before many such and 200 after, the later ones are drawn about as often."""

    def record(n: int, submit: object) -> str:
        return json.dumps({"session_id": f"s{n}", "status": "accepted", "submit_ts": submit})

    lines = [record(n, 1700000000.0 + n) for n in range(200)]
    lines += [record(n, None) for n in range(200, 10_200)]
    lines += [record(n, 1700000000.0 + n) for n in range(10_200, 10_400)]
    sessions = tmp_path / "sessions-r0.jsonl"
    sessions.write_text("\n".join(lines) + "\n")
    out = tmp_path / "r.html"
    result = run("report", GOLDEN / "traces-r0.jsonl", sessions, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    assert "left out of the timeline 10000 sessions whose submit_ts" in result.err
    timeline = out.read_text(encoding="utf-8").split('id="sessions-timeline"')[1]
    drawn = {int(n) for n in re.findall(r"session s(\d+) ", timeline.split("</svg>")[0])}
    assert len(drawn) == 200
    later = sum(n >= 10_200 for n in drawn)
    assert 60 <= later <= 140, later
