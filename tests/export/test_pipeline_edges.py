"""The export pipeline at its edges: the user's span processors and exporters misbehaving.

A user's SDK processor that raises or hangs, a user's exporter that flushes
from its own ``export``, a span the memory exporter cannot convert: asynctrace
keeps every span it can, counts the rest, and waits no longer than it said.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace as at
from asynctrace.export import read_chrome_trace


class RaisingOnEnd(SpanProcessor):
    """A user's processor whose ``on_end`` always raises."""

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("user on_end failed")


class RaisingOnStart(SpanProcessor):
    """A user's processor whose ``on_start`` always raises."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        raise RuntimeError("user on_start failed")


def test_a_user_processor_raising_in_on_end_loses_no_span(tmp_path: Path) -> None:
    """On the user's own SDK provider, a processor of theirs (added before
    ``configure``) that raises in ``on_end``: the SDK stops at it, so asynctrace's
    processors come first and every span still reaches the chrome file."""
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(RaisingOnEnd())
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "provider": provider,
            "span_groups": "all",
        }
    )
    try:
        tracer = provider.get_tracer("app")
        for i in range(10):
            span = tracer.start_span(f"s{i}")
            with pytest.raises(RuntimeError, match="user on_end failed"):
                span.end()  # the SDK hands the user's error to the code that ends the span
        assert telemetry.flush(5.0)
        assert telemetry.stats()["chrome"].exported == 10
    finally:
        assert telemetry.shutdown(5.0)
        provider.shutdown()
    path = telemetry.trace_file
    assert path is not None
    names = sorted(event["name"] for event in read_chrome_trace(path).complete_events())
    assert names == sorted(f"s{i}" for i in range(10))


def test_a_user_processor_raising_in_on_start_does_not_hide_an_open_span(
    tmp_path: Path,
) -> None:
    """A user's processor that raises in ``on_start`` does not keep asynctrace's
    open-span tracker from the span: left open, it is ended at shutdown, truncated."""
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(RaisingOnStart())
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "provider": provider,
            "span_groups": "all",
        }
    )
    try:
        tracer = provider.get_tracer("asynctrace")  # asynctrace's scope: truncated at shutdown
        with pytest.raises(RuntimeError, match="user on_start failed"):
            tracer.start_span("left-open")
    finally:
        assert telemetry.shutdown(5.0)
        provider.shutdown()
    path = telemetry.trace_file
    assert path is not None
    (event,) = read_chrome_trace(path).complete_events()
    assert event["name"] == "left-open"
    assert event["args"]["asynctrace.truncated"] is True


class StuckExporter(SpanExporter):
    """An exporter whose collector never answers (until the test releases it)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(20.0)  # capped: a broken test still ends
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_shutdown_of_the_sdk_provider_waits_no_longer_than_its_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``provider="sdk"`` with a user's ``BatchSpanProcessor`` whose exporter is stuck:
    the provider's shutdown (which would wait for it about 30 s) is abandoned at the
    timeout, ``shutdown`` returns ``False`` and the abandoned processor is named once."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    exporter = StuckExporter()
    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "provider": "sdk", "span_groups": "all"}
    )
    try:
        provider: Any = telemetry.provider
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=10))
        tracer = provider.get_tracer("app")
        tracer.start_span("a").end()
        assert exporter.entered.wait(5.0)  # the batch is now inside the stuck export
        tracer.start_span("b").end()
        started = time.monotonic()
        assert telemetry.shutdown(1.0) is False
        assert time.monotonic() - started < 5.0  # a hang bound, not a measurement
        warnings = [r.getMessage() for r in caplog.records if "did not finish" in r.getMessage()]
        assert len(warnings) == 1
        assert "BatchSpanProcessor" in warnings[0]
    finally:
        exporter.release.set()


