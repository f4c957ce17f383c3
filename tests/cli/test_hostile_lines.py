"""Hostile lines: every command skips and counts what it cannot use, and never crashes.

A trace file is input from outside (a killed writer, another tool, a user's
edit): a ``pid`` that is a list, a ``ts`` that is a string, bytes that are not
UTF-8, a lone surrogate in a name. ``convert``, ``goodput`` (text, ``--json``,
``--csv``) and ``report`` each read the good lines, count the bad ones in their
summary and exit as they would without them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _fuzz
import pytest
from _budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asynctrace.cli import build_parser, main
from asynctrace.cli._common import CliError

from ._helpers import GOLDEN, Result

Run = Callable[..., Result]

_GOLDEN_LINES = (GOLDEN / "traces-r0.jsonl").read_bytes()
_SPAN = next(
    json.loads(line)
    for line in _GOLDEN_LINES.splitlines()
    if b'"ph":"X"' in line and b"rl.bucket" in line
)

HOSTILE: dict[str, dict[str, Any]] = {
    "process_name pid list": {"ph": "M", "name": "process_name", "pid": [1], "args": {}},
    "process_name pid dict": {"ph": "M", "name": "process_name", "pid": {"a": 1}, "args": {}},
    "thread_name tid dict": {
        "ph": "M",
        "name": "thread_name",
        "pid": 100,
        "tid": {"a": 1},
        "args": {"name": "t"},
    },
    "span pid list": {**_SPAN, "pid": [100]},
    "span tid dict": {**_SPAN, "tid": {"t": 1}},
    "string ts": {**_SPAN, "ts": "1200000"},
    "string dur": {**_SPAN, "dur": "100"},
    "boolean ts": {**_SPAN, "ts": True},
    "ph list": {**_SPAN, "ph": ["X"]},
    "name list": {**_SPAN, "name": []},  # once a crash of goodput (the name is a dict key)
    "name number": {**_SPAN, "name": 7},
    "ts no float holds": {**_SPAN, "ts": 10**400},  # once a crash: float(ts + dur)
    "dur past any real time": {**_SPAN, "dur": -(10**30)},
}


def _commands(tmp: Path, trace: Path) -> dict[str, list[str]]:
    return {
        "convert": ["convert", str(trace), "-o", str(tmp / "out.json"), "--quiet"],
        "goodput": ["goodput", str(trace), "--no-progress"],
        "goodput --json": ["goodput", str(trace), "--json", "--no-progress"],
        "goodput --csv": ["goodput", str(trace), "--csv", "--no-progress"],
        "report": ["report", str(trace), "-o", str(tmp / "report.html"), "--no-progress"],
    }


COMMANDS = ["convert", "goodput", "goodput --json", "goodput --csv", "report"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_badly_typed_event_is_skipped_and_counted(
    run: Run, tmp_path: Path, case: str, command: str
) -> None:
    """A pid/tid that is a list or dict, a string ts/dur, a name not a string: skipped, counted."""
    trace = tmp_path / "traces-r0.jsonl"
    trace.write_bytes(_GOLDEN_LINES + json.dumps(HOSTILE[case]).encode() + b"\n")
    lines = _GOLDEN_LINES.count(b"\n") + 1
    result = run(*_commands(tmp_path, trace)[command])
    assert result.code == 0, result.err
    assert "internal error" not in result.err
    if command != "convert":  # --quiet: convert's summary is in its output document
        assert f"skipped 1 malformed line (traces-r0.jsonl:{lines})" in result.err
    else:
        document = json.loads((tmp_path / "out.json").read_text())
        assert document["otherData"]["asynctrace"]["malformed"] == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_an_infinite_duration_is_skipped_and_counted(
    run: Run, tmp_path: Path, command: str
) -> None:
    """``"dur": 1e400`` parses as an infinity: a span that never ends would hold its step
    open for good (and --rebase wrote it as null); it is a malformed line instead."""
    line = json.dumps({**_SPAN, "dur": 1}).replace('"dur": 1', '"dur": 1e400').encode()
    trace = tmp_path / "traces-r0.jsonl"
    trace.write_bytes(_GOLDEN_LINES + line + b"\n")
    result = run(*_commands(tmp_path, trace)[command])
    assert result.code == 0, result.err
    if command != "convert":
        assert "skipped 1 malformed line" in result.err
    else:
        document = json.loads((tmp_path / "out.json").read_text())
        assert document["otherData"]["asynctrace"]["malformed"] == 1


def _xr_traces(directory: Path) -> None:
    """Two ranks: r0's steps, and r1's productive leaf of step 0 (it ends before step 0)."""
    directory.mkdir()
    trace = "0af7651916cd43dd8448eb211c80319c"
    r0 = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "r0", "rank": 0}}]
    for i in range(3):
        step_id, leaf_id = f"{16 + i:016x}", f"{256 + i:016x}"
        start = 1_000_000 * (i + 1)
        r0 += [
            {"ph": "X", "name": "upd", "ts": start + 500_000, "dur": 300_000, "pid": 1,
             "tid": 1, "args": {"trace_id": trace, "span_id": leaf_id,
                                "parent_span_id": step_id, "rl.bucket": "productive"}},
            {"ph": "X", "name": "rl.step", "ts": start, "dur": 1_000_000, "pid": 1, "tid": 1,
             "args": {"trace_id": trace, "span_id": step_id, "rl.iteration": i,
                      "asynctrace.group": "step"}},
        ]  # fmt: skip
    r1 = [
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "r1", "rank": 1}},
        {"ph": "X", "name": "gen", "ts": 1_100_000, "dur": 300_000, "pid": 2, "tid": 1,
         "args": {"trace_id": trace, "span_id": f"{513:016x}",
                  "parent_span_id": f"{16:016x}", "rl.bucket": "productive"}},
    ]  # fmt: skip
    for name, events in (("traces-r0.jsonl", r0), ("traces-r1.jsonl", r1)):
        (directory / name).write_text("".join(json.dumps(e) + "\n" for e in events))


def test_goodput_of_a_converted_trace_is_the_goodput_of_its_files(
    run: Run, tmp_path: Path
) -> None:
    """``convert`` merges its input files in end order, as ``goodput`` reads trace files:
    goodput reads the same numbers from the converted document (written one file after
    the other, r1's leaf of step 0 came after all of r0's steps, and was lost)."""
    _xr_traces(tmp_path / "xr")
    direct = run("goodput", tmp_path / "xr", "--json", "--no-progress")
    assert direct.code == 0, direct.err
    converted = run("convert", tmp_path / "xr", "-o", tmp_path / "xr.json", "--quiet")
    assert converted.code == 0, converted.err
    again = run("goodput", tmp_path / "xr.json", "--json", "--no-progress")
    assert again.code == 0, again.err
    steps = [s["productive_s"] for s in json.loads(direct.out)["steps"]]
    assert steps == pytest.approx([0.6, 0.3, 0.3])
    assert [s["productive_s"] for s in json.loads(again.out)["steps"]] == pytest.approx(steps)


def test_a_whole_json_document_counts_the_events_it_leaves_out(run: Run, tmp_path: Path) -> None:
    """A pretty-printed ``{"traceEvents": [...]}`` (read whole): items that are not usable
    events are skipped and counted, as lines of a JSON-lines trace are."""
    events = [json.loads(line) for line in _GOLDEN_LINES.splitlines() if line.strip()]
    document = {"traceEvents": [*events, "not an event", {**_SPAN, "ts": "late"}]}
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(document, indent=2))
    result = run("goodput", path, "--json", "--no-progress")
    assert result.code == 0, result.err
    assert json.loads(result.out)["inputs"]["malformed_lines"] == 2


def test_the_same_line_without_the_bad_field_is_read(run: Run, tmp_path: Path) -> None:
    """The check is on types only: the golden span with its own fields is not skipped."""
    trace = tmp_path / "traces-r0.jsonl"
    trace.write_bytes(_GOLDEN_LINES + json.dumps({**_SPAN, "name": "again"}).encode() + b"\n")
    result = run("goodput", trace, "--no-progress")
    assert result.code == 0
    assert "malformed" not in result.err


def _with_surrogates(tmp_path: Path) -> Path:
    """The golden trace with a lone surrogate in every rl.* span name, as the writers keep it."""
    text = _GOLDEN_LINES.decode()
    text = text.replace('"name":"rl.', '"name":"\\udcffrl.')
    trace = tmp_path / "traces-r0.jsonl"
    trace.write_text(text)
    return trace


def test_surrogates_goodput_text_and_csv_show_the_escape(run: Run, tmp_path: Path) -> None:
    """goodput's table and CSV show a lone surrogate as its \\udcff escape."""
    trace = _with_surrogates(tmp_path)
    for flag in ((), ("--csv",)):
        result = run("goodput", trace, "--no-progress", *flag)
        assert result.code == 0, result.err
        assert "\\udcffrl.step" in result.out


