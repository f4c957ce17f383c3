"""Live goodput: the in-process rollup equals the command line's, and the callbacks."""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _goodput_trace import plan, record

import asynctrace as at
from asynctrace._rollup import Rollup
from asynctrace.cli._collect import collect
from asynctrace.cli._goodput_document import to_json

KEYS = [
    "name",
    "iteration",
    "trace_id",
    "span_id",
    "start_us",
    "wall_s",
    "productive_s",
    "overhead_s",
    "idle_s",
    "wasted_s",
    "unattributed_s",
    "goodput",
    "stalled_s",
    "leaves",
    "parent_missing",
]

PROVIDERS = ["fast", "sdk"]


@pytest.fixture(autouse=True)
def _no_callbacks() -> Any:
    """Each test registers its own callbacks and leaves none behind."""
    yield
    for fn in at._goodput.callbacks():
        at.remove_step_goodput(fn)


def _live(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The step lines of the goodput file, in start order, and the other lines."""
    (path,) = directory.glob("goodput-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    steps = sorted((x for x in lines if x["kind"] == "step"), key=lambda x: x["start_us"])
    return steps, [x for x in lines if x["kind"] != "step"]


def _offline(directory: Path, grace_s: float) -> dict[str, Any]:
    paths = sorted(directory.glob("traces-*.jsonl"))
    return to_json(collect(paths, step_name=None, progress=False, prog="test", grace_s=grace_s))


def _assert_equal(directory: Path, grace_s: float = 1.0) -> list[dict[str, Any]]:
    live, _ = _live(directory)
    offline = _offline(directory, grace_s)["steps"]
    assert [{k: s[k] for k in KEYS} for s in live] == [{k: s[k] for k in KEYS} for s in offline]
    return live


def _configure(tmp_path: Path, provider: str, **goodput: Any) -> at.Telemetry:
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


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generated_trace_live_equals_offline(tmp_path: Path, provider: str, seed: int) -> None:
    """Late finalize children, nested steps, per-prompt overlap, zero-leaf steps: equal."""
    telemetry = _configure(tmp_path, provider)
    p = plan(steps=7, seed=seed)
    assert telemetry.provider is not None
    record(telemetry.provider, p)
    assert telemetry.shutdown()
    live = _assert_equal(tmp_path)
    by_iteration = {s["iteration"]: s for s in live}
    assert sorted(by_iteration) == list(range(1, 9))  # the candidate step (8) too
    for iteration, productive_ms in p.expected_productive_ms.items():
        assert by_iteration[iteration]["productive_s"] == round(productive_ms / 1000, 6)
    zero = by_iteration[3]
    assert zero["leaves"] == 0
    assert zero["goodput"] == 0.0
    assert zero["unattributed_s"] > 0
    assert by_iteration[1]["idle_s"] == 0.05  # the detached child, clipped to its step
    assert by_iteration[1]["stalled_s"] == 0.03  # the stall span ended after its step
    assert by_iteration[8]["spans"] == {"rl.train": 0.03}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_demo_live_equals_offline(
    tmp_path: Path, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step of the demo: the goodput file's line equals `asynctrace goodput --json`."""
    pytest.importorskip("fastapi")
    from asynctrace_contrib.demo import run_demo

    monkeypatch.setenv("ASYNCTRACE_PROVIDER", provider)
    run_demo(tmp_path, steps=4, prompts=8)
    live = _assert_equal(tmp_path, grace_s=0.25)  # the demo's goodput.grace_s
    assert [s["iteration"] for s in live] == [1, 2, 3, 4]
    assert all(s["productive_s"] > 0 for s in live)
    _, rest = _live(tmp_path)
    assert rest[-1]["kind"] == "end"
    assert rest[-1]["goodput"]["steps"] == 4


def test_each_line_is_its_record_and_each_record_a_whole_dataclass(tmp_path: Path) -> None:
    """The file's lines are the callbacks' records' ``to_dict()``, keys in order; a record
    equals the same fields through the dataclass's own ``__init__``."""
    import dataclasses

    records: list[at.StepGoodput] = []
    at.on_step_goodput(records.append)
    telemetry = _configure(tmp_path, "fast")
    assert telemetry.provider is not None
    record(telemetry.provider, plan(steps=7, seed=0))
    assert telemetry.shutdown()
    path = next(tmp_path.glob("goodput-*.jsonl"))
    lines = [json.loads(line) for line in path.read_text().splitlines()][:-1]  # the end line
    assert len(lines) == len(records) == 8
    for line, step in zip(lines, records, strict=True):
        assert list(line) == [*step.to_dict(), "time", "exporters"]
        assert {k: line[k] for k in step.to_dict()} == step.to_dict()
        assert step == dataclasses.replace(step)
        assert list(vars(step)) == [f.name for f in dataclasses.fields(step)]


def test_a_step_finishes_once_a_span_ends_past_its_grace() -> None:
    """A bucketed child arriving after its step finished is not counted, and is reported."""
    rows: list[Any] = []
    rollup = Rollup(grace_us=100.0, on_step=lambda row, found: rows.append(row), keep=False)
    ids = {"trace_id": 1}

    def span(name: str, sid: int, parent: int, start: int, end: int, **attrs: Any) -> None:
        rollup.add_span(name, ids["trace_id"], sid, parent, start, end, attrs, None)

    span("leaf", 2, 1, 10, 50, **{"rl.bucket": "productive"})
    span("step", 1, 0, 0, 100, **{"asynctrace.group": "step", "rl.iteration": 1})
    assert rows == []  # within its grace: a late child may still come
    span("late", 3, 1, 90, 150, **{"rl.bucket": "productive"})  # counts: 10 µs inside
    assert rows == []
    span("other", 9, 0, 150, 201, **{"asynctrace.group": "x"})  # 201 > 100 + 100
    assert [(r.name, r.sums[0], r.leaves) for r in rows] == [("step", 50.0, 2)]
    span("too late", 4, 1, 95, 300, **{"rl.bucket": "productive"})
    assert rows[0].sums[0] == 50.0
    assert rollup.violation_count == 1
    assert rollup.finish().steps == []  # keep=False: the rows went to on_step only


def test_memory_is_bounded_by_open_steps() -> None:
    """10,000 steps through a keep=False rollup: only the window and open waits remain."""
    rollup = Rollup(window=1000, on_step=lambda row, found: None, keep=False, max_pending=100)
    sid = 10
    for i in range(10_000):
        step = sid
        start = i * 2_000_000  # a step every 2 s (grace: 1 s)
        for k in range(5):
            sid += 1
            rollup.add_span(
                "leaf", 7, sid, step, start + k * 100_000, start + k * 100_000 + 50_000,
                {"rl.bucket": "productive"}, None,
            )  # fmt: skip
        rollup.add_span(
            "step", 7, step, 1, start, start + 900_000, {"asynctrace.group": "step"}, None
        )
        sid += 1
    assert len(rollup._home) <= 1000
    assert len(rollup._pending) <= 2  # the job's group, and the open step's
    assert len(rollup._held) <= 2
    assert rollup.finish().steps == []


def test_the_window_tracks_one_object_per_run_of_siblings() -> None:
    """Leaves of one name under one parent share their window entry.

    The window keeps what it remembers for tens of thousands of spans, long
    enough to reach the collector's oldest generation; an object per span
    there makes every full collection longer and more frequent, on whichever
    thread allocates. Siblings share one, and the rollup's numbers stay those
    of the spans.
    """
    rows: list[Any] = []
    rollup = Rollup(on_step=lambda row, found: rows.append(row), keep=False, grace_us=0.0)
    sid = 10
    for i in range(200):
        step = sid
        start = i * 1_000_000
        for k in range(50):
            sid += 1
            name = "generate" if k % 10 else "reward"  # runs of nine, then one other
            rollup.add_span(
                name, 7, sid, step, start + k * 10_000, start + k * 10_000 + 5_000,
                {"rl.bucket": "productive" if k % 10 else "overhead", "rl.iteration": i}, None,
            )  # fmt: skip
        rollup.add_span(
            "step", 7, step, 1, start, start + 900_000,
            {"asynctrace.group": "step", "rl.iteration": i}, None,
        )  # fmt: skip
        sid += 1
    rollup.finish()
    entries = list(rollup._home.values())
    assert len(entries) == 200 * 51
    distinct = {id(entry) for entry in entries}
    assert len(distinct) == 200 * 11  # a step's own, and 10 runs of siblings (9 + 1) each
    assert [(r.iteration, r.sums[0], r.sums[1], r.leaves) for r in rows[:2]] == [
        (0, 45 * 5_000.0, 5 * 5_000.0, 50),
        (1, 45 * 5_000.0, 5 * 5_000.0, 50),
    ]
    assert [r.phases for r in rows[:1]] == [{"generate": 45 * 5_000.0, "reward": 5 * 5_000.0}]


# -- callbacks -----------------------------------------------------------------


async def _steps_with_loop_probe(steps: int) -> tuple[list[float], float]:
    """Run *steps* small steps; how long each step's end took on the loop, and the
    longest the loop went without running a probe that ticks every 2 ms."""
    ends: list[float] = []
    longest = 0.0
    stop = False

    async def probe() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    task = asyncio.create_task(probe())
    for i in range(1, steps + 1):
        with at.iteration_scope(i):
            step = at.umbrella_span("step", "rl.step")
            step.__enter__()
            with at.managed_span("policy_update", "rl.policy_update"):
                await asyncio.sleep(0.003)
            began = time.perf_counter()
            step.__exit__(None, None, None)
            ends.append(time.perf_counter() - began)
        await asyncio.sleep(0.003)
    stop = True
    await task
    return ends, longest


@pytest.mark.parametrize("kind", ["raises", "blocks", "slow"])
def test_callbacks_never_stall_the_loop_nor_lose_records(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A callback that raises, blocks for 1 s or is slow: the loop runs on, nothing is lost."""
    seen: list[int] = []
    gate = threading.Event()

    def callback(record: at.StepGoodput) -> None:
        assert record.iteration is not None
        seen.append(record.iteration)
        if kind == "raises":
            raise RuntimeError("boom")
        if kind == "blocks" and len(seen) == 1:
            gate.wait(1.0)
        if kind == "slow":
            time.sleep(0.02)

    at.on_step_goodput(callback)
    telemetry = _configure(tmp_path, "fast", grace_s=0, file=False)
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        ends, longest = asyncio.run(_steps_with_loop_probe(40))
        # Ending a step never waits for a callback: a wait would make every end
        # last the slow callback's 20 ms (the median) or one end the blocking
        # callback's 1 s (the longest); a loaded machine may hold any one end
        # off the CPU for a while, but not half of them, nor for 0.5 s.
        assert statistics.median(ends) < 0.015, ends
        assert max(ends) < 0.5, ends
        # The loop kept running meanwhile: a callback run on it, or anything else that
        # held it for the blocking callback's 1 s, would stop the probe that long.
        assert longest < 0.5, longest
        assert telemetry.flush()
        deadline = time.monotonic() + 5
        while len(seen) < 39 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert telemetry.shutdown()
    assert seen == list(range(1, 41))
    stats = telemetry.goodput
    assert stats is not None
    assert stats.dropped == 0
    assert stats.delivered == 40
    if kind == "raises":
        assert stats.callback_errors == 40
        assert sum("goodput callback" in r.getMessage() for r in caplog.records) == 1


def test_a_full_callback_queue_drops_and_counts(tmp_path: Path) -> None:
    """Past goodput.callback_queue records behind, records are dropped and counted."""
    gate = threading.Event()
    seen: list[int] = []

    def stuck(record: at.StepGoodput) -> None:
        seen.append(record.iteration or 0)
        gate.wait(5)

    at.on_step_goodput(stuck)
    telemetry = _configure(tmp_path, "fast", grace_s=0, file=False, callback_queue=3)
    asyncio.run(_steps_with_loop_probe(10))
    assert telemetry.flush()
    stats = telemetry.goodput
    assert stats is not None
    assert stats.steps >= 9
    assert stats.dropped >= 5
    gate.set()
    telemetry.shutdown()


def test_callbacks_alone_turn_the_rollup_on(tmp_path: Path) -> None:
    """With goodput unset, a registered callback is enough (no file is written)."""
    seen: list[at.StepGoodput] = []
    at.on_step_goodput(seen.append)
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["memory"],
            "span_groups": "all",
            "output_dir": str(tmp_path),
        }
    )
    asyncio.run(_steps_with_loop_probe(2))
    telemetry.shutdown()
    assert [r.iteration for r in seen] == [1, 2]
    assert list(tmp_path.iterdir()) == []
    assert at.remove_step_goodput(seen.append)
    assert not at.remove_step_goodput(seen.append)


def test_goodput_false_keeps_it_off_even_with_callbacks(tmp_path: Path) -> None:
    """goodput: false wins over a registered callback."""
    at.on_step_goodput(print)
    telemetry = at.configure({"enabled": True, "exporters": ["memory"], "goodput": False})
    assert telemetry.goodput is None
    telemetry.shutdown()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"metrics": "statsd"}, "goodput.metrics: 'statsd' is not accepted; accepted: global"),
        ({"grace": 1}, "goodput: unknown key 'grace'; accepted keys: file, metrics"),
        ({"callback_queue": 0}, "goodput.callback_queue: 0 is not accepted; accepted: an integer"),
        ({"step_name": "("}, "goodput.step_name: '(' is not accepted"),
        ("sometimes", "goodput: 'sometimes' is not accepted; accepted: true, false, or a mapping"),
    ],
)
def test_configuration_errors_name_key_value_and_accepted(value: Any, message: str) -> None:
    """A bad goodput block fails configure with the key, the value and what is accepted."""
    with pytest.raises(at.ConfigurationError, match=message.replace("(", r"\(")):
        at.configure({"enabled": True, "exporters": ["memory"], "goodput": value})


def test_environment_variable_turns_it_on(tmp_path: Path) -> None:
    """ASYNCTRACE_GOODPUT=1 turns the live rollup on with its defaults."""
    config = at.TelemetryConfig.from_env({"ASYNCTRACE_ENABLED": "1", "ASYNCTRACE_GOODPUT": "1"})
    assert isinstance(config.goodput, at._goodput_settings.GoodputSettings)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_on_the_fast_provider_the_rollup_rides_on_the_chrome_writer(
    tmp_path: Path, provider: str
) -> None:
    """Fast provider and chrome: one queue and one export thread for both; SDK: two.

    The records are the same either way (the live-equals-offline tests run
    on both); here, what runs where, and that a span ends up counted once.
    """
    telemetry = _configure(tmp_path, provider)
    try:
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step"):
            with at.managed_span("generation", "rl.generate", bucket=at.Bucket.PRODUCTIVE):
                pass
        assert telemetry.flush()
        threads = sorted(
            t.name for t in threading.enumerate() if t.name.startswith("asynctrace-export-")
        )
        queues = sorted(telemetry.stats())
    finally:
        assert telemetry.shutdown()
    if provider == "fast":
        assert (threads, queues) == (["asynctrace-export-chrome"], ["chrome"])
    else:
        assert threads == ["asynctrace-export-chrome", "asynctrace-export-goodput"]
        assert queues == ["chrome", "goodput"]
    stats = telemetry.goodput
    assert stats is not None
    assert stats.steps == 1
    lines = (tmp_path / "goodput-r0.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    assert record["iteration"] == 1
    assert record["exporters"]["chrome"][0] >= 2  # what the chrome queue had written by then


# -- parents that never arrive, bounds, lost records ---------------------------------


def _wait_for(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)


def _end_line(directory: Path) -> dict[str, Any]:
    _, rest = _live(directory)
    (end,) = (x for x in rest if x["kind"] == "end")
    goodput: dict[str, Any] = end["goodput"]
    return goodput


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_remote_parent_is_missing_at_once(tmp_path: Path, provider: str) -> None:
    """Spans under another process's span: settled once the grace has passed.

    The parent never arrives in this process, so nothing waits for it longer
    than the grace (a parent in this process ends that soon after its
    child): the records come while the program runs (not at shutdown),
    nothing is left awaited, and they equal what `asynctrace goodput` reads
    from the file.
    """
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    telemetry = _configure(tmp_path, provider)
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("worker")
    t0 = time.time_ns()
    for i in range(5):
        remote = NonRecordingSpan(
            SpanContext(0xABC, 0x1000 + i, is_remote=True, trace_flags=TraceFlags(1))
        )
        ctx = trace.set_span_in_context(remote)
        base = t0 + i * 3_000_000_000
        step = tracer.start_span(
            "worker.step", context=ctx, start_time=base, attributes={"rl.iteration": i}
        )
        gen = tracer.start_span(
            "gen",
            context=trace.set_span_in_context(step),
            start_time=base,
            attributes={"rl.bucket": "productive"},
        )
        gen.end(base + 500_000_000)
        step.end(base + 1_000_000_000)
        sync = tracer.start_span(
            "sync", context=ctx, start_time=base, attributes={"rl.bucket": "overhead"}
        )
        sync.end(base + 2_000_000_000)
    try:
        assert telemetry.flush()
        _wait_for(lambda: telemetry.goodput is not None and telemetry.goodput.steps >= 4)
        stats = telemetry.goodput
        assert stats is not None
        assert stats.steps == 4  # the last one is within its grace
        assert stats.awaited_parents <= 1  # the last remote parent, within its grace
    finally:
        assert telemetry.shutdown()
    live = _assert_equal(tmp_path)
    assert [s["iteration"] for s in live] == [0, 1, 2, 3, 4]
    assert all(s["parent_missing"] and s["productive_s"] == 0.5 for s in live)
    assert all(s["overhead_s"] == 0.0 for s in live)
    end = _end_line(tmp_path)
    assert (end["awaited_parents"], end["abandoned"], end["abandoned_leaves"]) == (0, 0, 0)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_remote_parent_open_in_this_process_is_waited_for(tmp_path: Path, provider: str) -> None:
    """An in-process server called with the client's ``traceparent``: its span's parent is
    remote, but open here. It is waited for, so the server's leaf counts in the client's
    step live, as `asynctrace goodput` counts it from the file."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext

    telemetry = _configure(tmp_path, provider)
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("server")
    try:
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step"):
            client = at.start_span("per_prompt", "POST")
            sent = client.get_span_context()
            carried = NonRecordingSpan(
                SpanContext(
                    sent.trace_id, sent.span_id, is_remote=True, trace_flags=sent.trace_flags
                )
            )
            server = tracer.start_span("server", context=trace.set_span_in_context(carried))
            leaf = tracer.start_span(
                "score",
                context=trace.set_span_in_context(server),
                attributes={"rl.bucket": "productive"},
            )
            time.sleep(0.01)
            leaf.end()
            server.end()
            at.end_span(client)
    finally:
        assert telemetry.shutdown()
    (step,) = _assert_equal(tmp_path)
    assert step["productive_s"] > 0
    assert not step["parent_missing"]


def test_waiting_leaves_count_against_max_pending(tmp_path: Path) -> None:
    """Leaves piling up under a parent still open count against goodput.max_pending."""
    telemetry = _configure(tmp_path, "fast", max_pending=1000)
    try:
        with at.umbrella_span("job", "rl.job"):
            for _ in range(5000):
                with at.managed_span("data_plane", "rl.weight_sync", bucket=at.Bucket.OVERHEAD):
                    pass
            assert telemetry.flush()
            _wait_for(lambda: telemetry.goodput is not None and telemetry.goodput.evicted > 0)
            stats = telemetry.goodput
            assert stats is not None
            assert stats.evicted >= 4
            assert stats.evicted_leaves >= 4000
            assert stats.awaited_parents <= 1
    finally:
        assert telemetry.shutdown()


def test_waits_left_at_shutdown_are_counted_in_the_end_line(tmp_path: Path) -> None:
    """A parent that never ended: the end line counts its wait and the leaf given up."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    telemetry = _configure(tmp_path, "fast")
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("test")
    local = NonRecordingSpan(SpanContext(0xABC, 0x99, is_remote=False, trace_flags=TraceFlags(1)))
    tracer.start_span(
        "sync", context=trace.set_span_in_context(local), attributes={"rl.bucket": "overhead"}
    ).end()
    assert telemetry.shutdown()
    end = _end_line(tmp_path)
    assert (end["awaited_parents"], end["abandoned"], end["abandoned_leaves"]) == (1, 1, 1)


def test_records_that_cannot_be_written_are_counted(tmp_path: Path) -> None:
    """The records' file replaced by a directory: the lines that cannot go are counted."""
    telemetry = _configure(tmp_path, "fast", grace_s=0.0)
    path = tmp_path / "goodput-r0.jsonl"
    try:
        for i in range(1, 4):
            with at.iteration_scope(i), at.umbrella_span("step", "rl.step"):
                with at.managed_span("generation", "rl.generate", bucket=at.Bucket.PRODUCTIVE):
                    time.sleep(0.002)
            assert telemetry.flush()
            if i == 1:
                _wait_for(lambda: path.exists() and path.stat().st_size > 0)
                path.unlink()
                path.mkdir()  # reopening it fails from now on
    finally:
        assert telemetry.shutdown()
    stats = telemetry.goodput
    assert stats is not None
    assert stats.steps == 3
    assert stats.lost_records >= 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_leaves_under_per_prompt_spans_are_counted(tmp_path: Path, provider: str) -> None:
    """A step's leaves count those under its per-prompt spans (live and command line)."""
    telemetry = _configure(tmp_path, provider)
    with at.iteration_scope(7), at.umbrella_span("step", "rl.step"):
        with at.umbrella_span("per_prompt", "rl.prompt"):
            for _ in range(3):
                with at.managed_span("generation", "rl.generate", bucket=at.Bucket.PRODUCTIVE):
                    pass
        with at.managed_span("generation", "rl.generate", bucket=at.Bucket.PRODUCTIVE):
            pass
    assert telemetry.shutdown()
    (step,) = _assert_equal(tmp_path)
    assert step["leaves"] == 4


class _Iteration(enum.IntEnum):
    THIRD = 3


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("iteration", "expected"),
    [(_Iteration.THIRD, [3]), (-5, [-5]), (2**63, []), (2**64, []), (-(2**63) - 1, [])],
)
def test_iteration_types_live_equals_offline(
    tmp_path: Path, provider: str, iteration: int, expected: list[int]
) -> None:
    """An int subclass is an iteration; one outside 64 bits is none, live and offline alike."""
    telemetry = _configure(tmp_path, provider)
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("test")
    from opentelemetry import trace

    step = tracer.start_span("rl.step", attributes={"rl.iteration": iteration})
    gen = tracer.start_span(
        "gen", context=trace.set_span_in_context(step), attributes={"rl.bucket": "productive"}
    )
    gen.end()
    step.end()
    assert telemetry.shutdown()
    live = _assert_equal(tmp_path)
    assert [s["iteration"] for s in live] == expected
    assert all(type(s["iteration"]) is int for s in live)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_attribute_named_parent_span_id_on_a_root_is_not_its_parent(
    tmp_path: Path, provider: str
) -> None:
    """The trace file gives a root no parent, whatever its attributes: a root step stays one."""
    telemetry = _configure(tmp_path, provider)
    with at.umbrella_span(
        "step", "rl.step", attributes={"rl.iteration": 1, "parent_span_id": "upstream-7"}
    ):
        with at.managed_span("generation", "rl.generate", bucket=at.Bucket.PRODUCTIVE):
            time.sleep(0.002)
    assert telemetry.shutdown()
    (step,) = _assert_equal(tmp_path)
    assert not step["parent_missing"]
    (trace_path,) = tmp_path.glob("traces-*.jsonl")
    events = [json.loads(line) for line in trace_path.read_text().splitlines()]
    (root,) = [e for e in events if e.get("name") == "rl.step"]
    assert "parent_span_id" not in root["args"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_leaf_outliving_its_per_prompt_span_is_clipped_to_the_step(
    tmp_path: Path, provider: str
) -> None:
    """A per-prompt span is taken for a step until its parent arrives; it never clips."""
    from opentelemetry import trace

    telemetry = _configure(tmp_path, provider)
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("test")
    ms = 1_000_000
    t0 = time.time_ns()
    step = tracer.start_span(
        "rl.step", start_time=t0, attributes={"rl.iteration": 7, "asynctrace.group": "step"}
    )
    prompt = tracer.start_span(
        "rl.prompt",
        context=trace.set_span_in_context(step),
        start_time=t0 + 5 * ms,
        attributes={"rl.iteration": 7},
    )
    reward = tracer.start_span(
        "reward",
        context=trace.set_span_in_context(prompt),
        start_time=t0 + 40 * ms,
        attributes={"rl.bucket": "productive", "rl.iteration": 7},
    )
    prompt.end(t0 + 50 * ms)
    assert telemetry.flush()  # the per-prompt span arrives first, then its child
    reward.end(t0 + 90 * ms)
    assert telemetry.flush()
    step.end(t0 + 100 * ms)
    assert telemetry.shutdown()
    (row,) = _assert_equal(tmp_path)
    assert row["productive_s"] == 0.05  # [40, 90] ms inside the step, not cut at 50
    assert row["leaves"] == 1


def test_records_that_fail_to_go_out_count_as_lost_records_not_failed_spans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch whose spans were rolled up but whose records could not be written (an
    error that is not an ``OSError``): the records are counted lost, and no span of the
    batch is counted failed, neither by the rollup nor by the chrome writer's tee."""
    from asynctrace import FastTracerProvider
    from asynctrace._goodput_settings import GoodputSettings
    from asynctrace.export._along_chrome import AlongChrome
    from asynctrace.export._goodput_sink import GoodputSink

    class Collect:  # an export queue that only keeps the ended spans
        def __init__(self) -> None:
            self.spans: list[Any] = []

        def put(self, span: Any) -> None:
            self.spans.append(span)

        def force_flush(self, timeout_millis: int = 0) -> bool:
            return True

        def shutdown(self) -> None:
            pass

    provider = FastTracerProvider()
    queue = Collect()
    provider.add_queue(queue)
    tracer = provider.get_tracer("test")
    for step in (1, 2):  # the second step's spans, ending later, finish the first
        step_attributes = {"asynctrace.group": "step", "rl.iteration": step}
        with tracer.start_as_current_span("rl.step", attributes=step_attributes):
            leaf_attributes = {"rl.bucket": "productive", "rl.iteration": step}
            with tracer.start_as_current_span("rl.generate", attributes=leaf_attributes):
                time.sleep(0.001)
    spans = queue.spans
    assert len(spans) == 4

    class Writer:
        def export(self, batch: list[Any]) -> tuple[int, int]:
            return len(batch), 0

        def flush(self) -> None:
            pass

        def shutdown(self) -> None:
            pass

    sink = GoodputSink(
        GoodputSettings(metrics="none", grace_s=0.0), path=tmp_path / "goodput.jsonl"
    )
    assert sink._file is not None

    def broken(data: bytes, lines: int | None = None) -> tuple[int, OSError | None]:
        raise RuntimeError("not an OSError")

    sink._file.write = broken  # type: ignore[method-assign]
    tee = AlongChrome(Writer(), sink)
    with caplog.at_level(logging.WARNING, "asynctrace"):
        assert tee.export(spans) == (4, 0)
    stats = sink.stats()
    assert (stats.steps, sink.failed) == (1, 0)
    assert sink.lost_records == 1  # the step's line
    assert "not an OSError" in caplog.text
    sink.shutdown()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_concurrent_bucketed_leaves_are_noted_as_overlapping_offline(
    tmp_path: Path, provider: str
) -> None:
    """Two tasks' bucketed leaves running at once count one stretch of wall clock twice,
    short of the step's wall: not an invariant broken (no violation, live or offline),
    but ``asynctrace goodput`` notes the steps, the time counted twice (at least) and
    the first pair. A step of sequential leaves adds nothing to it."""
    telemetry = _configure(tmp_path, provider)

    async def generate() -> None:
        async with at.managed_span("generation", "rl.generate"):
            await asyncio.sleep(0.05)

    async def steps() -> None:
        for step in (1, 2, 3):
            with at.iteration_scope(step):
                async with at.umbrella_span("step", "rl.step"):
                    if step == 1:
                        await asyncio.gather(generate(), generate())
                    else:
                        await generate()
                    # The step is more than its leaves, by more than a leaf: on a loaded
                    # host a 50 ms leaf took 68 ms, and two of them outgrew a 60 ms tail.
                    await asyncio.sleep(0.2)

    asyncio.run(steps())
    assert telemetry.shutdown()
    live = _assert_equal(tmp_path)
    assert [s["violations"] for s in live] == [[], [], []]
    assert live[0]["productive_s"] < live[0]["wall_s"]  # not an over-wall
    paths = sorted(tmp_path.glob("traces-*.jsonl"))
    result = collect(paths, step_name=None, progress=False, prog="test").result
    assert result.violations == []
    (note,) = [n for n in result.notes if "overlap" in n]
    assert note.startswith("1 step count bucketed spans that overlap")
    assert note.count("'rl.generate'") == 2
    assert "rl.iteration=1" in note
    twice = float(note.split("at least ")[1].split(" s")[0])
    assert 0.04 < twice <= live[0]["productive_s"] / 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_leaf_with_no_time_inside_its_step_is_not_counted_in_its_leaves(
    tmp_path: Path, provider: str
) -> None:
    """A detached bucketed child that runs wholly after its step (within the grace) is in
    the step's subtree but adds no second to it: ``leaves`` counts the leaves that add
    time, live and offline alike."""
    telemetry = _configure(tmp_path, provider)

    async def after_the_step() -> None:
        await asyncio.sleep(0.03)
        async with at.managed_span("generation", "rl.generate.late"):
            await asyncio.sleep(0.01)

    async def main() -> None:
        with at.iteration_scope(1):
            async with at.umbrella_span("step", "rl.step"):
                task = asyncio.create_task(after_the_step())
                async with at.managed_span("generation", "rl.generate"):
                    await asyncio.sleep(0.01)
            await task

    asyncio.run(main())
    assert telemetry.shutdown()
    (step,) = _assert_equal(tmp_path)
    assert step["leaves"] == 1
    assert list(step["spans"]) == ["rl.generate"]
