"""The chrome processor at its edges: hostile trace files, a stuck writer, bad arguments,
spans that never end."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from asynctrace import ConfigurationError
from asynctrace._fast._forget import MAX_OPEN_SPANS
from asynctrace.export import ChromeTraceProcessor, read_chrome_trace
from asynctrace.export._queue import QueuedSpanProcessor
from asynctrace.export._sinks import ExporterSink

GOOD = b'{"ph":"X","name":"ok","ts":1,"dur":2,"pid":1,"tid":1}\n'


# ---------------------------------------------------------------------------
# read_chrome_trace on hostile files.


def test_a_line_nested_too_deeply_is_skipped_and_counted(tmp_path: Path) -> None:
    """JSON nested past the interpreter's stack is one malformed line, not a crash."""
    path = tmp_path / "traces-r0.jsonl"
    deep = b'{"ph":"X","a":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    path.write_bytes(deep + GOOD)
    trace = read_chrome_trace(path)
    assert trace.skipped == 1
    assert [e["name"] for e in trace.events] == ["ok"]


def test_a_line_longer_than_64_mib_is_skipped_and_counted(tmp_path: Path) -> None:
    """A valid but overlong line is not parsed; the lines after it are read."""
    path = tmp_path / "traces-r0.jsonl"
    with open(path, "wb") as out:
        out.write(GOOD)
        out.write(b'{"ph":"X","name":"' + b"a" * (64 << 20) + b'","ts":1}\n')
        out.write(GOOD)
    trace = read_chrome_trace(path)
    assert trace.skipped == 1
    assert [e["name"] for e in trace.events] == ["ok", "ok"]


def test_events_with_fields_of_the_wrong_type_are_skipped_and_counted(tmp_path: Path) -> None:
    """NaN or string times, negative durations, list pids: skipped and counted, as the
    commands do; metadata and well-typed events are kept."""
    bad = [
        b'{"ph":"X","name":"a","ts":NaN,"dur":1}',
        b'{"ph":"X","name":"a","ts":1,"dur":Infinity}',
        b'{"ph":"X","name":"a","ts":"1","dur":1}',
        b'{"ph":"X","name":"a","ts":1,"dur":-5}',
        b'{"ph":"X","name":"a","ts":1e400,"dur":1}',
        b'{"ph":"X","name":"a","ts":1,"dur":1,"pid":[1]}',
        b'{"ph":"X","name":["a"],"ts":1,"dur":1}',
        b'{"ph":1,"name":"a"}',
        b'{"ph":"X","name":"a","ts":true}',
    ]
    good = [
        b'{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"t"}}',
        b'{"ph":"X","name":"b","ts":1.5,"dur":0,"pid":"host","tid":2}',
        b'{"other":"record"}',
    ]
    path = tmp_path / "traces-r0.jsonl"
    path.write_bytes(b"\n".join(bad + good) + b"\n")
    trace = read_chrome_trace(path)
    assert trace.skipped == len(bad)
    assert trace.events == [json.loads(line) for line in good]
    assert all(math.isfinite(e["ts"]) for e in trace.complete_events())


# ---------------------------------------------------------------------------
# A stuck writer: the SDK path's queue stays bounded.


class _Gated:
    """The real writer behind a gate: it blocks, as on a stalled disk, until opened."""

    any_batch_size = True

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.gate = threading.Event()

    def export(self, batch: list[Any]) -> tuple[int, int]:
        self.gate.wait(60)
        result: tuple[int, int] = self.writer.export(batch)
        return result

    def flush(self) -> bool:
        return bool(self.writer.flush())

    def shutdown(self) -> None:
        self.writer.shutdown()


