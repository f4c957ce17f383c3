"""Names read from a trace never act on the terminal: ``goodput`` and ``watch`` in text mode.

A span name, a process role, a session status or a file name can hold escape
sequences (clear the screen, set the window title) and newlines (forge a row
of a table). Text output shows them as escapes; ``--json`` and ``--csv`` keep
them as written.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from asynctrace.cli._common import escape_controls

from ._helpers import Result, read_lines, write_lines

Run = Callable[..., Result]

EVIL = "rl\x1b[2J\x1b]0;owned\x07\nfake 9\x9b\x7f"
SHOWN = "rl\\x1b[2J\\x1b]0;owned\\x07\\nfake 9\\x9b\\x7f"
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # every control character but newline


def test_escape_controls_shows_every_control_character() -> None:
    """C0, DEL and C1 characters and lone surrogates become escapes; the rest stays."""
    for code in [*range(0x20), *range(0x7F, 0xA0), 0xDCFF]:
        shown = escape_controls(f"a{chr(code)}b")
        assert shown.isprintable(), (code, shown)
        assert shown.isascii(), (code, shown)
        assert shown.startswith("a\\"), shown
        assert shown.endswith("b"), shown
    assert escape_controls("\t\n\r\x1b\x9b\udcff") == "\\t\\n\\r\\x1b\\x9b\\udcff"
    for plain in ("rl.step", "rl.policy_update é 中", "a b", ""):
        assert escape_controls(plain) == plain


def _poison(golden: Path) -> None:
    path = golden / "traces-r0.jsonl"
    events = read_lines(path)
    for event in events:
        if event.get("name") == "rl.step":
            event["name"] = EVIL
        if event.get("name") == "process_name":
            event["args"]["role"] = "drv\x1b[31m"
    write_lines(path, events)


def test_goodput_text_escapes_names_from_the_trace(run: Run, golden: Path) -> None:
    """Step and process names with escape sequences and a newline: the text table shows
    them escaped, with no forged row; --json and --csv keep them as written."""
    plain = run("goodput", golden)
    _poison(golden)
    result = run("goodput", golden)
    assert result.code == 0, result.err
    assert not CONTROL.search(result.out), repr(result.out)
    lines = result.out.splitlines()
    assert len(lines) == len(plain.out.splitlines())
    assert not any(line.startswith("fake") for line in lines)
    steps = [line for line in lines if line.startswith("drv\\x1b[31m")]
    assert len(steps) == 2, lines
    assert all(SHOWN[:39] + "…" in line for line in steps), lines  # (clipped to 40)
    document = run("goodput", golden, "--json").json()
    assert {step["name"] for step in document["steps"]} == {EVIL}
    rows = list(csv.DictReader(io.StringIO(run("goodput", golden, "--csv").out)))
    assert [row["name"] for row in rows[:-1]] == [EVIL, EVIL]


def test_notes_escape_names_from_the_inputs(run: Run, golden: Path) -> None:
    """A note on stderr naming an input file holding control characters stays one line
    per note and acts on nothing."""
    (golden / "traces-\x1b]0;owned\x07\nr9.jsonl").write_text("")
    result = run("goodput", golden)
    assert result.code == 0, result.err
    assert not CONTROL.search(result.err), repr(result.err)
    notes = result.err.splitlines()
    assert notes, result.err
    assert all(note.startswith("asynctrace goodput: ") for note in notes), notes
    assert "traces-\\x1b]0;owned\\x07\\nr9.jsonl" in result.err


def _watch_files(directory: Path, name: str, span: str, status: str) -> None:
    step = {"kind": "step", "name": name, "iteration": f"7{EVIL}", "wall_s": 2.0,
            "productive_s": 1.0, "overhead_s": 0.5, "idle_s": 0.0, "wasted_s": 0.0,
            "unattributed_s": 0.5, "goodput": 0.5, "leaves": 2, "spans": {span: 1.0},
            "time": time.time(), "exporters": {span: [10, 4, 1]}}  # fmt: skip
    (directory / f"goodput-r{EVIL}.jsonl").write_text(json.dumps(step) + "\n")
    session = {"status": status, f"{span}_s": 0.5}
    (directory / "sessions-r0.jsonl").write_text(json.dumps(session) + "\n")


def test_watch_escapes_names_from_the_files(run: Run, tmp_path: Path) -> None:
    """Step, span, exporter and rank names, iterations, session statuses and phases with
    escape sequences: the view shows them escaped, and no newline of theirs makes a row."""
    pytest.importorskip("rich")
    _watch_files(tmp_path, EVIL, EVIL, EVIL)
    result = run("watch", tmp_path, "--once")
    assert result.code == 0, result.err
    assert not CONTROL.search(result.out), repr(result.out)
    assert not any(line.lstrip().startswith("fake") for line in result.out.splitlines())
    flat = re.sub(r"\s+", "", result.out)
    assert re.sub(r"\s+", "", f"sessions: {SHOWN} 1") in flat
    assert flat.count(re.sub(r"\s+", "", SHOWN)) >= 7  # rank, iteration, step, span, phase...


def test_watch_shows_rich_markup_in_names_as_written(run: Run, tmp_path: Path) -> None:
    """A name that reads as rich markup is shown as written (an unmatched closing tag once
    ended the view with an internal error)."""
    pytest.importorskip("rich")
    _watch_files(tmp_path, "[/bold] step", "[red]span[/]", "[link=http://x]ok")
    result = run("watch", tmp_path, "--once")
    assert result.code == 0, result.err
    for name in ("[/bold] step", "[red]span[/]", "[link=http://x]ok"):
        assert name in result.out
