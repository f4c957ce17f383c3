"""Damaged files among the inputs: a file with no usable line, damaged gzip data."""

from __future__ import annotations

import gzip
import json
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from ._helpers import GOLDEN, Result, one_line

Run = Callable[..., Result]
TORN = b'{"ph":"M","name":"process_name","pid":12,"args":{"na'
_SPAN = next(
    json.loads(line)
    for line in (GOLDEN / "traces-r0.jsonl").read_text().splitlines()
    if '"ph":"X"' in line
)


def _beside_golden(tmp_path: Path, name: str, content: bytes) -> Path:
    """The golden rank-0 trace, and *content* as another file *name* beside it."""
    shutil.copy(GOLDEN / "traces-r0.jsonl", tmp_path / "traces-r0.jsonl")
    (tmp_path / name).write_bytes(content)
    return tmp_path


def _command(command: str, tmp_path: Path, *inputs: object) -> list[object]:
    if command == "report":
        return ["report", *inputs, "-o", tmp_path / "r.html", "--no-progress"]
    if command == "convert":
        return ["convert", *inputs, "-o", tmp_path / "t.json", "--no-progress"]
    return ["goodput", *inputs, "--no-progress"]


@pytest.mark.parametrize("command", ["goodput", "report", "convert"])
def test_a_file_of_one_torn_line_beside_good_ones_is_skipped_and_counted(
    run: Run, tmp_path: Path, command: str
) -> None:
    """A rank killed at its first write leaves one torn line: the run is read without it,
    and the summary counts its line and names the file, as it names an empty one."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _beside_golden(run_dir, "traces-r1.jsonl", TORN)
    result = run(*_command(command, tmp_path, run_dir))
    assert result.code == 0, result.err
    assert one_line(result.err).endswith(
        "skipped 1 malformed line (traces-r1.jsonl:1); skipped 1 file that is not a "
        "JSON-lines trace (traces-r1.jsonl: 1 line, none usable: 1 not JSON)"
    )


def test_goodput_json_lists_the_unusable_file(run: Run, tmp_path: Path) -> None:
    """``goodput --json`` names a skipped file and why, beside its empty files."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _beside_golden(run_dir, "traces-r1.jsonl", TORN)
    result = run("goodput", run_dir, "--json", "--no-progress")
    assert result.code == 0, result.err
    inputs = json.loads(result.out)["inputs"]
    assert inputs["unusable_files"] == [
        {"file": "traces-r1.jsonl", "why": "1 line, none usable: 1 not JSON"}
    ]


def test_a_sessions_file_of_one_torn_line_is_skipped_and_counted(run: Run, tmp_path: Path) -> None:
    """The same for session records: the page is written from the other sessions file."""
    shutil.copy(GOLDEN / "traces-r0.jsonl", tmp_path / "traces-r0.jsonl")
    shutil.copy(GOLDEN / "sessions-r0.jsonl", tmp_path / "sessions-r0.jsonl")
    (tmp_path / "sessions-r1.jsonl").write_bytes(b'{"run_id":"x","task_id":1,"sess')
    result = run("report", tmp_path, "-o", tmp_path / "r.html", "--no-progress")
    assert result.code == 0, result.err
    line = one_line(result.err)
    assert "; 6 sessions; " in line
    assert line.endswith(
        "skipped 1 malformed line (sessions-r1.jsonl:1); skipped 1 file that is not a "
        "JSON-lines sessions file (sessions-r1.jsonl: 1 line, none usable: 1 not JSON)"
    )


def test_the_only_input_with_no_usable_line_is_refused(run: Run, tmp_path: Path) -> None:
    """Nothing at all could be read: one line naming the file and why, exit 2."""
    path = tmp_path / "traces-r0.jsonl"
    path.write_bytes(TORN)
    convert = run(*_command("convert", tmp_path, path))
    assert convert.code == 2
    assert one_line(convert.err) == (
        f"asynctrace convert: error: {path}: not a JSON-lines trace "
        "(1 line, none usable: 1 not JSON)"
    )
    goodput = run(*_command("goodput", tmp_path, path))
    assert goodput.code == 2
    assert one_line(goodput.err) == (
        f"asynctrace goodput: error: {path}: not a JSON-lines trace "
        "(1 line, none usable: 1 not JSON)"
    )


