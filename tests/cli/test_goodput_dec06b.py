"""`asynctrace goodput` and `report` on a file whose parent ids form a cycle: they end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

CYCLE = "0" * 31 + "1"
GOOD = "0" * 31 + "2"


def _event(trace: str, sid: int, parent: int | None, ts: int, dur: int, **args: Any) -> str:
    fields: dict[str, Any] = {"trace_id": trace, "span_id": f"{sid:x}", **args}
    if parent is not None:
        fields["parent_span_id"] = f"{parent:x}"
    event = {
        "ph": "X",
        "name": f"s{sid}",
        "ts": ts,
        "dur": dur,
        "pid": 1,
        "tid": 1,
        "args": fields,
    }
    return json.dumps(event)


def _run(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asynctrace", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,  # a cycle of parent ids used to hang both commands
    )


def test_goodput_and_report_end_on_a_cycle_of_parent_ids(tmp_path: Path) -> None:
    """Span 1's parent is 2, 2's is 1, then a bucketed span under 1; and a trace with a
    step: both commands end, the step is reported, the cycle is noted."""
    lines = [
        _event(CYCLE, 1, 2, 0, 10),
        _event(CYCLE, 2, 1, 0, 20),
        _event(CYCLE, 3, 1, 0, 25, **{"rl.bucket": "idle"}),
        _event(GOOD, 5, 4, 0, 400_000, **{"rl.bucket": "productive"}),
        _event(GOOD, 4, None, 0, 1_000_000, **{"rl.iteration": 1}),
    ]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "traces-r0.jsonl").write_text("\n".join(lines) + "\n")
    done = _run("goodput", run_dir, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [(s["iteration"], s["productive_s"]) for s in result["steps"]] == [(1, 0.4)]
    assert "1 span closed a cycle of parent ids" in done.stderr
    assert (result["inputs"]["cycles"], result["inputs"]["cycle_leaves"]) == (1, 1)
    assert "1 bucketed span in it counted in no step" in done.stderr
    page = tmp_path / "report.html"
    done = _run("report", run_dir, "-o", page)
    assert done.returncode == 0, done.stderr
    assert "closed a cycle of parent ids" in done.stderr
    assert page.stat().st_size > 0