def test_surrogates_goodput_json_keeps_the_name(run: Run, tmp_path: Path) -> None:
    """goodput --json is valid JSON whose step names hold the surrogate, as the input did."""
    result = run("goodput", _with_surrogates(tmp_path), "--json", "--no-progress")
    assert result.code == 0, result.err
    names = {step["name"] for step in json.loads(result.out)["steps"]}
    assert names == {"\udcffrl.step"}


def test_surrogates_report_and_convert(run: Run, tmp_path: Path) -> None:
    """report writes its page and convert its document, the name kept as an escape."""
    trace = _with_surrogates(tmp_path)
    report = run("report", trace, "-o", tmp_path / "r.html", "--no-progress")
    assert report.code == 0, report.err
    assert "\\udcffrl.step" in (tmp_path / "r.html").read_text(encoding="utf-8")
    converted = run("convert", trace, "-o", tmp_path / "t.json", "--quiet")
    assert converted.code == 0, converted.err
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e.get("name") == "\udcffrl.step" for e in events)


# -- fuzz: arbitrary lines -----------------------------------------------------

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
_ARG_KEYS = [
    "span_id",
    "trace_id",
    "parent_span_id",
    "rl.bucket",
    "rl.iteration",
    "asynctrace.group",
    "rank",
    "role",
    "name",
]
_hex = st.text("0123456789abcdef", min_size=1, max_size=16)
_event_values = {
    "ph": st.sampled_from(["X", "M", "i", "B", "E"]) | _json_values,
    "name": st.sampled_from(["rl.step", "process_name", "thread_name", "gen"]) | _json_values,
    "ts": st.integers(0, 3_000_000) | _json_values,
    "dur": st.integers(0, 2_000_000) | _json_values,
    "pid": st.sampled_from([100, 101]) | _json_values,
    "tid": st.integers(0, 3) | _json_values,
}
_args = st.dictionaries(
    st.sampled_from(_ARG_KEYS),
    _hex | st.sampled_from(["step", "productive", "idle", "loop_stall"]) | _json_values,
    max_size=6,
)
_events = st.fixed_dictionaries({}, optional={**_event_values, "args": _args | _json_values})