class BlockingProcessor(SpanProcessor):
    """A user's processor whose first ``on_end`` blocks until released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        self.release.wait(20.0)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_a_user_processor_queue_on_the_fast_provider_has_the_configured_limits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A span processor added to the fast provider gets an export queue with the
    configured limits, and its counters are in ``stats()``, ``dropped_spans`` and the
    summary logged at shutdown."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    processor = BlockingProcessor()
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["memory"],
            "provider": "fast",
            "span_groups": "all",
            "max_queue_size": 8,
            "max_export_batch_size": 4,
            "schedule_delay_millis": 20,
        }
    )
    try:
        provider: Any = telemetry.provider
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("app")
        for _ in range(100):  # the processor holds at most a batch: the rest overflows 8
            tracer.start_span("s").end()
        stats = telemetry.stats()["BlockingProcessor"]
        assert stats.dropped >= 100 - 8 - 4
        assert stats.exported + stats.dropped + stats.queued + stats.in_flight == 100
        assert telemetry.dropped_spans == stats.dropped
    finally:
        processor.release.set()
    assert telemetry.shutdown(5.0) is False  # spans were dropped
    final = telemetry.stats()["BlockingProcessor"]
    assert final.exported + final.dropped == 100
    assert f"'BlockingProcessor' dropped {final.dropped} spans" in caplog.text


def test_two_user_processors_of_one_class_are_counted_apart() -> None:
    """Two processors of one class on the fast provider have a queue each, and each its
    own entry in ``stats()``."""
    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "provider": "fast", "span_groups": "all"}
    )
    try:
        provider: Any = telemetry.provider
        for _ in range(2):
            processor = BlockingProcessor()
            processor.release.set()  # never blocks
            provider.add_span_processor(processor)
        provider.get_tracer("app").start_span("s").end()
        assert telemetry.flush(5.0)
        stats = telemetry.stats()
        assert stats["BlockingProcessor"].exported == 1
        assert stats["BlockingProcessor-2"].exported == 1
    finally:
        telemetry.shutdown(5.0)


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_two_exporters_of_one_class_are_counted_apart(provider: str) -> None:
    """``exporters=[a, b]`` of one class: each its own queue and ``stats()`` entry, each
    with every span (one entry would hide the other's counts, a loss among them)."""
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    telemetry = at.configure(
        {"enabled": True, "exporters": [first, second], "provider": provider, "span_groups": "all"}
    )
    try:
        with at.managed_span("job", "s"):
            pass
        assert telemetry.flush(5.0)
        stats = telemetry.stats()
        assert stats["InMemorySpanExporter"].exported == 1
        assert stats["InMemorySpanExporter-2"].exported == 1
        assert [len(e.get_finished_spans()) for e in (first, second)] == [1, 1]
    finally:
        telemetry.shutdown(5.0)


class FlushingExporter(SpanExporter):
    """An exporter whose ``export`` flushes asynctrace (a "flush before handing off" helper)."""

    def __init__(self) -> None:
        self.results: list[bool] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.results.append(at.flush(3.0))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_a_flush_from_the_export_thread_returns_at_once(provider: str) -> None:
    """``asynctrace.flush()`` called from an exporter's own ``export`` cannot wait for
    the thread it runs on: it returns ``True`` at once (nothing was lost) instead of
    waiting out its timeout and returning ``False``, and the export goes on."""
    exporter = FlushingExporter()
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": [exporter],
            "provider": provider,
            "span_groups": "all",
            "schedule_delay_millis": 20,
        }
    )
    try:
        with at.managed_span("generation", "g"):
            pass
        assert telemetry.flush(10.0)
        assert exporter.results == [True]
        assert telemetry.stats()["FlushingExporter"].exported == 1
    finally:
        assert telemetry.shutdown(5.0)


class Unconvertible(tuple[int, ...]):
    """A tuple attribute value that cannot be read when the span is converted."""

    def __iter__(self) -> Any:
        raise ValueError("cannot iterate")


@pytest.mark.usefixtures("lenient")
def test_a_value_the_memory_exporter_cannot_convert_is_left_out_alone() -> None:
    """The fast provider's memory exporter converts when read: a value that cannot be
    converted is left out of its span and counted as dropped; the span, and the spans
    ended before and after it, are kept, in end order."""
    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "provider": "fast", "span_groups": "all"}
    )
    try:
        provider: Any = telemetry.provider
        tracer = provider.get_tracer("app")
        for i in range(5):
            span = tracer.start_span(f"s{i}")
            if i == 3:
                span.set_attribute("odd", Unconvertible((1, 2)))
                span.set_attribute("kept", 7)
            span.end()
        memory = telemetry.memory_exporter
        assert memory is not None
        for _ in range(2):  # read twice: converted the same way each time
            spans = memory.get_finished_spans()
            assert [s.name for s in spans] == ["s0", "s1", "s2", "s3", "s4"]
            assert dict(spans[3].attributes or {}) == {"kept": 7}
            assert spans[3].dropped_attributes == 1
    finally:
        telemetry.shutdown(5.0)


class StopProcessing(BaseException):
    """Not an ``Exception``: what a processor raising ``SystemExit`` looks like."""


class StoppingProcessor(SpanProcessor):
    """A user's processor that raises a ``BaseException`` on the span named ``s2``."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        if span.name == "s2":
            raise StopProcessing()
        self.seen.append(span.name)


def test_a_base_exception_from_a_user_processor_fails_its_span_alone() -> None:
    """On the fast provider, a processor that raises a ``BaseException`` on one span of
    a batch: that span is counted failed, the others are handed to it and counted
    exported, and its export thread goes on."""
    processor = StoppingProcessor()
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["memory"],
            "provider": "fast",
            "span_groups": "all",
            "schedule_delay_millis": 10_000,  # the five spans go out in one batch
        }
    )
    try:
        provider: Any = telemetry.provider
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("app")
        for i in range(5):
            tracer.start_span(f"s{i}").end()
        assert telemetry.flush(5.0) is False  # one span failed
        stats = telemetry.stats()["StoppingProcessor"]
        assert (stats.exported, stats.failed) == (4, 1)
        assert processor.seen == ["s0", "s1", "s3", "s4"]
        tracer.start_span("s5").end()
        assert telemetry.flush(5.0)
        assert processor.seen[-1] == "s5"
    finally:
        telemetry.shutdown(5.0)
