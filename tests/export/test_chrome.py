"""The Chrome Trace Event exporter: format, tracks that always nest, crash safety."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _fuzz
import anyio
import pytest
from _budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from asynctrace.export import ChromeTraceProcessor, read_chrome_trace
from asynctrace.export._tracks import TrackAssigner

CHILD = Path(__file__).parent.parent / "_telemetry_child.py"


def assert_tracks_nest(events: list[dict[str, Any]]) -> None:
    """On every (pid, tid), any two complete events are disjoint or one contains the other."""
    by_track: dict[tuple[Any, Any], list[tuple[int, int]]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            by_track[event["pid"], event["tid"]].append((event["ts"], event["ts"] + event["dur"]))
    for track, intervals in by_track.items():
        intervals.sort(key=lambda iv: (iv[0], -iv[1]))
        stack: list[int] = []
        for start, end in intervals:
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], (
                f"track {track}: [{start}, {end}] crosses {stack}"
            )
            stack.append(end)


class Pipeline:
    """A provider with the chrome processor and an in-memory exporter (the ground truth)."""

    def __init__(self, path: Path, **limits: Any) -> None:
        self.path = path
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.chrome = ChromeTraceProcessor(
            path, resource_attributes={"asynctrace.rank": 3, "asynctrace.role": "driver"}, **limits
        )
        self.memory = InMemorySpanExporter()
        self.provider.add_span_processor(self.chrome)
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("test")

    def events(self, *, lossless: bool = True) -> list[dict[str, Any]]:
        assert self.chrome.force_flush(10_000) is lossless  # False: something was not written
        trace_file = read_chrome_trace(self.path)
        assert trace_file.skipped == 0
        return trace_file.events

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    """A fresh chrome pipeline writing to tmp_path."""
    made = Pipeline(tmp_path / "traces-r3.jsonl")
    yield made
    made.close()


def assert_each_span_once(pipeline: Pipeline, events: list[dict[str, Any]]) -> None:
    """Every finished span is one complete event with its own start and duration (in µs)."""
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            by_id[event["args"]["span_id"]].append(event)
    spans = pipeline.memory.get_finished_spans()
    assert len(by_id) == len(spans)
    for span in spans:
        (event,) = by_id[f"{span.context.span_id:016x}"]
        assert span.start_time is not None
        assert span.end_time is not None
        assert event["name"] == span.name
        assert event["ts"] == span.start_time // 1000
        assert event["dur"] == max(0, span.end_time // 1000 - span.start_time // 1000)


# ---------------------------------------------------------------------------
# Format.


def test_event_format(pipeline: Pipeline) -> None:
    """Complete events with wall-clock µs, args with ids and attributes, instants, metadata."""
    before = time.time() * 1e6
    with pipeline.tracer.start_as_current_span("parent", attributes={"rl.iteration": 4}):
        with pipeline.tracer.start_as_current_span(
            "child", kind=SpanKind.CLIENT, attributes={"rl.bucket": "productive", "xs": [1, 2]}
        ) as child:
            child.add_event("ready", {"n": 3})
            child.set_status(Status(StatusCode.ERROR, "boom"))
    events = pipeline.events()
    after = time.time() * 1e6
    complete = {e["name"]: e for e in events if e["ph"] == "X"}
    parent, child_event = complete["parent"], complete["child"]
    assert before - 1 <= parent["ts"] <= child_event["ts"] <= after
    assert child_event["cat"] == "productive"
    assert parent["cat"] == "test"
    assert child_event["args"]["parent_span_id"] == parent["args"]["span_id"]
    assert child_event["args"]["trace_id"] == parent["args"]["trace_id"]
    assert len(parent["args"]["trace_id"]) == 32
    assert "parent_span_id" not in parent["args"]
    assert child_event["args"]["xs"] == [1, 2]
    assert child_event["args"]["otel.status_code"] == "ERROR"
    assert child_event["args"]["otel.status_description"] == "boom"
    assert child_event["args"]["otel.span_kind"] == "CLIENT"
    assert parent["args"]["rl.iteration"] == 4
    (instant,) = [e for e in events if e["ph"] == "i"]
    assert instant["name"] == "ready"
    assert instant["args"] == {"n": 3, "rank": 3, "role": "driver"}
    # every event names its writer's rank and role, as AReaL's tracer writes them
    named = [e for e in events if e["name"] != "process_sort_index"]
    assert all((e["args"]["rank"], e["args"]["role"]) == (3, "driver") for e in named)
    assert instant["tid"] == child_event["tid"]
    assert instant["s"] == "t"
    meta = [e for e in events if e["ph"] == "M"]
    (process,) = [e for e in meta if e["name"] == "process_name"]
    assert "rank 3" in process["args"]["name"]
    assert "driver" in process["args"]["name"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert names[parent["tid"]] == f"thread: {threading.current_thread().name}"
    assert_each_span_once(pipeline, events)


def test_every_line_is_one_json_object(pipeline: Pipeline) -> None:
    """One complete JSON object per line, even with NaN and non-ASCII values."""
    with pipeline.tracer.start_as_current_span("naïve ✓", attributes={"x": math.nan, "s": "é"}):
        pass
    pipeline.events()
    lines = pipeline.path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    for line in lines[:-1]:
        assert isinstance(json.loads(line), dict)
    (event,) = [e for e in read_chrome_trace(pipeline.path).events if e["ph"] == "X"]
    assert event["name"] == "naïve ✓"
    assert event["args"]["x"] == "nan"


def test_a_value_the_fast_encoder_refuses_is_still_written(pipeline: Pipeline) -> None:
    """A lone surrogate (from a non-UTF-8 path, say) costs no span: the batch is kept."""
    for i in range(3):
        with pipeline.tracer.start_as_current_span(
            f"s{i}", attributes={"path": "caf\udcff" if i == 1 else "ok", "x": math.inf}
        ):
            pass
    events = [e for e in pipeline.events() if e["ph"] == "X"]
    assert sorted(e["name"] for e in events) == ["s0", "s1", "s2"]
    (odd,) = [e for e in events if e["name"] == "s1"]
    assert odd["args"]["path"] == "caf\udcff"
    assert {e["args"]["x"] for e in events} == {"inf"}


def test_a_value_no_encoder_can_write_is_left_out_and_counted(pipeline: Pipeline) -> None:
    """An integer past the standard library's digit limit: that value is left out, counted."""
    for i in range(3):
        attrs = {"n": 10**5000, "ok": i} if i == 1 else {"n": i}
        with pipeline.tracer.start_as_current_span(f"s{i}", attributes=attrs):
            pass
    events = {e["name"]: e for e in pipeline.events() if e["ph"] == "X"}
    assert sorted(events) == ["s0", "s1", "s2"]
    args = events["s1"]["args"]
    assert "n" not in args
    assert (args["ok"], args["otel.dropped_attributes_count"]) == (1, 1)
    assert "otel.dropped_attributes_count" not in events["s0"]["args"]
    stats = pipeline.chrome.stats()
    assert (stats.exported, stats.failed) == (3, 0)


