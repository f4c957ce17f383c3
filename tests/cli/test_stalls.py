"""Event-loop stalls in ``goodput`` and ``report``: a column and a marker, in no bucket."""

from __future__ import annotations

import asyncio
import csv
import io
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import asynctrace as at
from asynctrace._rollup import Rollup

from ._helpers import Result

Run = Callable[..., Result]


@pytest.fixture
def stalled_run(tmp_path: Path) -> Path:
    """A real chrome trace: a stall mid-step, a stall inside a productive leaf, a clean step."""
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "per_step",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path / "run"),
        }
    )

    async def main() -> None:
        with at.iteration_scope(0):
            async with at.umbrella_span("step", "train.step"):
                await asyncio.sleep(0.02)
                time.sleep(0.2)  # the step is still open when the stall is recorded
                await asyncio.sleep(0.03)
        with at.iteration_scope(1):
            async with at.umbrella_span("step", "train.step"):
                await asyncio.sleep(0.02)
                with at.managed_span("generation", "generate"):
                    time.sleep(0.2)  # the leaf ends before the stall is recorded
                await asyncio.sleep(0.03)
        with at.iteration_scope(2):
            async with at.umbrella_span("step", "train.step"):
                await asyncio.sleep(0.05)

    try:
        asyncio.run(main())
    finally:
        telemetry.shutdown()
    return tmp_path / "run"


def test_goodput_shows_stalled_seconds_per_step_in_no_bucket(run: Run, stalled_run: Path) -> None:
    """stalled_s per step and in the total; buckets and invariants untouched by stalls."""
    result = run("goodput", stalled_run, "--json", "--no-progress")
    assert result.code == 0, result.err
    document = result.json()
    steps = {step["iteration"]: step for step in document["steps"]}
    # The stall's own bound (0.2 s +- 20 ms) is pinned in tests/test_stalls.py; here the
    # column is what matters, with room for a loaded machine's sleep overrun.
    assert abs(steps[0]["stalled_s"] - 0.2) <= 0.05
    assert abs(steps[1]["stalled_s"] - 0.2) <= 0.05
    assert steps[2]["stalled_s"] == 0
    # The stall of step 0 is under no bucketed span: nothing is bucketed there.
    assert steps[0]["productive_s"] == 0
    assert steps[0]["unattributed_s"] == steps[0]["wall_s"]
    # Step 1's stall is inside the productive leaf, which alone counts (once: 0.4 would be
    # twice), with the same room for a sleep's overrun as above.
    assert abs(steps[1]["productive_s"] - 0.2) <= 0.05
    assert document["violations"] == []
    assert document["total"]["stalled_s"] == pytest.approx(
        steps[0]["stalled_s"] + steps[1]["stalled_s"], abs=1e-6
    )
    assert len(document["steps"]) == 3  # a stall span is never a step

    text = run("goodput", stalled_run, "--no-progress")
    assert text.out.splitlines()[0].split()[-1] == "stalled"
    rows = list(csv.DictReader(io.StringIO(run("goodput", stalled_run, "--csv").out)))
    assert [float(row["stalled_s"]) > 0.1 for row in rows] == [True, True, False, True]


def test_report_marks_stalls_in_the_waterfall(run: Run, stalled_run: Path, tmp_path: Path) -> None:
    """The waterfall draws the stall as its own colour and a band; the table has the column."""
    out = tmp_path / "report.html"
    result = run("report", stalled_run, "--step", "1", "-o", out, "--no-progress")
    assert result.code == 0, result.err
    page = out.read_text()
    assert page.count('class="stall-band"') == 1
    assert page.count('class="span-row stall"') == 1
    assert "event-loop stall" in page
    assert "loop stalled" in page
    assert ">stalled</th>" in page
    assert "code.line.number" in page  # the blocking line, in the stall's tooltip


def test_a_stall_span_is_never_a_step() -> None:
    """A stall stamped with rl.iteration under an unstamped parent is not a step."""
    rollup = Rollup()
    stall_args = {
        "asynctrace.group": "loop_stall",
        "rl.iteration": 3,
        "trace_id": "1",
        "span_id": "2",
        "parent_span_id": "1",
    }
    rollup.add(
        {"ph": "X", "name": "asynctrace.loop_stall", "ts": 10, "dur": 60, "args": stall_args}
    )
    job = {"asynctrace.group": "job", "trace_id": "1", "span_id": "1"}
    rollup.add({"ph": "X", "name": "job", "ts": 0, "dur": 100, "args": job})
    result = rollup.finish()
    assert result.steps == []
    assert result.violations == []
