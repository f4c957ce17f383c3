"""Edges of the commands' inputs: twin and repeated files, BOMs, damaged gzip data,
malformed session phases, unreadable profile captures, an empty ``--resolve``."""

from __future__ import annotations

import contextvars
import gzip
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ._helpers import GOLDEN, Result, one_line, read_lines, write_lines

Run = Callable[..., Result]

# A complete event without trace or span ids: goodput ignores it and says so.
NO_IDS = {"ph": "X", "name": "rl.policy_update", "ts": 1_000_000, "dur": 5, "pid": 100, "tid": 1}


def _spans(document: dict[str, Any]) -> Counter[tuple[str, str]]:
    return Counter(
        (e["args"]["trace_id"], e["args"]["span_id"])
        for e in document["traceEvents"]
        if e.get("ph") == "X" and "span_id" in e.get("args", {})
    )


def _convert(run: Run, tmp_path: Path, *inputs: object) -> tuple[dict[str, Any], Result]:
    out = tmp_path / "trace.json"
    result = run("convert", *inputs, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    return json.loads(out.read_text()), result


# -- 1: what goodput counts, report says; one file never read twice ------------


def test_report_notes_what_goodput_notes(run: Run, golden: Path, tmp_path: Path) -> None:
    """Events without ids and duplicate spans: the same notes from goodput and report."""
    events = read_lines(golden / "traces-r0.jsonl")
    write_lines(golden / "traces-r0.jsonl", [*events, NO_IDS])
    (golden / "copy").mkdir()
    shutil.copy(golden / "traces-r1.jsonl", golden / "copy" / "traces-r1.jsonl")
    goodput = run("goodput", golden, "--no-progress")
    assert goodput.code == 0, goodput.err
    expected = [line.removeprefix("asynctrace goodput: ") for line in goodput.err.splitlines()]
    assert "1 complete events without trace/span ids or finite times were ignored" in expected
    assert any(line.endswith("duplicate spans were ignored") for line in expected), expected
    page_path = tmp_path / "report.html"
    report = run("report", golden, "-o", page_path, "--no-progress")
    assert report.code == 0, report.err
    summary = one_line(report.err)
    page = page_path.read_text(encoding="utf-8")
    for line in expected:
        assert line in summary
        assert line in page


def test_gzip_k_twin_is_read_once(run: Run, golden: Path, tmp_path: Path) -> None:
    """``gzip -k`` leaves X.jsonl and X.jsonl.gz: only X.jsonl is read, and a note says so."""
    plain, _ = _convert(run, tmp_path, golden)
    source = golden / "traces-r0.jsonl"
    (golden / "traces-r0.jsonl.gz").write_bytes(gzip.compress(source.read_bytes()))
    document, result = _convert(run, tmp_path, golden)
    assert _spans(document) == _spans(plain)
    assert max(_spans(document).values()) == 1
    assert "merge overflow" not in json.dumps(document)
    note = (
        f"{golden / 'traces-r0.jsonl.gz'}: not read, traces-r0.jsonl beside it holds the "
        "same trace uncompressed"
    )
    assert note in result.err
    assert "from 2 files" in result.err  # r0 and r1, not the twin
    goodput = run("goodput", golden, "--json", "--no-progress")
    assert goodput.code == 0, goodput.err
    assert goodput.json()["inputs"]["duplicates"] == 0
    assert note in goodput.err


def test_empty_plain_twin_gives_way_to_the_gzip(run: Run, golden: Path, tmp_path: Path) -> None:
    """An empty X.jsonl beside a complete X.jsonl.gz: the compressed one is read."""
    plain, _ = _convert(run, tmp_path, golden)
    source = golden / "traces-r0.jsonl"
    (golden / "traces-r0.jsonl.gz").write_bytes(gzip.compress(source.read_bytes()))
    source.write_bytes(b"")
    document, result = _convert(run, tmp_path, golden)
    assert _spans(document) == _spans(plain)
    assert f"{source}: not read, it is empty and traces-r0.jsonl.gz beside it is not" in (
        result.err
    )


def test_convert_writes_a_repeated_span_once(run: Run, golden: Path, tmp_path: Path) -> None:
    """A copy of a rank's file elsewhere in the run directory: each span written once."""
    plain, _ = _convert(run, tmp_path, golden)
    (golden / "backup").mkdir()
    shutil.copy(golden / "traces-r0.jsonl", golden / "backup" / "traces-r0.jsonl")
    document, result = _convert(run, tmp_path, golden)
    assert _spans(document) == _spans(plain)
    r0_spans = sum(1 for e in read_lines(golden / "traces-r0.jsonl") if e.get("ph") == "X")
    line = one_line(result.err)
    assert f"skipped {r0_spans} duplicate spans" in line, line
    assert "merge overflow" not in json.dumps(document)


# -- 2: --resolve with no name -------------------------------------------------


def test_resolve_naming_nothing_is_refused(run: Run) -> None:
    """An empty spec is refused as configure() refuses it: exit 2, naming the rule."""
    for spec in ("", " , "):
        result = run("groups", "--resolve", spec)
        assert result.code == 2
        assert result.out == ""
        assert one_line(result.err) == (
            f"asynctrace groups: error: --resolve: {spec!r} names no group; accepted: "
            "comma-separated presets and group names, such as 'default' or "
            "'per_step,per_prompt'"
        )


# -- 3: malformed session phase runs -------------------------------------------


def test_malformed_phase_runs_are_counted(run: Run, golden: Path, tmp_path: Path) -> None:
    """Phase runs that are not runs, or end before they start: left out and counted."""
    records = read_lines(golden / "sessions-r0.jsonl")
    first, second, third = (dict(r) for r in records[:3])
    first["phases"] = {
        "generate": [1, "x", {"start_ts": "soon", "end_ts": 5}, {"start_ts": 1.2, "end_ts": "x"}],
        "reward": {"start_ts": 1},
    }  # 5 malformed
    second["phases"] = {"generate": [{"start_ts": 1.4, "end_ts": 1.2}]}  # reversed: 1
    third["phases"] = [1, 2]  # not a mapping: 1
    write_lines(golden / "sessions-r0.jsonl", [first, second, third, *records[3:]])
    out = tmp_path / "report.html"
    result = run("report", golden, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    assert "left out 7 malformed phase executions of the timeline" in one_line(result.err)
    page = out.read_text(encoding="utf-8")
    assert "left out 7 malformed phase executions" in page
    assert "generate -" not in page  # no negative duration drawn


def test_a_session_pending_at_shutdown_is_drawn_not_called_malformed(
    run: Run, golden: Path, tmp_path: Path
) -> None:
    """asynctrace's own AReaL-style record of a session still pending at shutdown: no
    end, and a phase still running (``end_ts: null``). Its open run is drawn to the
    latest time the record names; it is no malformed run."""
    import asynctrace as at
    from asynctrace import _session_tracer
    from asynctrace._session_tracer import SessionTracer

    def leave_open() -> None:  # in a context of its own: nothing it enters outlives it
        with at.task_scope(1):
            at.session_scope().__enter__()  # never left: pending at shutdown
            with at.trace_session_phase("reward"):
                pass
            at.trace_session_phase("generate").__enter__()  # still running

    tracer = SessionTracer(golden / "sessions-r9.jsonl", run_id="t")
    tracer.set_record_style("areal")
    previous = _session_tracer.install(tracer)
    try:
        contextvars.copy_context().run(leave_open)
    finally:
        _session_tracer.install(previous)
        assert tracer.shutdown(5)
    (record,) = read_lines(golden / "sessions-r9.jsonl")
    assert record.get("finalized_ts") is None
    assert record["phases"]["generate"][0]["end_ts"] is None
    out = tmp_path / "report.html"
    result = run("report", golden, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    assert "malformed" not in result.err


# -- 4: a UTF-8 byte order mark ------------------------------------------------


def test_bom_keeps_the_first_line(run: Run, golden: Path, tmp_path: Path) -> None:
    """A BOM before the first line (an editor's): the line, process_name metadata, is read."""
    path = golden / "traces-r0.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    document, result = _convert(run, tmp_path, path)
    assert "malformed" not in result.err
    names = [e for e in document["traceEvents"] if e.get("name") == "process_name"]
    assert [e["args"]["name"] for e in names] == ["trainer rank 0/2 (pid 100)"]
    report = run("report", golden, "-o", tmp_path / "r.html", "--no-progress")
    assert report.code == 0, report.err
    assert "malformed" not in report.err


@pytest.mark.parametrize("gzipped", [False, True])
def test_bom_before_an_overlong_first_line_is_one_overlong_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gzipped: bool
) -> None:
    """With a byte order mark first, an overlong first line is still told as one (the
    limit shrunk to 1 KiB for the test): one line skipped, the next one read."""
    from asynctrace.cli import _read_stats, _records

    monkeypatch.setattr(_records, "_MAX_LINE", 1024)
    event = {"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {}}
    body = (
        json.dumps({**event, "name": "x" * 3000}).encode()
        + b"\n"
        + json.dumps({**event, "name": "a"}).encode()
        + b"\n"
    )
    for bom in (b"", b"\xef\xbb\xbf"):
        path = tmp_path / ("traces-r0.jsonl.gz" if gzipped else "traces-r0.jsonl")
        data = bom + body
        path.write_bytes(gzip.compress(data) if gzipped else data)
        stats = _read_stats.ReadStats()
        assert [e["name"] for e, _ in _records.iter_file(path, stats)] == ["a"], bom
        assert stats.malformed == 1, (bom, stats.summary())  # the overlong line, once
        assert stats.samples == [f"{path.name}:1"], (bom, stats.summary())


# -- 5: a profile capture that is not JSON -------------------------------------


def test_report_does_not_link_an_unreadable_capture(
    run: Run, golden: Path, tmp_path: Path
) -> None:
    """A capture cut short: convert refuses it, and report neither links it nor is silent."""
    (golden / "profile-r0-step1.python.json").write_text('{"traceEvents":[{"ph":"X"')
    out = tmp_path / "report.html"
    result = run("report", golden, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    reason = "profile-r0-step1.python.json: not readable as JSON"
    assert f"profile capture not linked: {reason}" in one_line(result.err)
    page = out.read_text(encoding="utf-8")
    assert 'href="golden/profile-r0-step1.python.json"' not in page
    assert 'profile-r0-step1.python.json"' not in page
    assert f"profile capture not linked: {reason}" in page


# -- 6: one damaged gzip among good files --------------------------------------


def _damaged(data: bytes) -> bytes:
    """*data* gzip-compressed, with a CRC error: a byte of its deflate stream flipped."""
    packed = bytearray(gzip.compress(data))
    packed[len(packed) // 2] ^= 0xFF
    return bytes(packed)


def test_damaged_gzip_beside_good_files_is_skipped_and_named(
    run: Run, golden: Path, tmp_path: Path
) -> None:
    """Damaged compressed data ends its file; the other ranks' files are read."""
    plain = golden / "traces-r1.jsonl"
    (golden / "traces-r1.jsonl.gz").write_bytes(_damaged(plain.read_bytes()))
    plain.unlink()
    said = "read 1 file only up to damaged compressed data, the rest of it skipped ("
    goodput = run("goodput", golden, "--json", "--no-progress")
    assert goodput.code == 0, goodput.err
    assert said + "traces-r1.jsonl.gz: " in goodput.err
    assert goodput.json()["steps"]  # rank 0's steps are all there
    document, result = _convert(run, tmp_path, golden)
    assert said in one_line(result.err)
    r0_spans = sum(1 for e in read_lines(golden / "traces-r0.jsonl") if e.get("ph") == "X")
    assert sum(_spans(document).values()) >= r0_spans
    report = run("report", golden, "-o", tmp_path / "r.html", "--no-progress")
    assert report.code == 0, report.err
    assert said in one_line(report.err)


def test_damaged_gzip_with_nothing_before_it_alone_is_refused(run: Run, tmp_path: Path) -> None:
    """Damage before the first line of the only input: nothing is left, exit 2."""
    path = tmp_path / "traces-r0.jsonl.gz"
    packed = bytearray(gzip.compress((GOLDEN / "traces-r0.jsonl").read_bytes()))
    packed[10] |= 0b110  # the first block's type: 3, which deflate reserves
    path.write_bytes(bytes(packed))
    for command in ("goodput", "convert"):
        args = ["-o", tmp_path / "t.json"] if command == "convert" else []
        result = run(command, path, *args, "--no-progress")
        assert result.code == 2
        line = one_line(result.err)
        assert line.startswith(
            f"asynctrace {command}: error: {path}: damaged compressed data before its first line"
        ), line
