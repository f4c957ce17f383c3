"""``convert``: a capture's thread and task names reach the merged trace redacted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._helpers import Result

Run = Callable[..., Result]


def test_a_captures_track_names_are_merged_redacted(
    run: Run, golden: Path, tmp_path: Path
) -> None:
    """A capture written with raw names (before they were redacted at save): the merged
    track names hold no credential or token."""
    about = {"clock_offset_us": 1_000_000, "clock_error_us": 3, "pid": 100, "rank": 0}
    document: dict[str, Any] = {
        "traceEvents": [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 9,
             "args": {"name": "fetch https://bob:hunter2@h/x?token=tok123"}},
            {"ph": "X", "name": "OP", "ts": 200_000, "dur": 5, "pid": 1, "tid": 9},
        ],
        "otherData": {"asynctrace": about},
    }  # fmt: skip
    (golden / "profile-r0-step1.python.json").write_text(json.dumps(document))
    out = tmp_path / "trace.json"
    result = run("convert", golden, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    events = json.loads(out.read_text())["traceEvents"]
    tracks = [e["args"]["name"] for e in events if e.get("name") == "thread_name"]
    (profiled,) = [name for name in tracks if name.startswith("profile step 1:")]
    assert "https://h/x" in profiled
    assert "hunter2" not in out.read_text()
    assert "tok123" not in out.read_text()