def test_concurrent_asyncio_tasks_get_their_own_tracks(pipeline: Pipeline) -> None:
    """Overlapping spans of concurrent tasks land on one track per task, named after it."""

    async def work(i: int) -> None:
        with pipeline.tracer.start_as_current_span(f"work-{i}"):
            await asyncio.sleep(0.005)

    async def main() -> None:
        await asyncio.gather(*(asyncio.create_task(work(i), name=f"w{i}") for i in range(3)))

    asyncio.run(main())
    events = pipeline.events()
    tids = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    assert len(set(tids.values())) == 3
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names[tids["work-1"]] == f"task: w1 [{threading.current_thread().name}]"
    assert_tracks_nest(events)


@pytest.mark.anyio
async def test_tasks_get_their_own_tracks_on_every_backend(pipeline: Pipeline) -> None:
    """asyncio, uvloop and trio tasks each get a track."""

    async def work(i: int) -> None:
        with pipeline.tracer.start_as_current_span(f"work-{i}"):
            await anyio.sleep(0.005)

    async with anyio.create_task_group() as group:
        for i in range(3):
            group.start_soon(work, i)
    events = await anyio.to_thread.run_sync(pipeline.events)
    tids = {e["tid"] for e in events if e["ph"] == "X"}
    assert len(tids) == 3
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert all(names[tid].startswith("task: ") for tid in tids)
    assert_tracks_nest(events)


