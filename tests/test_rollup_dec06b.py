"""The rollup on inputs no tracer writes but a file can hold: parent-id cycles, events
without a trace id, times no float holds; the per-prompt spans of a step never written,
dispatched one after another; and overlapping loop stalls under one step."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _rollup_helpers import no_step_callbacks, span_event  # noqa: F401 (autouse)

import asynctrace as at
from asynctrace._rollup import Rollup, StepRow

PROMPT = {"rl.iteration": 5}
LEAF = {"rl.iteration": 5, "rl.bucket": "productive"}
STALL = {"asynctrace.group": "loop_stall"}


# -- parent ids in a cycle --------------------------------------------------------

# Runs in a child process: a hang (the defect) must fail the test, not stall the suite.
_CYCLES = """
import itertools, json, sys
from asynctrace.rollup import Rollup
T = "0" * 31 + "1"
def ev(sid, pid, ts, dur, **extra):
    args = {"trace_id": T, "span_id": f"{sid:x}", "parent_span_id": f"{pid:x}", **extra}
    return {"ph": "X", "name": f"s{sid}", "ts": ts, "dur": dur, "args": args}
cases = json.loads(sys.argv[1])
out = []
for spans in cases:
    for order in itertools.permutations(spans):
        rollup = Rollup()
        for sid, pid, ts, dur, extra in order:
            rollup.add(ev(sid, pid, ts, dur, **extra))
        result = rollup.finish()
        out.append([result.cycles, result.cycle_leaves, result.abandoned_leaves,
                    [(row.span_id, row.sums) for row in result.steps], result.notes])
print(json.dumps(out))
"""


def _run_cycles(cases: list[list[Any]]) -> list[Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CYCLES, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=120,  # a cycle used to spin for ever in Rollup.add
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_a_cycle_of_parent_ids_ends_and_is_counted() -> None:
    """Span 1's parent is 2 and 2's is 1, then a bucketed span under 1 (the order that
    hung): it returns, the cycle is counted and noted, and the span under it, in no
    step, is counted too (not silently dropped)."""
    idle = {"rl.bucket": "idle"}
    results = _run_cycles([[[1, 2, 0, 10, {}], [2, 1, 0, 20, {}], [3, 1, 0, 5, idle]]])
    assert len(results) == 6  # every arrival order
    for cycles, cycle_leaves, abandoned_leaves, steps, _ in results:
        assert steps == []
        assert cycles <= 1
        # The leaf is counted nowhere, and said: in the cycle, or waiting for its parent.
        assert cycle_leaves + abandoned_leaves == 1
    cycles, cycle_leaves, _, _, notes = results[0]  # order 1, 2, 3: the repro
    assert (cycles, cycle_leaves) == (1, 1)
    assert any("closed a cycle of parent ids" in note for note in notes), notes


def test_cycles_of_every_shape_and_order_end() -> None:
    """Two- and three-span cycles, stamped or of group step, with a bucketed span under
    them, in every arrival order: each run ends, with the same rows whatever the order.
    A step in the cycle (of group step, or a stamped span whose parent is unstamped)
    stands on its own and takes the span under it; a cycle of no step is counted."""
    idle = {"rl.bucket": "idle"}
    step = {"asynctrace.group": "step"}
    stamped = {"rl.iteration": 1}
    cases = [
        [[3, 1, 0, 5, idle], [1, 2, 0, 10, step], [2, 1, 0, 20, step]],
        [[4, 1, 0, 5, idle], [1, 2, 0, 10, stamped], [2, 3, 0, 20, {}], [3, 1, 0, 30, {}]],
        [[4, 1, 0, 5, idle], [1, 2, 0, 10, stamped], [2, 1, 0, 20, stamped]],
        [[1, 1, 0, 10, idle], [2, 1, 0, 20, stamped]],
    ]
    results = _run_cycles(cases)
    assert len(results) == 6 + 24 + 6 + 2
    one, two = "0000000000000001", "0000000000000002"
    for _, _, _, steps, _ in results[:6]:
        assert steps == [[one, [0.0, 0.0, 5.0, 0.0]], [two, [0.0, 0.0, 0.0, 0.0]]]
    for _, _, _, steps, _ in results[6:30]:
        assert steps == [[one, [0.0, 0.0, 5.0, 0.0]]]
    for cycles, cycle_leaves, _, steps, notes in results[30:36]:
        assert (cycles, cycle_leaves, steps) == (1, 1, [])
        assert any("1 bucketed span in it counted in no step" in note for note in notes)
    for _, _, abandoned_leaves, steps, _ in results[36:]:  # its own parent: never arrives
        assert (abandoned_leaves, steps) == (1, [])


# -- per-prompt spans of a step never written ---------------------------------------

# Six prompts of iteration 5 under a missing step, start and length in seconds, dispatched
# one after another (an async pump): each overlaps the ones before it, not the first.
_PROMPTS: list[tuple[float, float]] = [(0, 3), (1, 4), (2, 2), (3.5, 3), (5, 2), (6.5, 2)]


def _killed_run(prompts: list[tuple[float, float]], origin_of: Any = None, **kw: Any) -> Any:
    events = []
    for i, (start, length) in enumerate(prompts):
        ts, dur = int(start * 1e6), int(length * 1e6)
        origin = origin_of(i) if origin_of else 0
        events.append((span_event("rl.generate", 0x100 + i, 0x10 + i, ts, dur, **LEAF), origin))
        events.append((span_event("rl.prompt", 0x10 + i, 0xFE, ts, dur, **PROMPT), origin))
    events.sort(key=lambda item: item[0]["ts"] + item[0]["dur"])
    rollup = Rollup(**kw)
    for event, origin in events:
        rollup.add(event, origin)
    return rollup.finish()


def test_staggered_prompts_of_a_step_never_written_are_one_step() -> None:
    """A killed run's last iteration: its prompts, overlapping one after another under the
    missing step, are one step from the first start to the last end, with every
    prompt's productive seconds (they overlap: counted twice, said as over-wall)."""
    result = _killed_run(_PROMPTS)
    assert [
        (row.span_id[-2:], row.start, row.end, row.parent_missing) for row in result.steps
    ] == [("10", 0, 8_500_000, True)]
    assert result.steps[0].sums[0] == 16_000_000  # nothing clipped away
    assert result.steps[0].leaves == 6
    assert result.abandoned_leaves == 0
    assert [v.kind for v in result.violations] == ["over-wall"]


