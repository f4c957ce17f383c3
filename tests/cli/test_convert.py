"""``asynctrace convert``: one Chrome Trace JSON document from per-rank JSONL files."""

from __future__ import annotations

import argparse
import copy
import functools
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _fuzz
import pytest
from _budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace.cli import build_parser

from ._helpers import GOLDEN, Result, nesting_errors, one_line, read_lines, write_lines

Run = Callable[..., Result]


def _convert(run: Run, *args: object) -> tuple[dict[str, Any], Result]:
    result = run("convert", *args)
    assert result.code == 0, result.err
    output = Path(str(args[args.index("-o") + 1]))
    document: dict[str, Any] = json.loads(output.read_text())
    return document, result


def _processes(events: list[dict[str, Any]]) -> dict[Any, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }


def test_golden_merge(run: Run, tmp_path: Path) -> None:
    """Two ranks sharing pid 100 become two processes; names, tracks and times are kept."""
    document, result = _convert(run, GOLDEN, "-o", tmp_path / "trace.json")
    events = document["traceEvents"]
    inputs = read_lines(GOLDEN / "traces-r0.jsonl") + read_lines(GOLDEN / "traces-r1.jsonl")
    assert len(events) == len(inputs)
    processes = _processes(events)
    assert sorted(processes.values()) == [
        "trainer rank 0/2 (pid 100)",
        "trainer rank 1/2 (pid 100)",
    ]
    assert len(processes) == 2
    rank0 = next(p for p, n in processes.items() if "rank 0/2" in n)
    rank1 = next(p for p, n in processes.items() if "rank 1/2" in n)
    assert rank0 == 100  # the first keeps its pid, the second gets a free one
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    assert threads[(rank0, 7)] == "thread: checkpoint-finalize"
    assert threads[(rank1, 1)] == "thread: MainThread"
    # Wall-clock timestamps are kept, so the worker's span lines up inside the driver's step.
    by_name = {(e["pid"], e["name"]): e for e in events if e.get("ph") == "X"}
    step = next(e for e in events if e.get("name") == "rl.step" and e["args"]["rl.iteration"] == 1)
    logprob = by_name[(rank1, "rl.logprob")]
    assert step["ts"] <= logprob["ts"]
    assert logprob["ts"] + logprob["dur"] <= step["ts"] + step["dur"]
    assert logprob["ts"] == 1_200_000
    assert nesting_errors(events) == []
    assert document["displayTimeUnit"] == "ms"
    assert one_line(result.err) == (
        f"asynctrace convert: wrote {tmp_path / 'trace.json'}: 37 events, 2 processes from 2 files"
    )


def test_unchanged_events_are_copied_verbatim(run: Run, tmp_path: Path) -> None:
    """Events of a process that keeps its pid are written byte for byte."""
    out = tmp_path / "trace.json"
    run("convert", GOLDEN / "traces-r0.jsonl", "-o", out)
    written = out.read_text().splitlines()
    source = (GOLDEN / "traces-r0.jsonl").read_text().splitlines()
    assert [line.rstrip(",") for line in written[1:-1]] == source


def test_rebase(run: Run, tmp_path: Path) -> None:
    """--rebase subtracts the earliest timestamp from every event."""
    document, _ = _convert(run, GOLDEN, "-o", tmp_path / "trace.json", "--rebase")
    stamps = [e["ts"] for e in document["traceEvents"] if "ts" in e]
    assert min(stamps) == 0
    job = next(e for e in document["traceEvents"] if e.get("name") == "rl.job")
    assert job["ts"] == 800_000 - 100_000


def test_stdout(run: Run) -> None:
    """``-o -`` writes the document to stdout."""
    result = run("convert", GOLDEN / "traces-r1.jsonl", "-o", "-", "--quiet")
    assert result.code == 0
    assert result.err == ""
    assert len(json.loads(result.out)["traceEvents"]) == 6


def test_torn_last_line(run: Run, golden: Path, tmp_path: Path) -> None:
    """A torn last line is skipped and counted in the one summary line."""
    with open(golden / "traces-r0.jsonl", "a") as stream:
        stream.write('{"ph":"X","name":"rl.ste')
    document, result = _convert(run, golden, "-o", tmp_path / "trace.json")
    assert len(document["traceEvents"]) == 37
    assert one_line(result.err).endswith(
        "37 events, 2 processes from 2 files; skipped 1 malformed line (traces-r0.jsonl:32)"
    )
    assert document["otherData"]["asynctrace"]["malformed"] == 1