def test_a_callback_is_on_its_thread_and_tasks_of_two_loops_on_their_own(
    pipeline: Pipeline,
) -> None:
    """The owner of a span is the running task of the calling thread's loop, else the thread.

    A span started in a ``call_soon`` callback (a loop runs, no task does) goes
    to the thread's track; tasks of two loops running at once in two threads
    each get a task track named after the task and its thread.
    """
    barrier = threading.Barrier(2)

    async def task_body(i: int) -> None:
        with pipeline.tracer.start_as_current_span(f"task-{i}"):
            await asyncio.to_thread(barrier.wait, 10)

    def in_callback(done: asyncio.Future[None]) -> None:
        with pipeline.tracer.start_as_current_span("callback"):
            pass
        done.set_result(None)

    async def main(i: int) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        loop.call_soon(in_callback, done)
        await done
        await asyncio.create_task(task_body(i), name=f"job{i}")

    threads = [
        threading.Thread(target=asyncio.run, args=(main(i),), name=f"loop-{i}") for i in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    events = pipeline.events()
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    on = {e["name"]: names.get(e["tid"]) for e in spans if e["name"].startswith("task-")}
    assert on == {"task-0": "task: job0 [loop-0]", "task-1": "task: job1 [loop-1]"}
    callbacks = sorted(names.get(e["tid"]) or "" for e in spans if e["name"] == "callback")
    assert callbacks == ["thread: loop-0", "thread: loop-1"]


def test_threads_get_their_own_tracks(pipeline: Pipeline) -> None:
    """Spans of different threads never share a track."""
    barrier = threading.Barrier(3)

    def work(i: int) -> None:
        with pipeline.tracer.start_as_current_span(f"t-{i}"):
            barrier.wait()

    threads = [threading.Thread(target=work, args=(i,), name=f"worker-{i}") for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = pipeline.events()
    tids = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    assert len(set(tids.values())) == 3
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names[tids["t-2"]] == "thread: worker-2"


def test_a_span_outliving_its_parent_goes_to_an_overflow_track(pipeline: Pipeline) -> None:
    """A detached child that ends after its parent does not break the parent's track."""

    async def main() -> None:
        with pipeline.tracer.start_as_current_span("parent"):
            detached = pipeline.tracer.start_span("detached")
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.002)
        detached.end()

    asyncio.run(main())
    events = pipeline.events()
    tids = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    assert tids["parent"] != tids["detached"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names[tids["detached"]] == names[tids["parent"]] + " (overflow 1)"
    assert_tracks_nest(events)
    assert_each_span_once(pipeline, events)


# ---------------------------------------------------------------------------
# Property: random trees of nested and concurrent spans across tasks and threads.


@dataclass
class Node:
    """One span of a generated program, and what runs inside it."""

    kind: str  # leaf | seq | gather | thread | handoff | detach
    children: list[Node] = field(default_factory=list)
    yields: int = 0


leaves = st.builds(Node, st.just("leaf"), st.just([]), st.integers(0, 2))
programs = st.recursive(
    leaves,
    lambda inner: st.builds(
        Node,
        st.sampled_from(["seq", "gather", "thread", "handoff", "detach"]),
        st.lists(inner, min_size=1, max_size=3),
        st.integers(0, 2),
    ),
    max_leaves=12,
)


class Runner:
    """Executes a generated program with real tasks and threads."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.counter = itertools.count()
        self.pending: list[asyncio.Future[None]] = []
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def name(self, node: Node) -> str:
        return f"{node.kind}-{next(self.counter)}"

    async def run(self, node: Node) -> None:
        name = self.name(node)
        if node.kind == "detach":  # ends in another task, possibly after its parent
            span = self.tracer.start_span(name)

            async def finish() -> None:
                for _ in range(node.yields + 1):
                    await asyncio.sleep(0)
                with trace.use_span(span, end_on_exit=True):
                    for child in node.children:
                        await self.run(child)

            self.pending.append(asyncio.ensure_future(finish()))
            return
        if node.kind == "handoff":  # started in this task, ended on a worker thread
            span = self.tracer.start_span(name)
            with trace.use_span(span, end_on_exit=False):
                for child in node.children:
                    await self.run(child)
            await asyncio.to_thread(span.end)
            return
        with self.tracer.start_as_current_span(name):
            for _ in range(node.yields):
                await asyncio.sleep(0)
            if node.kind == "gather":
                await asyncio.gather(*(self.run(child) for child in node.children))
            elif node.kind == "thread":
                await asyncio.to_thread(self.run_sync, node.children)
            else:
                for child in node.children:
                    await self.run(child)

    def run_sync(self, nodes: list[Node]) -> None:
        """In a thread: nested spans; ``detach`` ends on yet another thread."""
        for node in nodes:
            name = self.name(node)
            if node.kind == "detach":
                span = self.tracer.start_span(name)

                def finish(span: trace.Span = span, children: list[Node] = node.children) -> None:
                    with trace.use_span(span, end_on_exit=True):
                        self.run_sync(children)

                thread = threading.Thread(target=finish)
                with self.lock:
                    self.threads.append(thread)
                thread.start()
                continue
            with self.tracer.start_as_current_span(name):
                self.run_sync(node.children)

    async def main(self, root: Node) -> None:
        await self.run(root)
        while self.pending:
            await self.pending.pop()
        for thread in self.threads:
            thread.join()


@pytest.mark.fuzz
@_fuzz.target
@settings(
    max_examples=examples(40, 2_500),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(programs)
def test_random_span_trees_nest_on_every_track(tmp_path: Path, program: Node) -> None:
    """Whatever the mix of nesting, tasks, threads and detached spans: every track nests, and
    every span appears exactly once with its own start and duration."""
    path = tmp_path / f"prop-{time.monotonic_ns()}.jsonl"
    made = Pipeline(path, max_export_batch_size=7, schedule_delay_millis=2)
    try:
        asyncio.run(Runner(made.tracer).main(program))
        events = made.events()
        assert_tracks_nest(events)
        assert_each_span_once(made, events)
        named = {e["tid"] for e in events if e.get("name") == "thread_name"}
        assert {e["tid"] for e in events if e["ph"] == "X"} <= named
    finally:
        made.close()
        path.unlink()


intervals = st.lists(
    st.one_of(
        st.tuples(st.integers(1, 3), st.integers(0, 60), st.integers(0, 25)),
        st.tuples(st.just(-1), st.integers(1, 3), st.just(0)),  # retire a track
    ),
    max_size=80,
)


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(300, 12_000), deadline=None)
@given(intervals, st.integers(2, 8))
def test_track_assigner_always_nests(ops: list[tuple[int, int, int]], max_intervals: int) -> None:
    """Any sequence of intervals, in any order, with retired tracks and a tiny memory bound:
    each interval is placed once, and the intervals of every output track nest."""
    next_tid = itertools.count(100).__next__
    made: dict[int, str] = {}
    assigner = TrackAssigner(next_tid, made.__setitem__, max_intervals=max_intervals)
    for tid in (1, 2, 3):
        assigner.open(tid, f"t{tid}")
    placed: list[dict[str, Any]] = []
    for tid, start, length in ops:
        if tid == -1:
            assigner.retire(start)
            continue
        out = assigner.place(tid, start, start + length)
        assert out == tid or out in made
        placed.append({"ph": "X", "pid": 1, "tid": out, "ts": start, "dur": length})
    assert len(placed) == sum(1 for op in ops if op[0] != -1)
    assert_tracks_nest(placed)


def test_compaction_keeps_memory_bounded() -> None:
    """A million sequential intervals on one track keep at most max_intervals entries."""
    assigner = TrackAssigner(itertools.count(100).__next__, lambda t, n: None, max_intervals=64)
    assigner.open(1, "t")
    for i in range(100_000):
        assert assigner.place(1, 2 * i, 2 * i + 1) == 1
    track = assigner._tracks[1]
    assert len(track.starts) <= 64
    assert assigner.place(1, 0, 10**9) == 1  # a long parent still contains them all


def _fast_spans(count: int, owners: int = 1) -> list[Any]:
    """*count* ended fast-provider spans, one after another, from *owners* threads in turn."""
    from asynctrace._fast import FastTracerProvider

    provider = FastTracerProvider()
    provider._wants_owner = True
    tracer = provider.get_tracer("bounded")
    threads = [threading.Thread(name=f"owner-{i}") for i in range(owners)]
    spans = []
    for i in range(count):
        span = tracer.start_span(f"s{i}", start_time=(2 * i + 1) * 1000)
        span._owner = threads[i % owners]  # type: ignore[attr-defined]
        span.end(end_time=(2 * i + 2) * 1000)
        spans.append(span)
    return spans


@pytest.mark.parametrize("owners", [1, 2])
def test_the_writers_track_lists_stay_bounded_batch_by_batch(tmp_path: Path, owners: int) -> None:
    """The chrome writer appends a fast-provider span to its track inline, bounding the
    track's lists as ``TrackAssigner.place`` does: after every batch, no track remembers
    more than ``max_intervals``, and the spans nest on their owners' tracks."""
    from asynctrace.export._chrome_writer import ChromeWriter

    writer = ChromeWriter(tmp_path / "t.jsonl", {}, itertools.count(1).__next__)
    most = writer._tracks.max_intervals
    spans = _fast_spans(6 * most, owners)
    for start in range(0, len(spans), 2 * most):
        assert writer.export(spans[start : start + 2 * most]) == (2 * most, 0)
        lists = [(len(t.starts), len(t.ends)) for t in writer._tracks.primary.values()]
        assert len(lists) == owners
        assert all(starts == ends <= most for starts, ends in lists), lists
    writer.shutdown()
    events = read_chrome_trace(tmp_path / "t.jsonl").complete_events()
    assert len(events) == len(spans)
    assert len({event["tid"] for event in events}) == owners  # no overflow track was needed
    assert_tracks_nest(events)


def test_an_attribute_named_like_the_writers_rank_or_role_is_kept(tmp_path: Path) -> None:
    """Every fast-provider span's args name the writer's rank and role, unless the span
    has an attribute of that name: then the attribute is written as it is."""
    from asynctrace.export._chrome_writer import ChromeWriter

    plain, own_rank, own_role = _fast_spans(3)
    own_rank._attributes["rank"] = 9  # type: ignore[attr-defined]
    own_role._attributes["role"] = "judge"  # type: ignore[attr-defined]
    resource = {"asynctrace.rank": 3, "asynctrace.role": "driver"}
    writer = ChromeWriter(tmp_path / "t.jsonl", resource, itertools.count(1).__next__)
    writer.export([plain, own_rank, own_role])
    writer.shutdown()
    events = read_chrome_trace(tmp_path / "t.jsonl").complete_events()
    args = {event["name"]: event["args"] for event in events}
    assert (args["s0"]["rank"], args["s0"]["role"]) == (3, "driver")
    assert (args["s1"]["rank"], args["s1"]["role"]) == (9, "driver")
    assert (args["s2"]["rank"], args["s2"]["role"]) == (3, "judge")


def test_an_sdk_span_attribute_named_like_the_writers_rank_or_role_is_kept(
    pipeline: Pipeline,
) -> None:
    """The same for SDK spans (the writer's other path)."""
    for name, attributes in (("s0", {}), ("s1", {"rank": 9}), ("s2", {"role": "judge"})):
        with pipeline.tracer.start_as_current_span(name, attributes=attributes):
            pass
    args = {e["name"]: e["args"] for e in pipeline.events() if e["ph"] == "X"}
    assert (args["s0"]["rank"], args["s0"]["role"]) == (3, "driver")
    assert (args["s1"]["rank"], args["s1"]["role"]) == (9, "driver")
    assert (args["s2"]["rank"], args["s2"]["role"]) == (3, "judge")


# ---------------------------------------------------------------------------
# Crash safety.


def test_a_torn_tail_is_closed_off_and_skipped(tmp_path: Path) -> None:
    """Appending after a torn line starts a fresh line; the reader skips only the torn one."""
    path = tmp_path / "traces-r0.jsonl"
    path.write_bytes(b'{"ph":"M","name":"process_name"}\n{"ph":"X","name":"to')
    made = Pipeline(path)
    try:
        with made.tracer.start_as_current_span("after"):
            pass
        made.chrome.force_flush(5000)
        result = read_chrome_trace(path)
        assert result.skipped == 1
        assert [e["name"] for e in result.complete_events()] == ["after"]
    finally:
        made.close()


def test_sigkill_during_heavy_writing_leaves_only_whole_lines(tmp_path: Path) -> None:
    """Killed mid-write: every complete line parses; at most one torn last line, skipped."""
    trace_file = tmp_path / "traces-r0.jsonl"
    with subprocess.Popen(
        [sys.executable, str(CHILD), "heavy", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as child:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if trace_file.exists() and trace_file.stat().st_size > 2_000_000:
                break
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    data = trace_file.read_bytes()
    *complete, tail = data.split(b"\n")
    assert len(complete) > 5000
    for line in complete:
        assert isinstance(json.loads(line), dict)
    result = read_chrome_trace(trace_file)
    assert result.skipped == (1 if tail else 0)
    assert len(result.events) == len(complete)
    names = [e["name"] for e in result.complete_events()]
    assert names[:3] == ["heavy-0", "heavy-1", "heavy-2"]


def test_sdk_fast_path_matches_the_public_properties() -> None:
    """Reading the SDK span's fields gives exactly what its public properties give."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    from asynctrace.export._chrome_writer import _public_fields, span_fields

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("a", attributes={"rl.bucket": "idle", "n": 1}) as span:
        span.add_event("e", {"k": "v"})
        span.set_status(Status(StatusCode.ERROR, "bad"))
    (finished,) = exporter.get_finished_spans()
    from opentelemetry.sdk.trace import ReadableSpan

    orphan = ReadableSpan(name="x", context=None, start_time=1, end_time=2)
    assert span_fields(orphan, {}, lambda: 5)[:2] == ("x", 0)  # the properties, not a crash
    tid = iter([7, 7]).__next__
    assert span_fields(finished, {}, tid) == _public_fields(finished, {}, tid)
    tids = {finished.context.span_id: 3}
    assert span_fields(finished, dict(tids), tid)[-1] == 3
    assert _public_fields(finished, dict(tids), tid)[-1] == 3


def test_a_batch_mixing_providers_places_each_span_on_its_own_track(tmp_path: Path) -> None:
    """A fast-provider span after an SDK span in one batch is checked against its own
    track, not the SDK span's (the writer used to keep the SDK span's track at hand, and
    a span that partly overlaps its predecessor stayed on the same track)."""
    from asynctrace._fast import FastTracerProvider
    from asynctrace.export._chrome_writer import ChromeWriter, NewTrack

    provider = FastTracerProvider()
    provider._wants_owner = True
    tracer = provider.get_tracer("mixed")
    first = tracer.start_span("first", start_time=1_000_000)
    first.end(end_time=100_000_000)  # [1 ms, 100 ms]
    late = tracer.start_span("late", start_time=50_000_000)
    late.end(end_time=150_000_000)  # [50 ms, 150 ms]: partly over "first", same task
    sdk = ("sdk", 7, 9, 0, 1_000_000, 10_000_000, None, None, None, None, "sdk", None, 40)
    writer = ChromeWriter(tmp_path / "t.jsonl", {}, itertools.count(1).__next__)
    writer.export([first, NewTrack(40, "thread: sdk"), sdk, late])
    writer.shutdown()
    events = read_chrome_trace(tmp_path / "t.jsonl").complete_events()
    tids = {event["name"]: event["tid"] for event in events}
    assert tids["sdk"] == 40
    assert tids["late"] != tids["first"]  # an overflow track: the two do not nest


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_a_span_name_that_is_not_a_string_is_written_as_its_text(
    tmp_path: Path, provider: str
) -> None:
    """The span helpers do not check names (they are the hot path): the writer writes
    ``str(name)`` for spans and instants, so every line stays a well-formed event that
    ``asynctrace convert`` keeps."""
    import asynctrace as at

    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": tmp_path,
            "provider": provider,
        }
    )
    with at.managed_span("reward", 123):  # type: ignore[arg-type]
        at.instant("reward", 7)  # type: ignore[arg-type]  # an event of the current span
    with at.umbrella_span("step", None):  # type: ignore[arg-type]
        pass
    at.instant("reward", 8.5)  # type: ignore[arg-type]  # no current span: a marker span
    at.end_span(at.start_span("reward", ("a", 1)))  # type: ignore[arg-type]
    with at.managed_span("reward", "good"):
        pass
    path = telemetry.trace_file
    telemetry.shutdown()
    assert path is not None
    events = [json.loads(line) for line in path.read_text().splitlines()]
    spans = sorted(e["name"] for e in events if e["ph"] == "X")
    assert spans == sorted(["123", "None", "8.5", "('a', 1)", "good"])
    assert [e["name"] for e in events if e["ph"] == "i"] == ["7"]
    out = subprocess.run(
        [sys.executable, "-m", "asynctrace", "convert", str(path), "-o", str(tmp_path / "t.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "malformed" not in out.stdout + out.stderr
    converted = json.loads((tmp_path / "t.json").read_text())
    listed = converted["traceEvents"] if isinstance(converted, dict) else converted
    assert sorted(e["name"] for e in listed if e.get("ph") == "X") == spans