def test_a_gap_between_prompts_starts_another_step() -> None:
    """Prompts that do not overlap the step so far (a gap where none runs) are another step;
    those of another process (origin) are each process's own step."""
    result = _killed_run([(0, 1), (0.5, 1), (3, 1), (3.2, 0.1)])
    assert [(row.start, row.end) for row in result.steps] == [
        (0, 1_500_000),
        (3_000_000, 4_000_000),
    ]
    result = _killed_run(_PROMPTS[:2], origin_of=lambda i: i)
    assert [(row.origin, row.start, row.end) for row in result.steps] == [
        (0, 0, 3_000_000),
        (1, 1_000_000, 5_000_000),
    ]


def test_staggered_prompts_of_given_up_waits_are_one_step() -> None:
    """With max_pending, the first prompts' wait given up (their leaves lost, counted): they
    and the prompts that waited after them still make one step at the end, not two."""
    result = _killed_run(_PROMPTS, max_pending=5)
    assert [(row.start, row.end, row.parent_missing) for row in result.steps] == [
        (0, 8_500_000, True)
    ]
    assert (result.evicted, result.evicted_leaves, result.dropped_stubs) == (1, 3, 0)
    assert result.steps[0].sums[0] == 16_000_000 - 9_000_000  # the 3 first prompts' lost