def test_same_process_twice_still_nests(run: Run, golden: Path, tmp_path: Path) -> None:
    """Two files of one process (same run, host, rank, pid): colliding tracks overflow."""
    shifted = read_lines(golden / "traces-r0.jsonl")
    for event in shifted:
        if "ts" in event:
            event["ts"] += 50_000
        if "args" in event and "span_id" in event["args"]:
            event["args"]["span_id"] = "f" + event["args"]["span_id"][1:]
    write_lines(golden / "traces-r0.1.jsonl", shifted)
    document, result = _convert(run, golden, "-o", tmp_path / "trace.json")
    events = document["traceEvents"]
    assert len(_processes(events)) == 2
    assert nesting_errors(events) == []
    assert "moved to overflow tracks so every track nests" in result.err
    names = [e["args"]["name"] for e in events if e.get("name") == "thread_name"]
    assert "task: Task-1 [MainThread] (merge overflow 1)" in names


def test_errors(run: Run, tmp_path: Path) -> None:
    """Empty input, output that is an input, unwritable output: one line, exit 2."""
    empty = tmp_path / "traces-r0.jsonl"
    empty.write_text("\n")
    result = run("convert", empty, "-o", tmp_path / "t.json")
    assert result.code == 2
    assert one_line(result.err).endswith("traces-r0.jsonl: empty file, no trace events")
    assert not (tmp_path / "t.json").exists()
    assert list(tmp_path.iterdir()) == [empty]  # no temporary file left behind
    same = run("convert", GOLDEN / "traces-r0.jsonl", "-o", GOLDEN / "traces-r0.jsonl")
    assert same.code == 2
    assert one_line(same.err).endswith("the output is also an input")
    nowhere = run("convert", GOLDEN, "-o", tmp_path / "missing-dir" / "t.json")
    assert nowhere.code == 2
    assert one_line(nowhere.err).endswith(f"no such directory: {tmp_path / 'missing-dir'}")
    directory = run("convert", GOLDEN, "-o", tmp_path)
    assert directory.code == 2
    assert one_line(directory.err).endswith(
        f"{tmp_path}: is a directory; name the output file, e.g. -o {tmp_path / 'trace.json'}"
    )
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    no_traces = run("convert", empty_dir, "-o", tmp_path / "t.json")
    assert no_traces.code == 2
    assert "no trace files" in one_line(no_traces.err)


