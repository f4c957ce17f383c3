"""Reading edges: deep nesting, overlong lines, one-line documents, pipes, negative and
zero durations, and ``watch``'s option bounds, through the command as users run it."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asynctrace.cli._inputs import single_pass
from asynctrace.cli._read_stats import ReadStats
from asynctrace.cli._records import iter_file
from asynctrace.rollup import Rollup

from ._helpers import GOLDEN, Result, one_line, read_lines, write_lines

TRACE = "0af7651916cd43dd8448eb211c80319c"


def _span(
    name: str, span: int, parent: int | None, ts: int, dur: int, **args: Any
) -> dict[str, Any]:
    ids: dict[str, Any] = {"trace_id": TRACE, "span_id": f"{span:016x}"}
    if parent is not None:
        ids["parent_span_id"] = f"{parent:016x}"
    return {
        "ph": "X",
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": 1,
        "tid": 1,
        "args": {**args, **ids},
    }


def _two_steps(second_dur: int) -> list[dict[str, Any]]:
    """Two steps of 1 s, each with a productive and an overhead leaf; the second step
    lasting *second_dur* µs instead (its leaves are as they were)."""
    return [
        _span("gen", 0x11, 0xA1, 1_000_000, 400_000, **{"rl.bucket": "productive"}),
        _span("sync", 0x12, 0xA1, 1_500_000, 100_000, **{"rl.bucket": "overhead"}),
        _span("rl.step", 0xA1, None, 1_000_000, 1_000_000, **{"rl.iteration": 1}),
        _span("gen", 0x21, 0xA2, 2_000_000, 800_000, **{"rl.bucket": "productive"}),
        _span("sync", 0x22, 0xA2, 2_900_000, 50_000, **{"rl.bucket": "overhead"}),
        _span("rl.step", 0xA2, None, 2_000_000, second_dur, **{"rl.iteration": 2}),
    ]


def _cli(*argv: object, shell: str | None = None, timeout: float = 60) -> Result:
    """Run ``python -m asynctrace ARGV`` in a subprocess (or *shell*, a bash command line
    in which ``ASYNCTRACE`` is that command), as a user does."""
    command = [sys.executable, "-m", "asynctrace", *map(str, argv)]
    if shell is not None:
        quoted = " ".join(f"'{part}'" for part in command[:3])
        command = ["bash", "-c", shell.replace("ASYNCTRACE", quoted)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return Result(done.returncode, done.stdout, done.stderr)


# -- a line nested too deeply ---------------------------------------------------------


@pytest.mark.parametrize("command", ["goodput", "convert"])
def test_a_line_nested_too_deeply_is_counted_as_malformed(tmp_path: Path, command: str) -> None:
    """Deeper than orjson's 1,024 levels and the interpreter's recursion limit: the line
    is malformed like a torn one, every other line is read, no internal error."""
    trace = write_lines(tmp_path / "traces-r0.jsonl", _two_steps(1_000_000))
    with trace.open("ab") as out:
        out.write(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    extra = ["-o", tmp_path / "out.json"] if command == "convert" else ["--json"]
    result = _cli(command, trace, *extra)
    assert result.code == 0, result.err
    assert "internal error" not in result.err
    assert "skipped 1 malformed line (traces-r0.jsonl:7)" in result.err
    if command == "goodput":
        assert [s["iteration"] for s in result.json()["steps"]] == [1, 2]
    else:
        events = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
        assert sum(e["ph"] == "X" for e in events) == 6


# -- a line longer than 64 MiB --------------------------------------------------------


def test_an_overlong_line_is_skipped_without_being_parsed(tmp_path: Path) -> None:
    """A 70 MB one-line JSON array (over the 64 MiB cap) next to a real trace: the
    command reads the trace, names the file and why, and its peak memory stays far
    below what parsing the line would take (about 20 times its size)."""
    trace = write_lines(tmp_path / "traces-r0.jsonl", _two_steps(1_000_000))
    big = tmp_path / "traces-r1.jsonl"
    item = b'{"ph":"X","n":1},'
    with big.open("wb") as out:
        out.write(b"[")
        for _ in range(70):
            out.write(item * ((1 << 20) // len(item)))
        out.write(item[:-1] + b"]\n")
    assert big.stat().st_size > 64 << 20
    probe = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stderr.write(done.stderr)\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, sys.executable, "-m", "asynctrace", "goodput", trace, big],
        capture_output=True,
        text=True,
        timeout=120,
    )
    code, peak_kib = map(int, done.stdout.split())
    assert code == 0, done.stderr
    assert (
        "skipped 1 file that is not a JSON-lines trace (traces-r1.jsonl: 1 line, none "
        "usable: 1 longer than 64 MiB (not read)"
    ) in done.stderr
    assert peak_kib < 400 * 1024, f"peak RSS {peak_kib} KiB"


def test_an_overlong_line_among_good_lines_is_one_malformed_line(tmp_path: Path) -> None:
    """The rest of an overlong line is passed over, up to its newline: the next line is
    read as the next line, and line numbers stay right."""
    events = _two_steps(1_000_000)
    trace = tmp_path / "traces-r0.jsonl"
    with trace.open("wb") as out:
        for event in events[:3]:
            out.write(json.dumps(event).encode() + b"\n")
        out.write(b'{"ph":"X","pad":"' + b"x" * ((64 << 20) + 10) + b'"}\n')
        for event in events[3:]:
            out.write(json.dumps(event).encode() + b"\n")
    stats = ReadStats()
    names = [event["args"]["span_id"] for event, _ in iter_file(trace, stats)]
    assert names == [event["args"]["span_id"] for event in events]
    assert (stats.malformed, stats.samples) == (1, ["traces-r0.jsonl:4"])


# -- a whole document on one line -----------------------------------------------------


def test_a_one_line_trace_events_document_is_read(tmp_path: Path) -> None:
    """``json.dump({"traceEvents": [...]})`` (no indent: one line) is read like the same
    events one per line, by goodput and by convert."""
    events = _two_steps(1_000_000)
    document = tmp_path / "doc-traces-r0.json"
    document.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    lines = write_lines(tmp_path / "traces-r0.jsonl", events)
    from_document = _cli("goodput", "--json", document)
    from_lines = _cli("goodput", "--json", lines)
    assert from_document.code == 0, from_document.err
    named = ("process", "rank")  # (from the file's name)

    def steps(result: Result) -> list[dict[str, Any]]:
        return [{k: v for k, v in s.items() if k not in named} for s in result.json()["steps"]]

    assert steps(from_document) == steps(from_lines)
    assert [s["goodput"] for s in from_document.json()["steps"]] == [0.4, 0.8]
    converted = _cli("convert", document, "-o", tmp_path / "out.json")
    assert converted.code == 0, converted.err
    assert "wrote" in one_line(converted.err)
    written = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
    assert sorted(e["args"]["span_id"] for e in written) == sorted(
        e["args"]["span_id"] for e in events
    )


def test_unusable_events_of_a_one_line_document_are_counted(tmp_path: Path) -> None:
    """An item that is not a usable event is left out and counted; the others are read."""
    events: list[Any] = [*_two_steps(1_000_000), {"ph": "X", "ts": "soon"}, 7]
    document = tmp_path / "traces-r0.json"
    document.write_text(json.dumps({"traceEvents": events}) + "\n")
    stats = ReadStats()
    read = [event for event, _ in iter_file(document, stats)]
    assert read == events[:6]
    assert (stats.records, stats.malformed) == (6, 2)
    assert stats.samples == ["traces-r0.json:1 (2 unusable events)"]


# -- pipes ----------------------------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True])
def test_a_pipe_is_read_whole(tmp_path: Path, compressed: bool) -> None:
    """``asynctrace goodput <(zcat ...)``: a pipe gives every line (gzip data too), not
    an "empty file"."""
    trace = write_lines(tmp_path / "traces-r0.jsonl", _two_steps(1_000_000))
    if compressed:
        packed = tmp_path / "traces-r0.jsonl.gz"
        packed.write_bytes(gzip.compress(trace.read_bytes()))
        trace = packed
    result = _cli(shell=f"ASYNCTRACE goodput --json <(cat '{trace}')")
    assert result.code == 0, result.err
    assert [s["iteration"] for s in result.json()["steps"]] == [1, 2]


def test_convert_reads_a_pipe_once(tmp_path: Path) -> None:
    """convert reads its inputs once (without --rebase): every event of the pipe is in
    the output."""
    trace = GOLDEN / "traces-r0.jsonl"
    out = tmp_path / "out.json"
    result = _cli(shell=f"ASYNCTRACE convert <(cat '{trace}') -o '{out}'")
    assert result.code == 0, result.err
    written = json.loads(out.read_text())["traceEvents"]
    assert len(written) == len(read_lines(trace))


def test_a_pretty_printed_document_from_a_pipe_says_why_it_is_not_read(
    tmp_path: Path,
) -> None:
    """A multi-line document needs a second reading, which a pipe cannot give: the
    refusal says so instead of calling the input empty."""
    document = tmp_path / "doc.json"
    document.write_text(json.dumps({"traceEvents": _two_steps(1_000_000)}, indent=1))
    result = _cli(shell=f"ASYNCTRACE goodput <(cat '{document}')")
    assert result.code == 2
    message = one_line(result.err)
    assert "empty file" not in message
    assert "not a regular file: read once" in message
    assert _cli("goodput", "--json", document).code == 0  # the same file is read


def test_single_pass_tells_a_pipe_from_a_file(tmp_path: Path) -> None:
    """:func:`single_pass` is true for a pipe, false for a regular (or gzip) file."""
    trace = write_lines(tmp_path / "traces-r0.jsonl", _two_steps(1_000_000))
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from asynctrace.cli._inputs import single_pass\n"
        "print(single_pass(Path(sys.argv[1])))\n"
    )
    shutil.copy(trace, tmp_path / "copy.jsonl")
    done = subprocess.run(
        ["bash", "-c", f"'{sys.executable}' -c '{probe}' <(cat '{trace}')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "True", done.stderr
    assert not single_pass(tmp_path / "copy.jsonl")


# -- negative and zero durations ------------------------------------------------------


def test_a_negative_duration_is_a_malformed_line(tmp_path: Path) -> None:
    """A step of dur -2 s is skipped and counted (with its reason when nothing else is
    usable), not taken for an event that shifts or hides its children."""
    trace = write_lines(tmp_path / "traces-r0.jsonl", _two_steps(-2_000_000))
    result = _cli("goodput", "--json", trace)
    assert result.code == 0, result.err
    assert "skipped 1 malformed line (traces-r0.jsonl:6)" in result.err
    assert result.json()["inputs"]["malformed_lines"] == 1
    only = write_lines(tmp_path / "traces-r1.jsonl", [_span("x", 1, None, 5, -1)])
    refused = _cli("goodput", only)
    assert refused.code == 2
    assert "1 line, none usable: 1 with a negative dur" in one_line(refused.err)


def test_a_zero_length_step_says_what_it_took(tmp_path: Path) -> None:
    """A step span of dur 0 is no step; the bucketed spans under it counting in no step
    are counted and noted, not lost silently."""
    trace = write_lines(tmp_path / "traces-r0.jsonl", _two_steps(0))
    result = _cli("goodput", "--json", trace)
    assert result.code == 0, result.err
    document = result.json()
    assert [s["iteration"] for s in document["steps"]] == [1]
    assert document["inputs"]["no_duration_steps"] == 1
    assert document["inputs"]["no_duration_leaves"] == 2
    assert (
        "1 span that would be a step had no positive duration, so it is not one: 2 bucketed "
        "spans under it counted in no step; the first: step 'rl.step' (span "
        "00000000000000a2, rl.iteration=2), dur 0 s"
    ) in result.err
    text = _cli("goodput", trace)
    assert "no positive duration" in text.err


def _rollup(events: list[dict[str, Any]]) -> Any:
    rollup = Rollup()
    for event in events:
        rollup.add(event)
    return rollup.finish()


def test_the_rollup_counts_zero_and_negative_length_steps() -> None:
    """Through the rollup's own API (no reader in between): a group-``step`` span of no
    duration and a stamped root ending before it starts take their leaves, counted."""
    events = [
        _span("gen", 0x11, 0xA1, 10, 5, **{"rl.bucket": "productive"}),
        _span("outer", 0xA1, None, 10, 0, **{"asynctrace.group": "step"}),
        _span("gen", 0x21, 0xA2, 30, 5, **{"rl.bucket": "productive"}),
        _span("idle", 0x22, 0xA2, 36, 1, **{"rl.bucket": "idle"}),
        _span("rl.step", 0xA2, None, 40, -10, **{"rl.iteration": 3}),
    ]
    result = _rollup(events)
    assert result.steps == []
    assert (result.void_steps, result.void_leaves) == (2, 3)
    assert any("2 spans that would be steps" in note for note in result.notes)


def test_a_zero_length_span_under_a_step_keeps_its_leaves_in_the_step() -> None:
    """A per-prompt span (stamped, under the step) of dur 0 is no candidate step: its
    bucketed child counts in the step, as before, and nothing is noted."""
    events = [
        _span("gen", 0x31, 0xB1, 100, 50, **{"rl.bucket": "productive"}),
        _span("prompt", 0xB1, 0xA1, 100, 0, **{"rl.iteration": 1}),
        _span("rl.step", 0xA1, None, 0, 1000, **{"rl.iteration": 1}),
    ]
    result = _rollup(events)
    assert [(row.iteration, row.sums[0]) for row in result.steps] == [(1, 50.0)]
    assert (result.void_steps, result.void_leaves, result.notes) == (0, 0, [])


# -- watch's options ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "accepted"),
    [
        ("--interval", "inf", "seconds, more than 0 and at most 86400"),
        ("--interval", "1e300", "seconds, more than 0 and at most 86400"),
        ("--interval", "nan", "seconds, more than 0 and at most 86400"),
        ("--interval", "0", "seconds, more than 0 and at most 86400"),
        ("--stale", "inf", "seconds, more than 0 (finite)"),
        ("--stale", "-1", "seconds, more than 0 (finite)"),
        ("--steps", "0", "an integer of at least 1"),
    ],
)
def test_watch_names_the_option_the_value_and_what_is_accepted(
    tmp_path: Path, run: Callable[..., Result], option: str, value: str, accepted: str
) -> None:
    pytest.importorskip("rich")
    result = run("watch", tmp_path, option, value, "--once")
    assert result.code == 2
    assert f"argument {option}: '{value}': accepted: {accepted}" in one_line(result.err)


def test_watch_with_a_huge_interval_exits_before_drawing(tmp_path: Path) -> None:
    """No first frame then an overflow in the sleep: a usage error at once."""
    pytest.importorskip("rich")
    result = _cli("watch", tmp_path, "--interval", "1e300", timeout=30)
    assert result.code == 2
    assert "internal error" not in result.err
    assert "argument --interval: '1e300'" in one_line(result.err)
    assert result.out == ""


def test_a_huge_first_line_is_not_read_whole_to_tell_what_the_file_is(tmp_path: Path) -> None:
    """With no step found, ``goodput`` looks at a file's first lines to say what it is
    (``report`` always does): a 150 MB first line is judged by its first MiB, never read
    whole (that alone took about four times its size)."""
    trace = tmp_path / "traces-r0.jsonl"
    with trace.open("wb") as out:
        out.write(b'"')
        for _ in range(150):
            out.write(b"a" * (1 << 20))
        out.write(b'"\n')
        out.write(b'{"ph":"X","name":"a","ts":1,"dur":2,"pid":1,"tid":1,"args":{}}\n')
    probe = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stderr.write(done.stderr)\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, sys.executable, "-m", "asynctrace", "goodput", trace],
        capture_output=True,
        text=True,
        timeout=120,
    )
    code, peak_kib = map(int, done.stdout.split())
    assert peak_kib < 250 * 1024, f"peak RSS {peak_kib} KiB"
    assert code == 2, done.stderr
    assert "skipped 1 malformed line (traces-r0.jsonl:1)" in done.stderr


# -- a document cut short before its first event ----------------------------------------


@pytest.mark.parametrize("head", [b'{"traceEvents":[\n', b'{"traceEvents": [', b"[\n"])
@pytest.mark.parametrize("command", ["goodput", "convert"])
def test_a_document_cut_before_its_first_event_is_not_called_empty(
    tmp_path: Path, command: str, head: bytes
) -> None:
    """A writer killed as it began leaves the array opened and nothing else: said so,
    exit 2; a document opened and closed with no event in it is still an empty file."""
    cut = tmp_path / "trace.json"
    cut.write_bytes(head)
    extra = ["-o", tmp_path / "out.json"] if command == "convert" else []
    result = _cli(command, cut, *extra)
    assert result.code == 2
    assert one_line(result.err).endswith(
        "trace.json: a JSON trace document cut short before its first event"
    )
    closed = tmp_path / "closed.json"
    closed.write_bytes(head.rstrip() + b"\n" + (b"]}\n" if head[:1] == b"{" else b"]\n"))
    assert one_line(_cli(command, closed, *extra).err).endswith(
        "closed.json: empty file, no trace events"
    )