def test_ten_thousand_staggered_prompts_make_one_step() -> None:
    """At scale (one prompt a ms, each 5 ms long): one step, not one per few prompts."""
    rollup = Rollup()
    for i in range(10_000):
        rollup.add(span_event("rl.prompt", i + 2, 1, i * 1000, 5000, **PROMPT))
    result = rollup.finish()
    assert [(row.start, row.end) for row in result.steps] == [(0, 10_004_000)]


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_live_staggered_prompts_of_a_step_never_exported_are_one_step(
    tmp_path: Path, provider: str
) -> None:
    """Live: prompts started 0.3 s apart, 0.5 s each, under a local step never exported:
    one step at shutdown (0 .. 2 s), not one per prompt that starts after the first ended."""
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
    step = NonRecordingSpan(SpanContext(0xABE, 0x2, is_remote=False, trace_flags=TraceFlags(1)))
    try:
        for i in range(6):
            base = t0 + i * 300_000_000
            prompt = tracer.start_span(
                "rl.rollout.prompt",
                context=trace.set_span_in_context(step),
                start_time=base,
                attributes={"rl.iteration": 1},
            )
            leaf = tracer.start_span(
                "rl.generate",
                context=trace.set_span_in_context(prompt),
                start_time=base,
                attributes={"rl.iteration": 1, "rl.bucket": "productive"},
            )
            leaf.end(base + 100_000_000)
            prompt.end(base + 500_000_000)
    finally:
        assert telemetry.shutdown()
    (path,) = tmp_path.glob("goodput-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    steps = [x for x in lines if x["kind"] == "step"]
    assert [(s["wall_s"], s["productive_s"], s["parent_missing"]) for s in steps] == [
        (2.0, 0.6, True)
    ]


# -- events without a trace id ------------------------------------------------------


@pytest.mark.parametrize("trace_id", [None, "", 7, ["x"]], ids=["missing", "empty", "int", "list"])
def test_events_without_a_trace_id_are_skipped_and_counted(trace_id: Any) -> None:
    """Two runs' events without trace ids (the same span ids): none is put in a made-up
    trace, none is taken for another's duplicate; each is counted in without_ids."""
    rollup = Rollup()
    for base, iteration in ((0, 1), (20, 2)):
        gen = span_event("gen", 2, 1, base, 5, **{"rl.bucket": "productive"})
        step = span_event("step", 1, None, base, 10, **{"rl.iteration": iteration})
        for event in (gen, step):
            if trace_id is None:
                del event["args"]["trace_id"]
            else:
                event["args"]["trace_id"] = trace_id
            rollup.add(event)
    result = rollup.finish()
    assert (result.steps, result.without_ids, result.duplicates, result.spans) == ([], 4, 0, 0)


def test_a_missing_trace_id_after_a_good_one_is_still_skipped() -> None:
    """The last trace id is remembered: an event without one right after is not put in it."""
    rollup = Rollup()
    rollup.add(span_event("step", 1, None, 0, 10, **{"rl.iteration": 1}))
    orphan = span_event("gen", 2, 1, 0, 5, **{"rl.bucket": "productive"})
    del orphan["args"]["trace_id"]
    rollup.add(orphan)
    result = rollup.finish()
    assert [row.sums[0] for row in result.steps] == [0.0]
    assert result.without_ids == 1


# -- times no float holds -----------------------------------------------------------


@pytest.mark.parametrize(
    ("ts", "dur"),
    [(10**400, 10), (0, 10**400), (-(10**400), 10**400), (2**1024, 0), (10**400, 1.5)],
    ids=["ts", "end", "start", "just-past", "with-a-float-dur"],
)
def test_times_no_float_holds_are_skipped_and_counted(ts: int, dur: float) -> None:
    """An integer ts (or end) past any float: counted in without_ids, the rollup goes on."""
    rollup = Rollup()
    rollup.add(span_event("step", 1, None, ts, dur, **{"rl.iteration": 1}))
    rollup.add(span_event("next", 2, None, 0, 10, **{"rl.iteration": 2}))
    result = rollup.finish()
    assert [(row.name, row.wall) for row in result.steps] == [("next", 10)]
    assert result.without_ids == 1


def test_add_span_times_no_float_holds_are_skipped_and_counted() -> None:
    rollup = Rollup()
    rollup.add_span("step", 1, 1, 0, 10**400, 10**400 + 10, {"rl.iteration": 1}, None)
    rollup.add_span("next", 1, 2, 0, 0, 10, {"rl.iteration": 2}, None)
    result = rollup.finish()
    assert [(row.name, row.wall) for row in result.steps] == [("next", 10)]
    assert result.without_ids == 1


# -- overlapping loop stalls ----------------------------------------------------------


def test_overlapping_stalls_under_one_step_count_once() -> None:
    """Four servers each blocked 0.1 .. 0.9 s under a 1 s driver step: stalled is 0.8 s,
    the time at least one loop was blocked, not 3.2 s (more than the wall)."""
    rollup = Rollup()
    events = []
    for i in range(4):
        events.append(
            (
                span_event("asynctrace.loop_stall", 0x40 + i, 0x20 + i, 100_000, 800_000, **STALL),
                i + 1,
            )
        )
        events.append((span_event("env.request", 0x20 + i, 1, 50_000, 900_000), i + 1))
    events.append((span_event("rl.step", 1, None, 0, 1_000_000, **{"rl.iteration": 1}), 0))
    for event, origin in events:
        rollup.add(event, origin)
    (row,) = rollup.finish().steps
    assert (row.wall, row.stalled) == (1_000_000, 800_000)


def _union(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def test_stalled_is_the_union_of_the_stalls_in_any_arrival_order() -> None:
    """Random stalls (some outliving the step, some nested under an umbrella, some late):
    stalled is the measure of their union clipped to the step, never above the wall."""
    rnd = random.Random(6)
    for _ in range(300):
        step_start, step_end = rnd.randint(0, 50), rnd.randint(60, 200)
        events = [
            span_event(
                "rl.step", 1, None, step_start, step_end - step_start, **{"rl.iteration": 1}
            )
        ]
        events.append(span_event("umbrella", 2, 1, step_start, step_end - step_start))
        clipped = []
        for k in range(rnd.randint(1, 8)):
            start = rnd.randint(0, 220)
            end = start + rnd.randint(1, 80)
            events.append(
                span_event(
                    "asynctrace.loop_stall",
                    10 + k,
                    rnd.choice((1, 2)),
                    start,
                    end - start,
                    **STALL,
                )
            )
            first, last = max(start, step_start), min(end, step_end)
            if last > first:
                clipped.append((first, last))
        rnd.shuffle(events)
        rollup = Rollup()
        for event in events:
            rollup.add(event)
        (row,) = rollup.finish().steps
        assert row.stalled == _union(clipped), (events, row)
        assert row.stalled <= row.wall


def test_stalls_of_a_folded_candidate_count_once_with_the_steps_own() -> None:
    """A stall under a stamped umbrella (a candidate folded into the step when the step
    arrives) and an overlapping one under the step: counted once."""
    rollup = Rollup()
    rollup.add(span_event("asynctrace.loop_stall", 10, 3, 100, 400, **STALL))
    rollup.add(span_event("rl.prompt", 3, 1, 0, 800, **{"rl.iteration": 1}))
    rollup.add(span_event("asynctrace.loop_stall", 11, 1, 300, 400, **STALL))
    rollup.add(span_event("rl.step", 1, None, 0, 1000, **{"rl.iteration": 1}))
    (row,) = rollup.finish().steps
    assert row.stalled == 600  # 100 .. 700


def test_stalls_of_joined_prompts_count_once() -> None:
    """Overlapping stalls under two prompts of a step never written (one step): once."""
    rollup = Rollup()
    rollup.add(span_event("asynctrace.loop_stall", 10, 3, 100, 400, **STALL))
    rollup.add(span_event("rl.prompt", 3, 0xFE, 0, 600, **PROMPT))
    rollup.add(span_event("asynctrace.loop_stall", 11, 4, 300, 400, **STALL))
    rollup.add(span_event("rl.prompt", 4, 0xFE, 200, 600, **PROMPT))
    (row,) = rollup.finish().steps
    assert (row.start, row.end, row.stalled) == (0, 800, 600)


def test_stall_union_stays_small_under_many_overlapping_stalls() -> None:
    """Thousands of overlapping stalls in one step keep one interval, not one each."""
    rows: list[StepRow] = []
    rollup = Rollup(on_step=lambda row, _: rows.append(row))
    for k in range(5000):
        rollup.add(span_event("asynctrace.loop_stall", 10 + k, 1, k, 1000, **STALL))
    rollup.add(span_event("rl.step", 1, None, 0, 10_000, **{"rl.iteration": 1}))
    (held,) = [item[2] for item in rollup._held]
    assert held.stall_spans == [(0, 5999)]
    rollup.finish()
    assert rows[0].stalled == 5999


def test_permutations_of_two_stalls_and_a_step() -> None:
    for order in itertools.permutations(range(3)):
        events = [
            span_event("asynctrace.loop_stall", 10, 1, 0, 50, **STALL),
            span_event("asynctrace.loop_stall", 11, 1, 25, 50, **STALL),
            span_event("rl.step", 1, None, 0, 100, **{"rl.iteration": 1}),
        ]
        rollup = Rollup()
        for i in order:
            rollup.add(events[i])
        (row,) = rollup.finish().steps
        assert row.stalled == 75, order
