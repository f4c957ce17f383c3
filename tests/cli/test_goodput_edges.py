"""``asynctrace goodput`` at its limits: eviction, forgotten parents, hostile and many ids."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asynctrace._rollup import Rollup

from ._helpers import Result

Run = Callable[..., Result]
TRACE = "0" * 31 + "1"


def _event(
    name: str, sid: int, parent: int | None, ts: int, dur: int, **args: Any
) -> dict[str, Any]:
    fields: dict[str, Any] = {"trace_id": TRACE, "span_id": f"{sid:016x}", **args}
    if parent:
        fields["parent_span_id"] = f"{parent:016x}"
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": fields}


def _write(directory: Path, events: list[dict[str, Any]]) -> Path:
    directory.mkdir()
    events.sort(key=lambda e: e["ts"] + e["dur"])
    path = directory / "traces-r0.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return directory


def _two_steps(directory: Path) -> Path:
    """job > 2 steps (group step), each > an umbrella > 3 productive leaves of 50 ms."""
    events = []
    sid = 100
    for step in (1, 2):
        s0 = step * 1_000_000
        umbrella = 10 + step
        for k in range(3):
            sid += 1
            events.append(
                _event(
                    "rl.gen",
                    sid,
                    umbrella,
                    s0 + k * 100_000,
                    50_000,
                    **{"rl.bucket": "productive", "rl.iteration": step},
                )
            )
        events.append(_event("rl.rollout", umbrella, step, s0, 400_000, **{"rl.iteration": step}))
        events.append(
            _event(
                "rl.step",
                step,
                99,
                s0,
                500_000,
                **{"rl.iteration": step, "asynctrace.group": "step"},
            )
        )
    events.append(_event("rl.job", 99, None, 0, 5_000_000, **{"asynctrace.group": "job"}))
    return _write(directory, events)


def test_spans_given_up_past_max_pending_are_noted_and_counted(tmp_path: Path, run: Run) -> None:
    """--max-pending drops bucketed spans: a note on stderr and counts under inputs."""
    inputs = _two_steps(tmp_path / "evict")
    full = run("goodput", inputs, "--json")
    assert full.code == 0, full.err
    assert [s["productive_s"] for s in full.json()["steps"]] == [0.15, 0.15]
    assert full.json()["inputs"]["evicted"] == 0

    result = run("goodput", inputs, "--json", "--max-pending", "1")
    document = result.json()
    assert document["inputs"]["evicted"] > 0
    assert document["inputs"]["evicted_leaves"] == 6
    assert "given up past --max-pending 1: 6 bucketed spans" in result.err
    text = run("goodput", inputs, "--max-pending", "1")
    assert "given up past --max-pending 1" in text.err
    csv = run("goodput", inputs, "--csv", "--max-pending", "1")
    assert "given up past --max-pending 1" in csv.err


def _finalize_trace(directory: Path, spans_between: int, steps_after: int = 0) -> Path:
    """Step 1's bucketed staging span has a detached, stamped finalize child ending 0.8 s
    after the step, with *spans_between* spans of step 2 ending in between, and
    *steps_after* short steps after the finalize span ends."""
    events = [
        _event(
            "rl.checkpointing",
            3,
            1,
            400_000,
            100_000,
            **{"rl.bucket": "overhead", "rl.iteration": 1},
        ),
        _event("rl.step", 1, 99, 0, 500_000, **{"rl.iteration": 1, "asynctrace.group": "step"}),
        _event("rl.checkpoint.finalize", 4, 3, 450_000, 850_000, **{"rl.iteration": 1}),
        _event(
            "rl.step", 2, 99, 550_000, 1_000_000, **{"rl.iteration": 2, "asynctrace.group": "step"}
        ),
        _event("rl.job", 99, None, 0, 3_000_000, **{"asynctrace.group": "job"}),
    ]
    for k in range(spans_between):
        events.append(
            _event(
                "rl.gen",
                1000 + k,
                2,
                600_000 + k * 100,
                50,
                **{"rl.bucket": "productive", "rl.iteration": 2},
            )
        )
    for i in range(steps_after):
        events.append(
            _event(
                "rl.step",
                5000 + i,
                99,
                1_400_000 + i * 10_000,
                5_000,
                **{"rl.iteration": 3 + i, "asynctrace.group": "step"},
            )
        )
    return _write(directory, events)


def test_a_finalize_span_whose_parent_left_the_window_is_no_step(tmp_path: Path, run: Run) -> None:
    """The finalize span's staging parent forgotten (--window 50): still never a step."""
    inputs = _finalize_trace(tmp_path / "fin", 100)
    result = run("goodput", inputs, "--json", "--window", "50")
    steps = result.json()["steps"]
    assert [(s["name"], s["iteration"]) for s in steps] == [("rl.step", 1), ("rl.step", 2)]
    assert result.json()["total"]["wall_s"] == pytest.approx(1.5)
    assert steps[0]["overhead_s"] == pytest.approx(0.1)