def _track_names(events: list[dict[str, Any]]) -> dict[Any, str]:
    return {
        e["tid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }


def test_a_stuck_writer_keeps_the_queue_bounded_while_tasks_come_and_go(
    tmp_path: Path,
) -> None:
    """Tasks that start and end while the writer is stuck queue no track item each:
    the queue stays near max_queue_size, and every span written is on a named track."""
    path = tmp_path / "traces-r0.jsonl"
    provider = TracerProvider(shutdown_on_exit=False)
    processor = ChromeTraceProcessor(
        path, max_queue_size=200, max_export_batch_size=50, schedule_delay_millis=5
    )
    gated = _Gated(processor._sink)
    processor._sink = gated
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")

    async def one() -> None:
        with tracer.start_as_current_span("short"):
            pass

    async def many() -> None:
        for _ in range(20):
            await asyncio.gather(*(one() for _ in range(500)))

    longest = 0
    try:
        asyncio.run(many())
        longest = len(processor._queue)
        stuck = processor.stats()
        assert stuck.dropped > 0  # the queue did fill up

        async def waiting_then_after() -> None:
            # A task whose first span starts while the queue is full gets its track
            # when that span ends, once the writer has caught up.
            span = tracer.start_span("started while full")
            gated.gate.set()
            assert processor.force_flush(10_000) is False  # spans were dropped
            span.end()

        asyncio.run(_named(waiting_then_after(), "waiting"))
        assert processor.force_flush(10_000)
    finally:
        gated.gate.set()
        provider.shutdown()
    # Without a bound it held one item per task started and one per task ended (20,000).
    assert longest <= 2 * 200
    trace = read_chrome_trace(path)
    names = _track_names(trace.events)
    spans = trace.complete_events()
    stats = processor.stats()
    assert len(spans) == stats.exported == 10_001 - stats.dropped
    assert all(e["tid"] in names for e in spans)
    (late,) = [e for e in spans if e["name"] == "started while full"]
    assert names[late["tid"]].startswith("task: waiting ")


async def _named(coro: Any, name: str) -> None:
    await asyncio.create_task(coro, name=name)


# ---------------------------------------------------------------------------
# Arguments.


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("max_queue_size", 0),
        ("max_queue_size", -1),
        ("max_queue_size", "100"),
        ("max_export_batch_size", 0),
        ("max_export_batch_size", True),
        ("schedule_delay_millis", -5),
        ("schedule_delay_millis", 0),
        ("schedule_delay_millis", float("nan")),
        ("schedule_delay_millis", float("inf")),
        ("schedule_delay_millis", "10"),
        ("max_attribute_length", -1),
        ("max_attribute_length", "10"),
        ("max_attribute_length", 1.5),
        ("max_event_attributes", -3),
        ("max_event_attribute_length", "other"),
        ("max_event_attribute_length", -1),
    ],
)
def test_an_argument_out_of_range_is_refused_before_the_file_is_opened(
    tmp_path: Path, argument: str, value: Any
) -> None:
    """A ConfigurationError names the argument, the value and what is accepted."""
    path = tmp_path / "traces-r0.jsonl"
    with pytest.raises(ConfigurationError) as refused:
        ChromeTraceProcessor(path, **{argument: value})
    message = str(refused.value)
    assert message.startswith(f"{argument}: {value!r} is not accepted; accepted: ")
    assert not path.exists()


@pytest.mark.parametrize(
    ("argument", "value"),
    [("max_queue_size", 0), ("max_export_batch_size", -2), ("schedule_delay_millis", -5.0)],
)
def test_the_queue_refuses_a_limit_out_of_range(argument: str, value: Any) -> None:
    """The queue under every exporter checks its limits too (an OTLP exporter's, say)."""
    with pytest.raises(ConfigurationError, match=f"^{argument}: "):
        QueuedSpanProcessor(ExporterSink(object()), name="checked", **{argument: value})


def test_limits_at_the_edges_of_their_ranges_are_accepted(tmp_path: Path) -> None:
    """The smallest sizes, a 1 ms delay, zero-length and unlimited attributes all write."""
    smallest = ChromeTraceProcessor(tmp_path / "smallest.jsonl", max_queue_size=1)
    assert smallest.shutdown_within(10.0)
    path = tmp_path / "traces-r0.jsonl"
    provider = TracerProvider(shutdown_on_exit=False)
    processor = ChromeTraceProcessor(
        path,
        max_queue_size=2,  # the thread's track and the span
        max_export_batch_size=1,
        schedule_delay_millis=1,
        max_attribute_length=0,
        max_event_attributes=None,
        max_event_attribute_length=None,
    )
    provider.add_span_processor(processor)
    with provider.get_tracer("test").start_as_current_span("one"):
        pass
    assert processor.force_flush(10_000)
    provider.shutdown()
    assert [e["name"] for e in read_chrome_trace(path).complete_events()] == ["one"]


# ---------------------------------------------------------------------------
# Spans that never end.


@pytest.mark.slow
def test_the_tracks_of_spans_that_never_end_are_bounded(tmp_path: Path) -> None:
    """Past MAX_OPEN_SPANS open spans, the longest-open after the oldest are forgotten
    (counted); the oldest keeps its track, a forgotten one that ends is still written."""
    path = tmp_path / "traces-r0.jsonl"
    provider = TracerProvider(shutdown_on_exit=False)
    processor = ChromeTraceProcessor(path)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    oldest = tracer.start_span("oldest")
    kept = min(1_000, MAX_OPEN_SPANS // 100)  # the oldest hundredth stays
    for _ in range(kept):
        tracer.start_span("abandoned")  # never ended
    forgotten = tracer.start_span("forgotten")
    for _ in range(MAX_OPEN_SPANS):
        tracer.start_span("abandoned")
    assert len(processor._tids) <= MAX_OPEN_SPANS
    assert processor.forgotten >= MAX_OPEN_SPANS // 10

    def end_elsewhere() -> None:
        oldest.end()
        forgotten.end()

    worker = threading.Thread(target=end_elsewhere, name="ender")
    worker.start()
    worker.join()
    assert processor.force_flush(10_000)
    provider.shutdown()
    trace = read_chrome_trace(path)
    names = _track_names(trace.events)
    track_of = {e["name"]: names[e["tid"]] for e in trace.complete_events()}
    assert track_of == {"oldest": "thread: MainThread", "forgotten": "thread: ender"}
