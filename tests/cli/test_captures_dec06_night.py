"""``convert`` and capture names: negative steps merged, a misnamed capture reported."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._helpers import Result, one_line

Run = Callable[..., Result]

_OP = {"ph": "X", "name": "OP", "ts": 200_000, "dur": 5, "pid": 1, "tid": 9}


def _write_capture(path: Path, name: str) -> Path:
    """A capture of rank 0 (pid 100 in the golden traces) as asynctrace saves it."""
    about = {"clock_offset_us": 1_000_000, "clock_error_us": 3, "pid": 100, "rank": 0}
    document: dict[str, Any] = {
        "traceEvents": [{**_OP, "name": name}],
        "otherData": {"asynctrace": about},
    }
    path.write_text(json.dumps(document))
    return path


def test_a_negative_step_is_merged_and_a_misnamed_capture_reported(
    run: Run, golden: Path, tmp_path: Path
) -> None:
    """``-step-2`` (a warm-up step) is a capture's name; ``profile-*-step*.json`` named
    otherwise is listed as not merged, whether found in a directory or named."""
    _write_capture(golden / "profile-r0-step-2.python.json", "WARMUP")
    _write_capture(golden / "profile-r0-step-2_2.python.json", "WARMUP_AGAIN")
    odd = _write_capture(golden / "profile-r0-step1-copy.python.json", "ODD")
    out = tmp_path / "trace.json"
    result = run("convert", golden, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    err = one_line(result.err)
    assert "merged 2 profile captures" in err
    assert f"not merged: {odd.name}: not named as a capture is" in err
    events = json.loads(out.read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("name") in ("WARMUP", "WARMUP_AGAIN", "ODD")} == {
        "WARMUP",
        "WARMUP_AGAIN",
    }
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"profile step -2: tid 9", "profile step -2_2: tid 9"} <= tracks

    named = run(
        "convert",
        golden / "traces-r0.jsonl",
        golden / "traces-r1.jsonl",
        odd,
        "-o",
        tmp_path / "named.json",
        "--no-progress",
    )
    assert named.code == 0, named.err  # not read as a trace file
    assert f"not merged: {odd.name}: not named as a capture is" in one_line(named.err)


def test_report_says_it_did_not_link_a_misnamed_capture(
    run: Run, golden: Path, tmp_path: Path
) -> None:
    """``report`` links captures; one named like a capture but not as one is named in a note."""
    _write_capture(golden / "profile-r0-step-2.python.json", "WARMUP")
    odd = _write_capture(golden / "profile-r0-step1-copy.python.json", "ODD")
    page = tmp_path / "report.html"
    result = run("report", golden, "-o", page, "--no-progress")
    assert result.code == 0, result.err
    html = page.read_text()
    assert "profile-r0-step-2.python.json" in html  # linked
    assert f"profile capture not linked: {odd.name}: not named as a capture is" in html