def test_lines_of_the_wrong_shape_are_told_apart_from_lines_that_are_not_json(
    run: Run, tmp_path: Path
) -> None:
    """Well-formed JSON objects whose ``ts`` is a string are not "not JSON"."""
    wrong = [json.dumps({**_SPAN, "ts": str(i)}) for i in range(3)]
    path = tmp_path / "traces-r0.jsonl"
    path.write_text("\n".join(wrong) + "\n")
    result = run(*_command("convert", tmp_path, path))
    assert result.code == 2
    assert one_line(result.err).endswith(
        "traces-r0.jsonl: not a JSON-lines trace "
        "(3 lines, none usable: 3 with event fields of the wrong type)"
    )
    path.write_text("\n".join([wrong[0], "[1, 2]", TORN.decode(), ""]))
    mixed = run(*_command("convert", tmp_path, path))
    assert mixed.code == 2
    assert one_line(mixed.err).endswith(
        "(3 lines, none usable: 1 not JSON, 1 JSON but not an object, "
        "1 with event fields of the wrong type)"
    )


def test_a_large_file_with_no_usable_line_is_not_loaded_whole(run: Run, tmp_path: Path) -> None:
    """A file that starts like a JSON document but has no usable line is parsed whole only
    up to 64 MiB (decompressed): a larger one is skipped without loading it."""
    torn_line = b'{"ph": "X", "name": "' + b"a" * (64 << 10) + b"\n"
    body = b'{"traceEvents": [\n' + torn_line * 1040  # 65 MiB decompressed
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _beside_golden(run_dir, "traces-r1.jsonl.gz", gzip.compress(body, compresslevel=1))
    tracemalloc.start()
    try:
        result = run(*_command("goodput", tmp_path, run_dir))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.code == 0, result.err
    assert (
        "(traces-r1.jsonl.gz: 1040 lines, none usable: 1040 not JSON, "
        "not read as one JSON document (over 64 MiB))"
    ) in result.err
    assert peak < 16 << 20, peak  # lines one at a time, never the whole document


def test_a_pretty_printed_document_is_still_read_whole(run: Run, tmp_path: Path) -> None:
    """The whole-document fallback keeps working for a document under the bound."""
    events = [
        json.loads(line)
        for line in (GOLDEN / "traces-r0.jsonl").read_text().splitlines()
        if line.strip()
    ]
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=2))
    result = run(*_command("goodput", tmp_path, path))
    assert result.code == 0, result.err
    assert "malformed" not in result.err


def _damaged_gzip(path: Path, damage: str) -> Path:
    """Two gzip members (as appending writers make): the second one damaged."""
    first = gzip.compress((GOLDEN / "traces-r0.jsonl").read_bytes())
    second = bytearray(gzip.compress((GOLDEN / "traces-r1.jsonl").read_bytes()))
    if damage == "deflate":
        second[10] |= 0b110  # the first block's type: 3, which deflate reserves
    else:  # a flipped byte inside the data: it inflates, but to the wrong bytes
        second[len(second) // 2] ^= 0xFF
    path.write_bytes(first + bytes(second))
    return path


@pytest.mark.parametrize("damage", ["deflate", "crc"])
@pytest.mark.parametrize("command", ["goodput", "report", "convert"])
def test_damaged_compressed_data_is_read_up_to_the_damage_and_named(
    run: Run, tmp_path: Path, command: str, damage: str
) -> None:
    """Damaged bytes in a .jsonl.gz: the lines before the damage are read, and one line
    names the file and where the rest of it was skipped."""
    path = _damaged_gzip(tmp_path / "traces-r0.jsonl.gz", damage)
    result = run(*_command(command, tmp_path, path))
    assert result.code == 0, result.err
    line = next(x for x in result.err.splitlines() if "damaged compressed data" in x)
    assert line.startswith(f"asynctrace {command}: "), line
    assert (
        "read 1 file only up to damaged compressed data, the rest of it skipped "
        f"({path.name}: after line "
    ) in line, line
    assert "internal error" not in result.err


def test_gzip_cut_before_its_first_line_is_named(run: Run, tmp_path: Path) -> None:
    """A .gz cut off before one whole line: skipped beside good files, and said so."""
    whole = gzip.compress((GOLDEN / "traces-r1.jsonl").read_bytes())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _beside_golden(run_dir, "traces-r1.jsonl.gz", whole[:20])
    result = run(*_command("goodput", tmp_path, run_dir))
    assert result.code == 0, result.err
    assert (
        "skipped 1 file that is not a JSON-lines trace "
        "(traces-r1.jsonl.gz: compressed data cut short before its first line)"
    ) in result.err