def test_a_finalize_span_is_no_step_however_many_steps_follow(tmp_path: Path, run: Run) -> None:
    """Its staging parent forgotten, then 80 more steps (more than the 64 remembered) end
    before the run does: the finalize span, judged when it arrived, is still no step."""
    inputs = _finalize_trace(tmp_path / "fin", 100, steps_after=80)
    result = run("goodput", inputs, "--json", "--window", "50")
    steps = result.json()["steps"]
    assert len(steps) == 82
    assert {s["name"] for s in steps} == {"rl.step"}
    assert steps[0]["overhead_s"] == pytest.approx(0.1)


def test_an_orphan_stamped_span_outside_any_step_is_still_a_step() -> None:
    """Only a step of the same trace and iteration containing it rules an orphan out."""
    rollup = Rollup()
    rollup.add(
        _event("rl.step", 1, 99, 0, 500_000, **{"rl.iteration": 1, "asynctrace.group": "step"})
    )
    # the same iteration, after the step: a step of its own, its parent missing
    rollup.add(_event("rl.iter", 5, 77, 600_000, 100_000, **{"rl.iteration": 1}))
    # inside the step, another iteration: a step too
    rollup.add(_event("rl.other", 6, 78, 100_000, 100_000, **{"rl.iteration": 2}))
    rows = rollup.finish().steps
    assert [(r.name, r.parent_missing) for r in rows] == [
        ("rl.step", False),
        ("rl.other", True),
        ("rl.iter", True),
    ]


def test_hostile_span_ids_are_skipped_and_counted(tmp_path: Path, run: Run) -> None:
    """Span ids of -1 or past 64 bits never stand for another trace's span."""
    rollup = Rollup()
    for trace in ("a" * 32, "b" * 32):
        rollup.add(
            {
                "ph": "X",
                "name": "step",
                "ts": 0,
                "dur": 10,
                "args": {"trace_id": trace, "span_id": "-1", "rl.iteration": 1},
            }
        )
    rollup.add(
        {
            "ph": "X",
            "name": "step",
            "ts": 0,
            "dur": 10,
            "args": {"trace_id": "c" * 32, "span_id": "1" * 17, "rl.iteration": 1},
        }
    )
    rollup.add(
        {
            "ph": "X",
            "name": "leaf",
            "ts": 0,
            "dur": 10,
            "args": {"trace_id": "c" * 32, "span_id": "1", "parent_span_id": "-2"},
        }
    )
    result = rollup.finish()
    assert (result.bad_ids, result.duplicates, result.steps) == (4, 0, [])

    events = [_event("rl.step", 1, None, 0, 100, **{"rl.iteration": 1})]
    events.append(dict(events[0], args=dict(events[0]["args"], span_id="-1")))
    outcome = run("goodput", _write(tmp_path / "bad", events), "--json")
    assert outcome.code == 0
    assert outcome.json()["inputs"]["bad_ids"] == 1
    assert "1 complete events whose span id is not a 64-bit hex number" in outcome.err


def test_memory_does_not_grow_with_distinct_trace_ids() -> None:
    """200,000 traces of two spans each, window 1000: ids are not kept, memory is flat."""
    rollup = Rollup(window=1000)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(200_000):
            trace = f"{i:032x}"
            rollup.add(
                {
                    "ph": "X",
                    "name": "leaf",
                    "ts": i * 10,
                    "dur": 2,
                    "args": {
                        "trace_id": trace,
                        "span_id": f"{2 * i + 2:016x}",
                        "parent_span_id": f"{2 * i + 1:016x}",
                        "rl.bucket": "productive",
                    },
                }
            )
            rollup.add(
                {
                    "ph": "X",
                    "name": "req",
                    "ts": i * 10,
                    "dur": 5,
                    "args": {"trace_id": trace, "span_id": f"{2 * i + 1:016x}"},
                }
            )
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 5_000_000  # one window's worth, not 31 MB of trace ids
    assert rollup.finish().spans == 400_000


def test_trace_ids_are_reported_as_written() -> None:
    """A hex trace id and another kind of id both come back as written."""
    rollup = Rollup()
    for trace in ("0af7651916cd43dd8448eb211c80319c", "run-7", "0AF7651916CD43DD8448EB211C80319C"):
        rollup.add(
            {
                "ph": "X",
                "name": "step",
                "ts": 0,
                "dur": 10,
                "args": {"trace_id": trace, "span_id": "1", "rl.iteration": 1},
            }
        )
    rows = rollup.finish().steps
    assert sorted(r.trace_id for r in rows) == sorted(
        ["0af7651916cd43dd8448eb211c80319c", "run-7", "0AF7651916CD43DD8448EB211C80319C"]
    )