def test_json_lines_that_are_not_trace_events(run: Run, tmp_path: Path) -> None:
    """Objects without "ph" are not trace events: none at all is an error, some are counted."""
    other = write_lines(tmp_path / "a.jsonl", [{"a": 1}])
    result = run("convert", other, "-o", tmp_path / "t.json")
    assert result.code == 2
    assert "no trace events in the 1 input file(s): 1 JSON object without a 'ph' field" in (
        one_line(result.err)
    )
    assert not (tmp_path / "t.json").exists()
    sessions = run("convert", GOLDEN / "sessions-r0.jsonl", "-o", tmp_path / "t.json")
    assert sessions.code == 2
    assert "a sessions file?" in one_line(sessions.err)
    mixed = write_lines(
        tmp_path / "traces-r0.jsonl",
        [{"a": 1}, {"ph": "X", "name": "s", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
    )
    document, done = _convert(run, mixed, "-o", tmp_path / "t.json")
    assert [e["name"] for e in document["traceEvents"] if e["ph"] == "X"] == ["s"]
    assert "skipped 1 JSON object without 'ph' (not trace events)" in one_line(done.err)


def test_help_has_an_example(run: Run) -> None:
    """--help exits 0 and shows examples."""
    result = run("convert", "--help")
    assert result.code == 0
    assert "examples:" in result.out
    assert "ui.perfetto.dev" in result.out


_intervals = st.lists(
    st.tuples(st.integers(0, 1_000), st.integers(0, 300), st.integers(1, 3)),
    min_size=1,
    max_size=40,
)


_KEEP: list[tempfile.TemporaryDirectory[str]] = []


@functools.cache
def _convert_args() -> tuple[Path, Path, argparse.Namespace]:
    """One input and one output path for every example, and ``convert``'s arguments, parsed once.

    Building the parser (every subcommand) is the command line's cost, not the
    converter's; the directory lives as long as the run.
    """
    directory = tempfile.TemporaryDirectory(prefix="asynctrace-convert-")
    _KEEP.append(directory)
    path = Path(directory.name) / "traces-r0.jsonl"
    out = Path(directory.name) / "trace.json"
    return path, out, build_parser().parse_args(["convert", str(path), "-o", str(out), "--quiet"])


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(40, 5_000), deadline=None)
@given(_intervals)
def test_any_input_converts_to_nesting_tracks(spans: list[tuple[int, int, int]]) -> None:
    """Whatever overlaps the input has, every output track nests and no event is lost."""
    path, out, args = _convert_args()
    out.unlink(missing_ok=True)  # what is read below is this example's output
    write_lines(
        path,
        [
            {"ph": "X", "name": f"s{i}", "ts": ts, "dur": dur, "pid": 1, "tid": tid}
            for i, (ts, dur, tid) in enumerate(spans)
        ],
    )
    assert args.run(copy.copy(args)) == 0  # what main() returns; a CliError fails the example
    events = json.loads(out.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert sorted(e["name"] for e in complete) == sorted(f"s{i}" for i in range(len(spans)))
    assert nesting_errors(events) == []


def test_converted_output_is_an_input(run: Run, tmp_path: Path) -> None:
    """Converting a converted document again gives the same events."""
    first, _ = _convert(run, GOLDEN, "-o", tmp_path / "a.json")
    shutil.copy(tmp_path / "a.json", tmp_path / "copy.json")
    second, _ = _convert(run, tmp_path / "copy.json", "-o", tmp_path / "b.json")
    assert second["traceEvents"] == first["traceEvents"]


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal, convert draws a progress bar (tqdm, from the cli extra) on stderr."""
    import os
    import pty
    import subprocess
    import sys

    import pytest

    pytest.importorskip("tqdm")
    import fcntl
    import struct
    import termios

    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "asynctrace", "convert", GOLDEN, "-o", tmp_path / "t.json"],
            stderr=secondary,
            stdout=subprocess.PIPE,
            timeout=60,
            check=False,
        )
        os.close(secondary)
        secondary = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed: everything is read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    assert proc.returncode == 0
    assert b"convert" in drawn
    assert b"convert:   0%|" in drawn, drawn[-400:]


def test_both_json_codecs_agree() -> None:
    """orjson (cli extra) and the standard library read and write the same JSON."""
    import pytest

    from asynctrace.cli import _common

    # _codecs() is orjson's pair when installed (CI installs the cli extra).
    for loads, dumps in (_common._stdlib_codecs(), _common._codecs()):
        assert loads(b'{"a":[1,2.5,"\xc3\xa9"]}') == {"a": [1, 2.5, "\u00e9"]}
        assert dumps({"a": "\u00e9", "b": [1, None]}) == b'{"a":"\xc3\xa9","b":[1,null]}'
        # A lone surrogate, as the writers keep one from a non-UTF-8 path.
        assert loads(b'{"p":"\\udcff"}') == {"p": "\udcff"}
        assert loads(dumps({"p": "\udcff"})) == {"p": "\udcff"}
        for bad in (b'{"a":NaN}', b'{"a":Infinity}', b"{"):
            with pytest.raises(ValueError):
                loads(bad)


def test_a_surrogate_attribute_survives_convert(run: Run, tmp_path: Path) -> None:
    """A span whose attribute holds a lone surrogate is converted, not skipped."""
    import asynctrace as at

    telemetry = at.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["chrome"], "output_dir": tmp_path}
    )
    try:
        with at.umbrella_span("job", "ok-step"):
            pass
        path = b"/data/\xff.bin".decode("utf-8", "surrogateescape")
        with at.umbrella_span("job", "bad-step", attributes={"path": path}):
            pass
    finally:
        telemetry.shutdown()
    document, result = _convert(run, tmp_path, "-o", tmp_path / "trace.json", "--rebase")
    names = [e["name"] for e in document["traceEvents"] if e.get("ph") == "X"]
    assert sorted(names) == ["bad-step", "ok-step"], result.err
    (bad,) = [e for e in document["traceEvents"] if e.get("name") == "bad-step"]
    assert bad["args"]["path"] == path


@pytest.mark.parametrize("case", ["float cut", "exponent cut", "bom", "utf-8 cut", "plain"])
def test_a_capture_reads_as_json_load_reads_it(tmp_path: Path, case: str) -> None:
    """The streaming reader, 1 MiB at a time, against ``json.load`` on what a piece's end
    can cut: a number after its ``.`` or ``e``, a character of several bytes; and a BOM."""
    from asynctrace.cli._captures import Capture, capture_lines, load_capture, tid_counter

    about = {"asynctrace": {"clock_offset_us": 0.0, "clock_error_us": 1.0, "pid": 1, "rank": 0}}
    event = {"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 10, "dur": 1}
    head = (
        b'{"otherData": '
        + json.dumps(about).encode()
        + b', "traceEvents": ['
        + json.dumps(event).encode()
        + b'], "pad": "'
    )
    key = b'", "v": '
    piece = 1 << 20
    data = {
        "float cut": head + b"x" * (piece - len(head) - len(key) - 3) + key + b"12.5}",
        "exponent cut": head + b"x" * (piece - len(head) - len(key) - 3) + key + b"12e5}",
        "bom": b"\xef\xbb\xbf" + json.dumps({"otherData": about, "traceEvents": [event]}).encode(),
        "utf-8 cut": head + b"x" * (piece - 1 - len(head)) + '\u20ac"}'.encode(),
        "plain": json.dumps({"otherData": about, "traceEvents": [event]}).encode(),
    }[case]
    path = tmp_path / "profile-r0-step1.torch.json"
    path.write_bytes(data)
    assert len(json.loads(data.decode("utf-8-sig"))["traceEvents"]) == 1
    capture = load_capture(path)
    assert isinstance(capture, Capture), capture
    (line,) = [x for x in capture_lines(capture, 7, 0.0, tid_counter()) if b'"op"' in x]
    assert json.loads(line)["pid"] == 7


def _write_capture(
    path: Path, events: list[dict[str, Any]], about: dict[str, Any] | None = None
) -> Path:
    """A profiler capture as asynctrace saves it: the backend's trace plus its alignment."""
    alignment = {"clock_offset_us": 1_000_000, "clock_error_us": 3, "pid": 100, "rank": 1}
    alignment.update(about or {})
    path.write_text(json.dumps({"traceEvents": events, "otherData": {"asynctrace": alignment}}))
    return path


def _capture_pids(events: list[dict[str, Any]], name: str) -> set[Any]:
    return {e["pid"] for e in events if e.get("name") == name}


def _rank_pid(events: list[dict[str, Any]], rank: int) -> Any:
    return next(p for p, n in _processes(events).items() if f"rank {rank}/2" in n)


def test_capture_goes_to_the_process_holding_its_span(
    run: Run, golden: Path, tmp_path: Path
) -> None:
    """Two ranks share pid 100: each capture lands under the rank whose trace holds its
    span, whatever rank it names; without span ids, under its pid and rank."""
    op = {"ph": "X", "name": "OP", "ts": 200_000, "dur": 5, "pid": 1, "tid": 9}
    by_span = {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "000000000000f002"}
    _write_capture(golden / "profile-r1-step1.python.json", [{**op, "name": "SPAN_R1"}], by_span)
    on_r0 = {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "000000000000b001"}
    _write_capture(golden / "profile-r1-step2.python.json", [{**op, "name": "SPAN_R0"}], on_r0)
    _write_capture(
        golden / "profile-r0-step3.python.json", [{**op, "name": "PID_R0"}], {"rank": 0}
    )
    document, result = _convert(run, golden, "-o", tmp_path / "trace.json")
    events = document["traceEvents"]
    rank0, rank1 = _rank_pid(events, 0), _rank_pid(events, 1)
    assert rank0 != rank1
    assert _capture_pids(events, "SPAN_R1") == {rank1}
    assert _capture_pids(events, "SPAN_R0") == {rank0}  # the span wins over the rank it names
    assert _capture_pids(events, "PID_R0") == {rank0}
    assert next(e for e in events if e.get("name") == "SPAN_R1")["ts"] == 1_200_000
    assert "merged 3 profile captures" in result.err
    assert "not merged" not in result.err


def test_role_named_and_partial_captures(run: Run, golden: Path, tmp_path: Path) -> None:
    """A capture named with its role (``profile-driver-r0-...``) is found and merged; one
    whose buffer overflowed or that shutdown cut is merged and said to be partial."""
    op = {"ph": "X", "name": "OP", "ts": 200_000, "dur": 5, "pid": 1, "tid": 9}
    _write_capture(
        golden / "profile-driver-r0-step1.python.json", [{**op, "name": "ROLE"}], {"rank": 0}
    )
    _write_capture(
        golden / "profile-r0-step2_2.python.json",
        [{**op, "name": "FULL"}],
        {"rank": 0, "overflow": True},
    )
    _write_capture(
        golden / "profile-r0-step3.python.json",
        [{**op, "name": "CUT"}],
        {"rank": 0, "truncated": True},
    )
    document, result = _convert(run, golden, "-o", tmp_path / "trace.json")
    events = document["traceEvents"]
    assert {e["name"] for e in events if e.get("name") in ("ROLE", "FULL", "CUT")} == {
        "ROLE",
        "FULL",
        "CUT",
    }
    err = one_line(result.err)
    assert "merged 3 profile captures" in err
    assert (
        "partial: profile-r0-step2_2.python.json lost its earliest events (the profiler's "
        "buffer was full: raise profiler.entries)" in err
    )
    assert (
        "partial: profile-r0-step3.python.json was cut at shutdown, before its span ended" in err
    )
    assert "profile-driver-r0-step1.python.json" not in err


def test_capture_matching_no_process_or_several_is_not_merged(
    run: Run, golden: Path, tmp_path: Path
) -> None:
    """No span found, and its pid shared by several processes (no rank to choose) or by
    none: the capture is reported as not merged, with why."""
    op = {"ph": "X", "name": "OP", "ts": 200_000, "dur": 5, "pid": 1, "tid": 9}
    _write_capture(golden / "profile-r1-step1.python.json", [op], {"rank": None})
    _write_capture(golden / "profile-r1-step2.python.json", [op], {"pid": 4242})
    _write_capture(golden / "profile-r1-step3.python.json", [op], {"rank": 5})
    document, result = _convert(run, golden, "-o", tmp_path / "trace.json")
    assert _capture_pids(document["traceEvents"], "OP") == set()
    err = one_line(result.err)
    assert "profile-r1-step1.python.json: 2 processes match (pid 100) and no trace holds" in err
    assert "profile-r1-step2.python.json: no trace of its process (pid 4242, rank 1)" in err
    assert "profile-r1-step3.python.json: no trace of its process (pid 100, rank 5)" in err
    assert "profile capture" not in err  # the "merged N profile captures" part


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_a_large_capture_is_streamed(golden: Path, tmp_path: Path) -> None:
    """A capture of 200k events converts completely; the converter's peak memory stays
    within a bound far below what holding the capture's events would take."""
    capture = golden / "profile-r0-step1.python.json"
    with open(capture, "w") as stream:
        stream.write('{"traceEvents":[\n')
        stream.write(
            ",\n".join(
                json.dumps({"ph": "X", "name": f"op_{i}", "ts": i, "dur": 1, "pid": 1, "tid": 2})
                for i in range(200_000)
            )
        )
        about = {"clock_offset_us": 0, "clock_error_us": 1, "pid": 100, "rank": 0}
        stream.write("\n],\n" + json.dumps({"otherData": {"asynctrace": about}})[1:])
    output = tmp_path / "trace.json"
    # The peak of this process's own memory (VmHWM, KiB): ru_maxrss would also hold the
    # parent's size from before the exec (a test worker's, hundreds of MB).
    script = (
        "import sys\n"
        "from asynctrace.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
        "print(status.split()[0])\n"
        "sys.exit(code)\n"
    )
    argv = [sys.executable, "-c", script, "convert", str(golden), "-o", str(output)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    peak_mb = int(done.stdout.split()[-1]) / 1024
    events = json.loads(output.read_text())["traceEvents"]
    ops = [e for e in events if e.get("name", "").startswith("op_")]
    assert len(ops) == 200_000
    assert [e["ts"] for e in ops[:3]] == [0, 1, 2]
    assert ops[-1]["name"] == "op_199999"
    assert {e["pid"] for e in ops} == {_rank_pid(events, 0)}
    # Held whole, the events alone take ~10x the file (13 MB here); streamed, the
    # interpreter's own footprint dominates.
    size_mb = capture.stat().st_size / 2**20
    assert peak_mb < 150 + 2 * size_mb, (peak_mb, size_mb)


def test_hostile_captures_are_reported_not_merged(run: Run, golden: Path, tmp_path: Path) -> None:
    """Deep nesting, NaN or Infinity alignments, NaN in an event: the capture (or the
    event) is skipped and said so; the conversion goes on."""
    (golden / "profile-r1-step1.python.json").write_text(
        '{"traceEvents":[' + "[" * 200_000 + "]" * 200_000 + "]}"
    )
    op = {"ph": "X", "name": "OP", "ts": 200_000, "dur": 5, "pid": 1, "tid": 9}
    for step, value in (("2", "NaN"), ("3", "Infinity")):
        text = json.dumps({"traceEvents": [op], "otherData": {"asynctrace": {"pid": 100}}})
        text = text.replace(
            '"pid": 100}',
            f'"pid": 100, "rank": 1, "clock_offset_us": {value}, "clock_error_us": 1}}',
        )
        (golden / f"profile-r1-step{step}.python.json").write_text(text)
    big = "1" + "0" * 400  # an int past a float's range
    _write_capture(golden / "profile-r1-step5.python.json", [op]).write_text(
        (golden / "profile-r1-step5.python.json")
        .read_text()
        .replace('"clock_offset_us": 1000000', f'"clock_offset_us": {big}')
    )
    repeated = golden / "profile-r1-step6.python.json"
    _write_capture(repeated, [op])
    repeated.write_text(
        repeated.read_text().replace('{"traceEvents": ', '{"traceEvents": [], "traceEvents": ', 1)
    )
    good = _write_capture(golden / "profile-r1-step4.python.json", [op, {**op, "name": "BAD"}])
    good.write_text(
        good.read_text().replace(
            '"ts": 200000, "dur": 5, "pid": 1, "tid": 9}]',
            '"ts": NaN, "dur": 5, "pid": 1, "tid": 9}]',
        )
    )
    huge_ts = _write_capture(golden / "profile-r1-step7.python.json", [{**op, "name": "HUGE"}])
    huge_ts.write_text(huge_ts.read_text().replace('"ts": 200000', f'"ts": {big}'))
    document, result = _convert(run, golden, "-o", tmp_path / "trace.json")
    events = document["traceEvents"]
    assert _capture_pids(events, "OP") == {_rank_pid(events, 1)}
    assert _capture_pids(events, "BAD") == set()
    assert all(e.get("ts") is not None for e in events if "ts" in e)
    err = one_line(result.err)
    assert "merged 2 profile captures (clocks aligned within 3 us)" in err
    assert "profile-r1-step1.python.json: not readable as JSON (nested too deeply)" in err
    assert "profile-r1-step2.python.json: its clock alignment is not a finite number" in err
    assert "profile-r1-step3.python.json: its clock alignment is not a finite number" in err
    assert "1 event of profile-r1-step4.python.json (not an event, NaN" in err
    assert "profile-r1-step5.python.json: its clock alignment is not a finite number" in err
    assert "profile-r1-step6.python.json: not readable as JSON (ValueError)" in err
    assert "1 event of profile-r1-step7.python.json (not an event, NaN" in err
    assert _capture_pids(events, "HUGE") == set()
    assert "internal error" not in err


def test_a_capture_broken_early_is_not_read_to_its_end(tmp_path: Path) -> None:
    """A bad value near the start of a large capture is the file's, not a value cut at the
    end of a piece: reading stops there instead of taking the rest of the file in."""
    from asynctrace.cli._captures import _Scanner

    event = json.dumps({"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 10, "dur": 1})
    path = tmp_path / "profile-r0-step1.torch.json"
    with open(path, "w") as stream:
        stream.write('{"traceEvents": [' + event + ", {bad}")
        stream.write(("," + event) * 200_000 + "]}")
    assert path.stat().st_size > 12 * 2**20
    with open(path, "rb") as stream:
        scanner = _Scanner(stream)
        scanner.expect("{")
        assert scanner.value() == "traceEvents"
        scanner.expect(":")
        with pytest.raises(ValueError, match="Expecting property name"):
            list(scanner.elements())
        assert stream.tell() <= 2 * 2**20
