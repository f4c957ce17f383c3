"""The rollup when parents go missing: evicted waits and steps that share an iteration."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from _rollup_helpers import no_step_callbacks, span_event  # noqa: F401 (autouse)

import asynctrace as at
from asynctrace._rollup import Rollup, StepRow

PROMPT = {"rl.iteration": 1}
LEAF = {"rl.iteration": 1, "rl.bucket": "productive"}
STEP = {"rl.iteration": 1, "asynctrace.group": "step"}


def test_an_evicted_step_wait_makes_no_step_of_its_per_prompt_spans() -> None:
    """max_pending passed inside a step: the step's wait is given up (its leaves counted in
    ``evicted_leaves``), but its per-prompt spans wait on for the step and are not steps."""
    rows: list[StepRow] = []
    rollup = Rollup(max_pending=10, on_step=lambda row, _: rows.append(row), keep=False)
    for i in range(3):
        rollup.add(span_event("rl.rollout.prompt", 100 + i, 2, 1000 * i, 50_000, **PROMPT))
    for i in range(12):
        rollup.add(span_event("rl.generate", 200 + i, 2, 100_000 + 10_000 * i, 5_000, **LEAF))
    rollup.add(span_event("rl.step", 2, 1, 0, 1_000_000, **STEP))
    rollup.add(span_event("rl.job", 1, None, 0, 1_100_000, **{"asynctrace.group": "job"}))
    result = rollup.finish()
    assert (result.evicted, result.evicted_leaves) == (1, 10)
    assert [(row.name, row.parent_missing) for row in rows] == [("rl.step", False)]
    assert rows[0].sums[0] == 10_000  # the two leaves that came after the eviction


def test_evicted_candidates_under_a_bucketed_parent_are_not_steps() -> None:
    """A stamped span waiting for a bucketed parent, its wait evicted: when the parent
    arrives (a leaf, the rollup's shortest path) it is ruled out, as without a limit."""
    rows: list[StepRow] = []
    rollup = Rollup(max_pending=4, on_step=lambda row, _: rows.append(row), keep=False)
    rollup.add(span_event("rl.finalize", 10, 5, 1_000, 5_000, **PROMPT))  # waits for 5
    for i in range(3):  # waiting for 6: past 4 at the third, 5's wait is given up
        rollup.add(span_event("rl.generate", 20 + i, 6, 1_000 * i, 1_000, **LEAF))
    rollup.add(span_event("setup", 6, None, 0, 3_000))  # outside any step
    rollup.add(span_event("rl.checkpointing", 5, 3, 0, 2_000, **LEAF))  # bucketed: 10 no step
    rollup.add(span_event("teardown", 3, None, 0, 10_000))  # no step at all
    result = rollup.finish()
    assert (result.evicted, result.evicted_leaves) == (1, 0)
    assert rows == []


def test_evicted_candidates_whose_parent_never_arrives_are_steps_at_the_end() -> None:
    """Rule 3 holds for an evicted wait: its stamped spans are steps with their parent
    missing, once it is known the parent never arrives (finish), not when evicted."""
    rows: list[StepRow] = []
    rollup = Rollup(max_pending=2, on_step=lambda row, _: rows.append(row), keep=False)
    rollup.add(span_event("worker.step", 10, 99, 0, 1_000_000, **PROMPT))  # its job is missing
    for i in range(3):
        rollup.add(span_event("rl.generate", 20 + i, 7, 1_100_000 + i, 1, **LEAF))
    rollup.add(span_event("later", 30, None, 9_000_000, 1))  # far past the grace
    assert rows == []
    result = rollup.finish()
    assert result.evicted >= 1
    assert [(row.name, row.parent_missing) for row in rows] == [("worker.step", True)]


def test_live_max_pending_inside_a_step_makes_one_step_per_iteration(tmp_path: Path) -> None:
    """The live rollup with a small goodput.max_pending: a step's busy phase evicts its
    wait, and no per-prompt span becomes a step (records, file lines, counts)."""
    records: list[Any] = []
    at.on_step_goodput(records.append)
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "goodput": {"metrics": "none", "max_pending": 50},
        }
    )

    async def prompt(i: int) -> None:
        with at.per_prompt_scope(), at.umbrella_span("rollout", "rl.rollout.prompt"):
            await asyncio.sleep(0.005 * i)

    async def main() -> None:
        for iteration in (1, 2):
            with at.iteration_scope(iteration), at.umbrella_span("step", "rl.step"):
                tasks = [asyncio.create_task(prompt(i)) for i in range(4)]
                for _ in range(60):
                    with at.managed_span("policy_update", "rl.policy_update"):
                        await asyncio.sleep(0)
                await asyncio.gather(*tasks)

    try:
        asyncio.run(main())
    finally:
        assert telemetry.shutdown()
    stats = telemetry.goodput
    assert stats is not None
    assert stats.evicted > 0
    assert stats.steps == 2
    assert [(r.name, r.iteration, r.parent_missing) for r in records] == [
        ("rl.step", 1, False),
        ("rl.step", 2, False),
    ]
    (path,) = tmp_path.glob("goodput-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [x["name"] for x in lines if x["kind"] == "step"] == ["rl.step", "rl.step"]


def test_sibling_steps_under_a_missing_parent_are_each_kept() -> None:
    """Two ranks' steps of one iteration under a job span not in the inputs: both steps.
    A detached finalize span whose staging parent was forgotten is still no step."""
    rollup = Rollup(window=3)
    for rank, offset in ((1, 0), (2, 200_000)):
        step, leaf = rank << 8, (rank << 8) + 1
        rollup.add(
            span_event("rl.generate", leaf, step, 1_000_000 + offset, 700_000, **LEAF), rank
        )
        rollup.add(
            span_event("worker.step", step, 0xAA, 1_000_000 + offset, 1_000_000, **PROMPT), rank
        )
    # rank 1's staging span, then a finalize span arriving past the window
    rollup.add(span_event("rl.checkpointing", 0x150, 1 << 8, 1_500_000, 10, **LEAF), 1)
    for i in range(4):
        rollup.add(span_event("other", 0x160 + i, None, 1_600_000, 10), 1)
    rollup.add(span_event("rl.finalize", 0x170, 0x150, 1_500_010, 2_000_000, **PROMPT), 1)
    result = rollup.finish()
    assert [(row.name, row.origin, row.sums[0]) for row in result.steps] == [
        ("worker.step", 1, 700_010),  # with its staging span
        ("worker.step", 2, 700_000),
    ]
    assert all(row.parent_missing for row in result.steps)


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_concurrent_requests_under_remote_parents_are_each_a_step(
    tmp_path: Path, provider: str
) -> None:
    """A server's two overlapping requests of one trace and iteration, each under its
    client's (remote) span: each is a step with its parent missing, live."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "provider": provider,
            "goodput": {"metrics": "none"},
            "schedule_delay_millis": 20,
        }
    )
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("server")
    t0 = time.time_ns()
    try:
        for i, (start, end) in enumerate(((0, 2_000), (500, 3_000))):
            remote = NonRecordingSpan(
                SpanContext(0xABC, 0x1000 + i, is_remote=True, trace_flags=TraceFlags(1))
            )
            ctx = trace.set_span_in_context(remote)
            base = t0 + start * 1_000_000
            request = tracer.start_span(
                "POST /step", context=ctx, start_time=base, attributes={"rl.iteration": 7}
            )
            leaf = tracer.start_span(
                "rl.env.step",
                context=trace.set_span_in_context(request),
                start_time=base + 100_000_000,
                attributes={"rl.iteration": 7, "rl.bucket": "productive"},
            )
            leaf.end(t0 + end * 1_000_000 - 100_000_000)
            request.end(t0 + end * 1_000_000)
        later = tracer.start_span("later", start_time=t0 + 9_000_000_000)
        later.end(t0 + 9_000_000_000)
    finally:
        assert telemetry.shutdown()
    (path,) = tmp_path.glob("goodput-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    steps = sorted((x for x in lines if x["kind"] == "step"), key=lambda x: x["start_us"])
    assert [(s["name"], s["wall_s"], s["productive_s"], s["parent_missing"]) for s in steps] == [
        ("POST /step", 2.0, 1.8, True),
        ("POST /step", 2.5, 2.3, True),
    ]


def test_late_children_of_a_given_up_candidate_do_not_hold_the_limit() -> None:
    """Bucketed spans arriving under a candidate whose wait was given up count nowhere
    (``evicted_leaves``) and take no room under max_pending: later steps count in full."""
    rows: list[StepRow] = []
    rollup = Rollup(max_pending=4, on_step=lambda row, _: rows.append(row), keep=False)
    rollup.add(span_event("rl.finalize", 10, 5, 1_000, 5_000, **PROMPT))  # waits for 5
    for i in range(3):  # waiting for 6: 5's wait is given up, 10 waits on outside it
        rollup.add(span_event("rl.generate", 20 + i, 6, 1_000 * i, 1_000, **LEAF))
    for i in range(5):  # detached bucketed children of 10, ending after it
        rollup.add(span_event("rl.upload", 30 + i, 10, 7_000 + i, 100, **LEAF))
    rollup.add(span_event("setup", 6, None, 0, 3_000))
    for it in (2, 3):
        base = it * 1_000_000
        for i in range(3):
            leaf = {"rl.iteration": it, "rl.bucket": "productive"}
            sid, ts = it * 1000 + i, base + 1000 * i
            rollup.add(span_event("rl.generate", sid, it * 100, ts, 1000, **leaf))
        step = {"rl.iteration": it, "asynctrace.group": "step"}
        rollup.add(span_event("rl.step", it * 100, 1, base, 10_000, **step))
    rollup.add(span_event("rl.job", 1, None, 0, 9_000_000, **{"asynctrace.group": "job"}))
    rollup.add(span_event("rl.checkpointing", 5, 1, 0, 2_000, **LEAF))
    result = rollup.finish()
    assert [(row.iteration, row.sums[0], row.leaves) for row in rows] == [
        (2, 3000.0, 3),
        (3, 3000.0, 3),
    ]
    assert (result.evicted, result.evicted_leaves) == (1, 5)


def test_per_prompt_spans_of_a_step_never_written_are_one_step() -> None:
    """A killed run: the step span of the last iteration never written, its per-prompt
    spans (one process) overlap under that missing parent: one step spanning them all,
    not one each."""
    rollup = Rollup()
    for i in range(8):
        rollup.add(span_event("rl.rollout.prompt", 100 + i, 2, 1000 * i, 500_000, **PROMPT))
        rollup.add(span_event("rl.generate", 200 + i, 100 + i, 1000 * i + 10, 400_000, **LEAF))
    result = rollup.finish()
    assert [(row.name, row.wall, row.parent_missing) for row in result.steps] == [
        ("rl.rollout.prompt", 507_000, True)
    ]


def test_per_prompt_spans_of_different_lengths_under_a_missing_step_are_one_step() -> None:
    """Per-prompt spans of a step never written, of different lengths, arriving in end
    order (a short prompt ends before a longer one that started earlier): still one
    step, from the earliest prompt's start to the last one's end, not one step each for
    the prompts ending first."""
    prompts = [(0, 900_000), (1000, 100_000), (2000, 300_000), (3000, 950_000)]
    rollup = Rollup()
    for i, (start, dur) in sorted(enumerate(prompts), key=lambda p: p[1][0] + p[1][1]):
        rollup.add(span_event("rl.generate", 200 + i, 100 + i, start + 10, dur - 20, **LEAF))
        rollup.add(span_event("rl.rollout.prompt", 100 + i, 2, start, dur, **PROMPT))
    result = rollup.finish()
    assert [(row.name, row.start, row.wall, row.parent_missing) for row in result.steps] == [
        ("rl.rollout.prompt", 0, 953_000, True)
    ]


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_live_per_prompt_spans_of_a_step_never_exported_are_one_step(
    tmp_path: Path, provider: str
) -> None:
    """Live, per-prompt spans under a step span of this process that is never exported
    (a local parent that is not recorded): one step with its parent missing at shutdown,
    not one step each."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "provider": provider,
            "goodput": {"metrics": "none"},
        }
    )
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("trainer")
    t0 = time.time_ns()
    step = NonRecordingSpan(SpanContext(0xABD, 0x2, is_remote=False, trace_flags=TraceFlags(1)))
    try:
        for i in range(6):
            base = t0 + i * 1_000_000
            prompt = tracer.start_span(
                "rl.rollout.prompt",
                context=trace.set_span_in_context(step),
                start_time=base,
                attributes={"rl.iteration": 1},
            )
            leaf = tracer.start_span(
                "rl.generate",
                context=trace.set_span_in_context(prompt),
                start_time=base + 10_000,
                attributes={"rl.iteration": 1, "rl.bucket": "productive"},
            )
            leaf.end(base + 400_000_000)
            prompt.end(base + 500_000_000)
    finally:
        assert telemetry.shutdown()
    (path,) = tmp_path.glob("goodput-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    steps = [x for x in lines if x["kind"] == "step"]
    assert [(s["name"], s["wall_s"], s["parent_missing"]) for s in steps] == [
        ("rl.rollout.prompt", 0.505, True)
    ]


def test_given_up_candidates_are_bounded_by_max_pending() -> None:
    """Stamped spans whose parents never arrive, past max_pending waits: at most
    max_pending of them wait on; the oldest are dropped, counted and noted, no steps."""
    rows: list[StepRow] = []
    rollup = Rollup(max_pending=10, on_step=lambda row, _: rows.append(row), keep=False)
    most = 0
    for i in range(200):
        span = span_event("rl.rollout.prompt", 10_000 + i, 1_000 + i, i * 1000, 500, **PROMPT)
        rollup.add(span)
        most = max(most, sum(len(cands) for cands in rollup._stubs.values()))
    assert most <= 10
    result = rollup.finish()
    assert result.evicted == 190
    assert rollup.dropped_stubs == 180
    assert len(rows) == 20  # the 10 waits open at the end, the 10 candidates kept
    assert all(row.parent_missing for row in rows)
    assert any("180 stamped spans of given-up waits were dropped" in n for n in result.notes)


def test_live_given_up_candidates_dropped_are_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Live, stamped spans dropped past max_pending given-up waits: counted in
    Telemetry.goodput.dropped_stubs and the end line, and logged once at shutdown."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "provider": "fast",
            "goodput": {"metrics": "none", "max_pending": 10},
        }
    )
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("trainer")
    t0 = time.time_ns()
    try:
        for i in range(200):  # per-prompt spans, each under a parent never recorded
            parent = NonRecordingSpan(
                SpanContext(0xABD, 0x1000 + i, is_remote=False, trace_flags=TraceFlags(1))
            )
            span = tracer.start_span(
                "rl.rollout.prompt",
                context=trace.set_span_in_context(parent),
                start_time=t0 + i * 1_000_000,
                attributes={"rl.iteration": i},
            )
            span.end(t0 + i * 1_000_000 + 500_000)
    finally:
        with caplog.at_level("WARNING", logger="asynctrace"):
            assert telemetry.shutdown()
    stats = telemetry.goodput
    assert stats is not None
    assert (stats.evicted, stats.dropped_stubs) == (190, 180)
    (path,) = tmp_path.glob("goodput-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    (end,) = [x for x in lines if x["kind"] == "end"]
    assert end["goodput"]["dropped_stubs"] == 180
    notes = [r.getMessage() for r in caplog.records if "given-up waits" in r.getMessage()]
    assert len(notes) == 1
    assert "180 stamped spans" in notes[0]
    assert "Telemetry.goodput.dropped_stubs" in notes[0]