@pytest.mark.parametrize("middle", [False, True])
def test_a_wait_given_up_still_says_its_bucketed_parent_nests_buckets(
    tmp_path: Path, run: Run, middle: bool
) -> None:
    """--max-pending 2 gives up the wait holding 'rl.inner': its bucketed ancestor
    'rl.outer' (directly, or through an unbucketed span) still breaks the nesting rule, as
    without the limit, and is not counted over its whole interval."""
    step = {"rl.iteration": 1, "asynctrace.group": "step"}
    events = [
        _event("rl.step", 1, None, 0, 1_000_000, **step),
        _event("rl.outer", 2, 1, 0, 500_000, **{"rl.bucket": "productive"}),
        _event("rl.inner", 3, 5 if middle else 2, 100_000, 100_000, **{"rl.bucket": "overhead"}),
        _event("rl.umbrella", 4, 1, 250_000, 400_000),
        _event("rl.x", 6, 4, 260_000, 40_000, **{"rl.bucket": "idle"}),
    ]
    if middle:
        events.append(_event("rl.middle", 5, 2, 50_000, 300_000))
    inputs = _write(tmp_path / "nested", events)
    full = run("goodput", inputs, "--json")
    limited = run("goodput", inputs, "--json", "--max-pending", "2")
    for result in (full, limited):
        assert result.code == 1
        (violation,) = result.json()["violations"]
        assert violation["kind"] == "nested-bucket"
        assert "'rl.outer'" in violation["message"]
        assert "'rl.inner'" in violation["message"]
    (row,) = limited.json()["steps"]
    assert row["productive_s"] == 0.0
    assert limited.json()["inputs"]["evicted"] > 0


_SHAPES: dict[str, list[dict[str, Any]]] = {
    # a bucketed span between: both it and its bucketed parent nest buckets
    "bucketed-between": [
        _event("rl.outer", 2, 1, 0, 600_000, **{"rl.bucket": "productive"}),
        _event("rl.mid", 5, 2, 50_000, 250_000, **{"rl.bucket": "wasted"}),
        _event("rl.inner", 3, 5, 60_000, 20_000, **{"rl.bucket": "overhead"}),
    ],
    # an unbucketed span that ends after its parent, under a bucketed span still open
    "late-child": [
        _event("rl.outer", 2, 1, 0, 600_000, **{"rl.bucket": "productive"}),
        _event("rl.middle", 5, 2, 50_000, 100_000),
        _event("rl.detached", 7, 5, 55_000, 245_000),
        _event("rl.inner", 3, 7, 60_000, 20_000, **{"rl.bucket": "overhead"}),
    ],
    # a stamped span (a candidate step) between the bucketed span and the given-up one
    "stamped-between": [
        _event("rl.outer", 2, 1, 0, 600_000, **{"rl.bucket": "productive"}),
        _event("rl.prompt", 7, 2, 55_000, 245_000, **{"rl.iteration": 1}),
        _event("rl.inner", 3, 7, 60_000, 20_000, **{"rl.bucket": "overhead"}),
    ],
}


@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_a_wait_given_up_keeps_the_nesting_rule_through_any_path(
    tmp_path: Path, run: Run, shape: str
) -> None:
    """--max-pending 2 gives up 'rl.inner''s wait early: 'rl.outer' is still a
    nested-bucket violation, as without the limit, and counts nothing."""
    step = {"rl.iteration": 1, "asynctrace.group": "step"}
    fillers = [  # waits that push 'rl.inner''s out
        _event("rl.umbrella", 4, 1, 90_000, 110_000),
        _event("rl.x", 6, 4, 95_000, 5_000, **{"rl.bucket": "idle"}),
        _event("rl.umbrella2", 8, 1, 96_000, 110_000),
        _event("rl.y", 9, 8, 97_000, 5_000, **{"rl.bucket": "idle"}),
    ]
    if shape == "bucketed-between":  # 'rl.mid''s mark kept: the one that must reach up
        fillers = fillers[:2]
    events = [_event("rl.step", 1, None, 0, 1_000_000, **step), *_SHAPES[shape], *fillers]
    inputs = _write(tmp_path / shape, events)
    nesting = []
    for extra in ((), ("--max-pending", "2")):
        result = run("goodput", inputs, "--json", *extra)
        assert result.code == 1, result.err
        violations = result.json()["violations"]
        assert {v["kind"] for v in violations} == {"nested-bucket"}, extra
        nesting.append(sorted(v["spans"][0]["name"] for v in violations))
        (row,) = result.json()["steps"]
        assert row["productive_s"] == row["wasted_s"] == 0.0, extra
    assert "rl.outer" in nesting[0]
    assert nesting[0] == nesting[1]  # the same spans break the rule, limit or not