def _line(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    text = json.dumps(value, ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate as raw bytes too


_lines = st.lists(
    _events.map(_line)
    | _json_values.map(_line)
    | st.binary(max_size=40)
    | st.text(max_size=30).map(lambda t: t.encode("utf-8", "surrogatepass")),
    min_size=1,
    max_size=12,
)


def _run_quietly(argv: list[str]) -> int:
    """``main(argv)`` with its output thrown away; the exit status."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert "internal error" not in err.getvalue(), err.getvalue()
    assert "Traceback" not in err.getvalue()
    return code


@functools.cache
def _parsed() -> tuple[Path, dict[str, argparse.Namespace]]:
    """One trace path for every example, and each command's arguments, parsed once.

    Parsing is the command line's own cost (a parser with every subcommand,
    about 2 ms a call), not the readers'; the directory lives as long as the run.
    """
    directory = tempfile.TemporaryDirectory(prefix="asynctrace-hostile-")
    _KEEP.append(directory)
    tmp = Path(directory.name)
    trace = tmp / "traces-r0.jsonl"
    parser = build_parser()
    return trace, {name: parser.parse_args(argv) for name, argv in _commands(tmp, trace).items()}


_KEEP: list[tempfile.TemporaryDirectory[str]] = []


def _run_parsed(args: argparse.Namespace) -> int:
    """What ``main`` does with parsed arguments: the command's status, or its CliError's.

    Anything else escaping the command is what ``main`` reports as an internal
    error: here it fails the example with its traceback.
    """
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return int(args.run(copy.copy(args)))
        except CliError as exc:
            return exc.code


def test_the_parsed_commands_are_what_main_runs(tmp_path: Path) -> None:
    """The fuzz target's shortcut (arguments parsed once) exits as ``main`` does."""
    trace, parsed = _parsed()
    for body in (_GOLDEN_LINES, b"xx\n", _GOLDEN_LINES + b'{"ph": "X", "ts": "1"}\n'):
        trace.write_bytes(body)
        for command in COMMANDS:
            assert _run_parsed(parsed[command]) == _run_quietly(
                _commands(trace.parent, trace)[command]
            ), (command, body[-40:])


@pytest.mark.fuzz
@_fuzz.target
@settings(
    max_examples=examples(25, 2_000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_lines, st.booleans())
def test_every_command_survives_arbitrary_lines(lines: list[bytes], with_golden: bool) -> None:
    """Arbitrary lines, alone or among good ones: each command exits 0, 1 or 2, never crashes."""
    trace, parsed = _parsed()
    body = b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n"
    trace.write_bytes((_GOLDEN_LINES if with_golden else b"") + body)
    for command in COMMANDS:
        code = _run_parsed(parsed[command])
        assert code in (0, 1, 2)
        if with_golden and command == "convert":
            assert code == 0  # the good lines are still there to convert
