"""What every subcommand reads: gzip-compressed inputs, and usage errors that point at help."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from ._helpers import GOLDEN, Result, one_line

Run = Callable[..., Result]


def _gzipped(source: Path, target: Path) -> Path:
    target.write_bytes(gzip.compress(source.read_bytes()))
    return target


@pytest.fixture
def compressed(tmp_path: Path) -> Path:
    """The golden run with every file gzip-compressed (``traces-r0.jsonl.gz``, ...)."""
    run_dir = tmp_path / "gz"
    run_dir.mkdir()
    for path in GOLDEN.iterdir():
        _gzipped(path, run_dir / f"{path.name}.gz")
    return run_dir


def test_gzip_inputs_read_as_the_plain_ones(run: Run, compressed: Path, tmp_path: Path) -> None:
    """goodput, convert and report give the same results on .gz files, found in directories too."""
    plain = run("goodput", GOLDEN, "--json")
    packed = run("goodput", compressed, "--json")
    assert plain.code == packed.code == 0, packed.err
    assert packed.json()["steps"] == plain.json()["steps"]
    for source in (GOLDEN, compressed):
        result = run("convert", source, "-o", tmp_path / f"{source.name}.json")
        assert result.code == 0, result.err
    a = json.loads((tmp_path / "golden.json").read_text())["traceEvents"]
    b = json.loads((tmp_path / "gz.json").read_text())["traceEvents"]
    assert a == b
    report = run("report", compressed, "-o", tmp_path / "r.html")
    assert report.code == 0, report.err
    assert "sessions" in report.err  # the compressed sessions file was recognised


def test_gzip_cut_short_keeps_what_was_read(run: Run, tmp_path: Path) -> None:
    """A .gz cut off mid-stream (a killed writer) is read up to the cut, which is counted."""
    shutil.copy(GOLDEN / "traces-r0.jsonl", tmp_path / "traces-r0.jsonl")
    whole = gzip.compress((GOLDEN / "traces-r1.jsonl").read_bytes() * 20)
    (tmp_path / "traces-r1.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    result = run("convert", tmp_path, "-o", tmp_path / "t.json")
    assert result.code == 0, result.err
    assert "(compressed data cut short)" in one_line(result.err)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)


def test_not_gzip_after_all_is_an_error(run: Run, tmp_path: Path) -> None:
    """Bytes that start like gzip but are not: one line, exit 2, no traceback."""
    bad = tmp_path / "traces-r0.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    result = run("convert", bad, "-o", tmp_path / "t.json")
    assert result.code == 2
    assert one_line(result.err).startswith("asynctrace convert: error:")


@pytest.mark.parametrize("command", ["goodput", "convert", "report", "groups"])
def test_unknown_option_points_at_the_subcommand_help(run: Run, command: str) -> None:
    """An option a subcommand does not have names that subcommand's --help."""
    result = run(command, "--no-such-option", GOLDEN)
    assert result.code == 2
    assert one_line(result.err) == (
        f"asynctrace {command}: error: unrecognized arguments: --no-such-option "
        f"(see 'asynctrace {command} --help')"
    )


def test_goodput_with_nothing_to_report_fails_clearly(run: Run, tmp_path: Path) -> None:
    """No step in the input is an error (exit 2, one line), not an empty table with exit 0."""
    sessions = run("goodput", GOLDEN / "sessions-r0.jsonl")
    assert sessions.code == 2
    assert sessions.out == ""
    assert one_line(sessions.err).endswith(
        "sessions-r0.jsonl: session records, not a trace; goodput reads traces-*.jsonl "
        "('asynctrace report' reads both)"
    )
    (tmp_path / "traces-r0.jsonl").write_text(
        json.dumps({"ph": "X", "name": "x", "ts": 1, "dur": 2, "pid": 1, "tid": 1}) + "\n"
    )
    stepless = run("goodput", tmp_path)
    assert stepless.code == 2
    assert stepless.out == ""
    assert "no step spans found in 1 file(s) (a step is a span of group 'step'" in stepless.err
