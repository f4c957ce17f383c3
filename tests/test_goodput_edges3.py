"""Live goodput and ``asynctrace goodput`` on spans they cannot use as given: times that
are not finite numbers, steps of no duration, bucketed steps, an ``rl.iteration`` that
is not an integer, and leaf names past the histograms' limit. Each is counted (and the
first logged) live, the command line counts the same, and the steps agree."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

import asynctrace as at
from asynctrace.cli._collect import collect
from asynctrace.cli._goodput_document import to_json
from asynctrace.rollup import Rollup

MS = 1_000_000
PROVIDERS = ["fast", "sdk"]
KEYS = ["name", "iteration", "span_id", "start_us", "wall_s", "productive_s", "overhead_s"]
KEYS += ["idle_s", "wasted_s", "unattributed_s", "leaves", "parent_missing"]


@pytest.fixture(autouse=True)
def _no_callbacks() -> Any:
    """Each test registers its own callbacks and leaves none behind."""
    yield
    for fn in at._goodput.callbacks():
        at.remove_step_goodput(fn)


def _configure(tmp_path: Path, provider: str = "fast", **goodput: Any) -> at.Telemetry:
    return at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "provider": provider,
            "goodput": {"metrics": "none", **goodput},
            "schedule_delay_millis": 20,
        }
    )


def _both(directory: Path, grace_s: float = 1.0) -> tuple[list[Any], dict[str, Any], Any]:
    """The live step lines and end line's counters, and the command line's JSON; the
    steps of both are asserted equal."""
    (path,) = directory.glob("goodput-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    live = sorted((x for x in lines if x["kind"] == "step"), key=lambda x: x["start_us"])
    end = lines[-1]
    assert end["kind"] == "end"
    paths = sorted(directory.glob("traces-*.jsonl"))
    offline = to_json(collect(paths, step_name=None, progress=False, prog="test", grace_s=grace_s))
    steps = sorted(offline["steps"], key=lambda x: x["start_us"])
    assert [{k: s[k] for k in KEYS} for s in live] == [{k: s[k] for k in KEYS} for s in steps]
    return live, end["goodput"], offline


def _step(tracer: Any, t0: int, i: int, end: float | None = None) -> None:
    """Step *i* at ``t0 + i * 100 ms`` with a productive leaf of 20 ms."""
    start = t0 + i * 100 * MS
    step = tracer.start_span(
        "rl.step", attributes={"asynctrace.group": "step", "rl.iteration": i}, start_time=start
    )
    leaf = tracer.start_span(
        "rl.generate",
        context=trace.set_span_in_context(step),
        attributes={"rl.bucket": "productive"},
        start_time=start + MS,
    )
    leaf.end(end_time=start + 21 * MS)
    step.end(end_time=start + 50 * MS if end is None else end)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_step_ended_at_a_time_that_is_no_number_holds_no_later_step(
    tmp_path: Path, provider: str, bad: float
) -> None:
    """A step span ended at NaN (or infinity) is skipped and counted, as the command line
    counts its line (``dur`` null): the steps after it are finished as they come, not
    held behind a deadline no time ever passes."""
    seen: list[Any] = []
    at.on_step_goodput(seen.append)
    tel = _configure(tmp_path, provider, grace_s=0.0)
    tracer = tel.provider.get_tracer("t")
    t0 = 1_700_000_000_000 * MS
    _step(tracer, t0, 0, end=bad)
    for i in range(1, 6):
        _step(tracer, t0, i)
    assert tel.shutdown()
    live, counters, offline = _both(tmp_path, grace_s=0.0)
    assert [row["iteration"] for row in live] == [1, 2, 3, 4, 5]
    assert [record.iteration for record in seen] == [1, 2, 3, 4, 5]
    assert counters["steps"] == 5
    assert counters["without_times"] == 1 == offline["inputs"]["without_ids"]
    assert all(row["productive_s"] == pytest.approx(0.02) for row in live)


def test_the_public_rollup_skips_an_event_whose_dur_is_nan() -> None:
    """``Rollup.add`` of an event with a NaN ``dur`` (JSON's ``NaN``) counts it in
    ``without_ids`` and finishes the steps after it."""
    rollup = Rollup(grace_us=0.0)

    def step(span: str, ts: float, dur: float) -> dict[str, Any]:
        args = {"asynctrace.group": "step", "trace_id": "a", "span_id": span}
        return {"ph": "X", "name": "s", "ts": ts, "dur": dur, "args": args}

    rollup.add(step("1", 0, math.nan))
    rollup.add(step("9", math.inf, 5))
    for i in range(2, 6):
        args = {"rl.bucket": "productive", "trace_id": "a", "span_id": f"{i}0"}
        rollup.add(
            {
                "ph": "X",
                "name": "g",
                "ts": i * 10_000,
                "dur": 500,
                "args": args | {"parent_span_id": f"{i}"},
            }
        )
        rollup.add(step(f"{i}", i * 10_000, 1000))
    rows = rollup.finish()
    assert [row.sums[0] for row in rows.steps] == [500, 500, 500, 500]
    assert rows.without_ids == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_step_of_no_duration_is_counted_and_logged_live(
    tmp_path: Path, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A step whose end is before its start is no step: the end line counts it and its
    bucketed leaf (``no_duration_steps``, ``no_duration_leaves``) as the command line
    does, and the first is logged."""
    tel = _configure(tmp_path, provider)
    tracer = tel.provider.get_tracer("t")
    t0 = 1_700_000_000_000 * MS
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        _step(tracer, t0, 0, end=t0 - 40 * MS)  # the clock stepped back during it
        _step(tracer, t0, 1)
        assert tel.shutdown()
    live, counters, offline = _both(tmp_path)
    assert [row["iteration"] for row in live] == [1]
    assert counters["no_duration_steps"] == 1 == offline["inputs"]["no_duration_steps"]
    assert counters["no_duration_leaves"] == 1 == offline["inputs"]["no_duration_leaves"]
    logged = [r.getMessage() for r in caplog.records if "no positive duration" in r.getMessage()]
    assert len(logged) == 1
    assert "Telemetry.goodput.no_duration_steps" in logged[0]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_bucketed_step_is_a_bucketed_span(tmp_path: Path, provider: str) -> None:
    """A step span (group ``step``) that carries ``rl.bucket``: with a bucketed span under
    it, a nested-bucket violation naming it (the inner one counts); with none, it counts
    itself over its whole wall. Live and the command line agree."""
    tel = _configure(tmp_path, provider)
    tracer = tel.provider.get_tracer("t")
    t0 = 1_700_000_000_000 * MS
    outer = tracer.start_span(
        "rl.step",
        attributes={"asynctrace.group": "step", "rl.iteration": 1, "rl.bucket": "overhead"},
        start_time=t0,
    )
    inner = tracer.start_span(
        "rl.generate",
        context=trace.set_span_in_context(outer),
        attributes={"rl.bucket": "productive"},
        start_time=t0 + MS,
    )
    inner.end(end_time=t0 + 50 * MS)
    outer.end(end_time=t0 + 100 * MS)
    alone = tracer.start_span(
        "rl.step",
        attributes={"asynctrace.group": "step", "rl.iteration": 2, "rl.bucket": "idle"},
        start_time=t0 + 200 * MS,
    )
    alone.end(end_time=t0 + 300 * MS)
    assert tel.shutdown()
    live, counters, offline = _both(tmp_path)
    assert [(r["productive_s"], r["overhead_s"], r["idle_s"]) for r in live] == [
        (0.049, 0.0, 0.0),
        (0.0, 0.0, 0.1),
    ]
    assert counters["violations"] == 1
    (violation,) = offline["violations"]
    assert violation["kind"] == "nested-bucket"
    assert [s["name"] for s in violation["spans"]] == ["rl.step", "rl.generate"]
    assert tel.goodput.violations == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_iteration_that_is_no_integer_is_counted_and_logged(
    tmp_path: Path, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A raw span stamped with an ``rl.iteration`` that is not an integer (what a tracer
    provider makes of a numpy integer: its text) is no step by it: counted live
    (``bad_iterations``, the first logged) and by the command line, never silently."""
    tel = _configure(tmp_path, provider)
    tracer = tel.provider.get_tracer("t")
    t0 = 1_700_000_000_000 * MS
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        for i in (1, 2):
            span = tracer.start_span(
                "rl.step", attributes={"rl.iteration": str(i)}, start_time=t0 + i * 100 * MS
            )
            span.end(end_time=t0 + i * 100 * MS + 50 * MS)
        _step(tracer, t0, 3)
        assert tel.shutdown()
    live, counters, offline = _both(tmp_path)
    assert [row["iteration"] for row in live] == [3]
    assert counters["bad_iterations"] == 2 == offline["inputs"]["bad_iterations"]
    logged = [r.getMessage() for r in caplog.records if "not a 64-bit integer" in r.getMessage()]
    assert len(logged) == 1
    assert "'1' (str)" in logged[0]


def test_leaf_values_past_the_instrument_limit_are_in_the_stats(tmp_path: Path) -> None:
    """Leaf names past the 256 leaf-name histograms get no histogram: their values are
    counted in ``Telemetry.goodput.untracked_leaves`` and the end line."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from asynctrace._goodput_metrics import MAX_SPAN_INSTRUMENTS

    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    tel = _configure(tmp_path, metrics=meters)
    tracer = tel.provider.get_tracer("t")
    t0 = 1_700_000_000_000 * MS
    step = tracer.start_span(
        "rl.step", attributes={"asynctrace.group": "step", "rl.iteration": 1}, start_time=t0
    )
    names = MAX_SPAN_INSTRUMENTS + 10
    for j in range(names):
        leaf = tracer.start_span(
            f"rl.phase_{j}",
            context=trace.set_span_in_context(step),
            attributes={"rl.bucket": "productive"},
            start_time=t0 + j * 10_000,
        )
        leaf.end(end_time=t0 + j * 10_000 + 5_000)
    step.end(end_time=t0 + 100 * MS)
    assert tel.shutdown()
    assert tel.goodput.untracked_leaves == 10
    (path,) = tmp_path.glob("goodput-*.jsonl")
    end = json.loads(path.read_text().splitlines()[-1])
    assert end["goodput"]["untracked_leaves"] == 10
