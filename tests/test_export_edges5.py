"""OTLP export edges: the retry buffer's byte bound, secrets in a backend's message, an
exporter whose shutdown raises, a timeout too short for any request.

Every exporter here sends to a real OTLP receiver on 127.0.0.1
(``tests/_otlp_receiver.py``, decoding with opentelemetry-proto) through
asynctrace's export queue and OpenTelemetry's client.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import asynctrace as at
from asynctrace.export import _retry_schedule, _span_bytes
from asynctrace.export._otlp_http import HttpSpanExporter
from asynctrace.export._queue import QueuedSpanProcessor
from asynctrace.export._retry import RetryingSpanProcessor
from asynctrace.export._span_bytes import estimate_bytes

sys.path.insert(0, str(Path(__file__).parent))
from _otlp_receiver import OtlpReceiver

TIMEOUT_S = 0.25
KIB = 1024


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_retry_schedule, "INITIAL_BACKOFF_S", 0.05)
    monkeypatch.setattr(_retry_schedule, "MAX_BACKOFF_S", 0.1)


@pytest.fixture
def made() -> Iterator[list[QueuedSpanProcessor]]:
    processors: list[QueuedSpanProcessor] = []
    yield processors
    for processor in processors:
        processor.shutdown_within(2.0)


def _settled(processor: RetryingSpanProcessor, count: int, timeout_s: float = 10.0) -> bool:
    """Whether all *count* spans left the queue (held, dropped or exported) in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = processor.stats()
        if stats.queued == 0 and stats.in_flight == 0 and stats.buffered + stats.dropped == count:
            return True
        time.sleep(0.02)
    return False


# -- the retry buffer's byte bound -----------------------------------------------------------


def _large(kind: str, size: int, n: int) -> Any:
    if kind == "bytes":
        return bytes([n % 256]) * size
    if kind == "bytearray":
        return bytearray(size)
    if kind == "map":
        return {"blob": "x" * size, "n": n}
    return {"outer": [{"inner": ("y" * size,)}]}  # nested: a map of arrays of maps


@pytest.mark.parametrize("kind", ["bytes", "map", "nested"])
def test_the_byte_bound_holds_for_bytes_and_map_values(
    kind: str, made: list[QueuedSpanProcessor]
) -> None:
    """A collector that is down (503): spans of an SDK provider whose attribute values are
    large bytes or maps (kvlist) are held within ``buffer_bytes``, the oldest dropped and
    counted, not all of them held."""
    with OtlpReceiver("http/protobuf") as receiver:
        receiver.refuse_with = 503
        exporter = HttpSpanExporter(endpoint=receiver.traces_endpoint, timeout=TIMEOUT_S)
        processor = RetryingSpanProcessor(
            exporter,
            name="otlp",
            buffer_bytes=256 * KIB,
            schedule_delay_millis=20,
            max_export_batch_size=4,
        )
        made.append(processor)
        provider = TracerProvider(resource=Resource.create({"service.name": "bound"}))
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("bound")
        count = 24
        for n in range(count):
            tracer.start_span(f"s{n}", attributes={"payload": _large(kind, 64 * KIB, n)}).end()
        assert _settled(processor, count)
        stats = processor.stats()
        # 256 KiB hold at most four 64 KiB values, a fifth while trimming a batch at most.
        assert stats.buffered <= 5, stats
        assert stats.dropped >= count - 5
        assert processor._pending_bytes <= 256 * KIB
        receiver.refuse_with = None  # back: what is held goes out at shutdown
        assert processor.shutdown_within(5.0) is False  # spans were dropped
        assert receiver.wait_for(stats.buffered)


def test_the_estimate_counts_every_large_value() -> None:
    """The estimate is at least about what OpenTelemetry encodes, whatever the value:
    bytes, bytearray, maps, maps in arrays in maps, in attributes, events and links."""
    provider = TracerProvider()
    tracer = provider.get_tracer("e")
    size = 20 * KIB
    for kind in ("bytes", "bytearray", "map", "nested"):
        span = tracer.start_span(kind, attributes={"v": _large(kind, size, 1)})
        span.add_event("event", {"v": _large(kind, size, 2)})
        span.end()
        assert isinstance(span, ReadableSpan)
        encoded = len(encode_spans([span]).SerializeToString())
        assert encoded > 2 * size, kind  # the value was kept, not dropped by the SDK
        assert estimate_bytes(span) >= 0.9 * encoded, kind


def test_the_estimate_of_a_deep_or_self_holding_value_ends() -> None:
    """A value nested past the counted depth, one holding itself: counted, no recursion error."""
    deep: Any = "z" * 100
    for _ in range(50):
        deep = {"d": deep}
    cycle: list[Any] = []
    cycle.append(cycle)
    for value in (deep, cycle):
        assert _span_bytes._value_bytes(value) >= 10


# -- secrets in a backend's partial-success message ------------------------------------------


def test_configured_header_values_are_redacted_in_a_partial_success_message(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The backend's message quotes a configured header value and a bearer token without
    its scheme word: neither is logged."""
    with OtlpReceiver("http/protobuf") as receiver:
        receiver.reject_spans = 1
        receiver.reject_message = "token tokABCDEF123456 of org 'S3cr3tValue42' not allowed"
        for key, value in receiver.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv(
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "authorization=Bearer%20tokABCDEF123456,x-scope-orgid=S3cr3tValue42",
        )
        telemetry = at.configure({"enabled": True, "exporters": ["otlp"], "span_groups": "all"})
        try:
            with caplog.at_level(logging.WARNING, logger="asynctrace"):
                with at.umbrella_span("step", "rl.step"):
                    pass
                assert telemetry.flush(10.0) is False  # the span was rejected
        finally:
            telemetry.shutdown(2.0)
        assert receiver.headers
        assert receiver.headers[0]["x-scope-orgid"] == "S3cr3tValue42"
        rejections = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
        assert len(rejections) == 1
        assert "not allowed" in rejections[0]
        assert "tokABCDEF123456" not in caplog.text
        assert "S3cr3tValue42" not in caplog.text


# -- an exporter whose shutdown raises --------------------------------------------------------


class ShutdownRaises(SpanExporter):
    """Delivers; its first export raises when asked; its shutdown always raises."""

    def __init__(self, fail_first_export: bool) -> None:
        self.fail_first_export = fail_first_export
        self.exports = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exports += 1
        if self.fail_first_export and self.exports == 1:
            raise RuntimeError("transient export error")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        raise OSError("could not close the output: last records lost")


@pytest.mark.parametrize("provider", ["fast", "sdk"])
@pytest.mark.parametrize("fail_first_export", [False, True])
def test_an_exporter_whose_shutdown_raises_fails_the_shutdown(
    provider: str, fail_first_export: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """``shutdown()`` returns ``False`` and the error is logged once, worded for a shutdown,
    also after an export error was logged (a different warning)."""
    exporter = ShutdownRaises(fail_first_export)
    telemetry = at.configure(
        {"enabled": True, "exporters": [exporter], "provider": provider, "span_groups": "all"}
    )
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        with at.umbrella_span("step", "rl.a"):
            pass
        assert telemetry.flush(5.0) is not fail_first_export
        with at.umbrella_span("step", "rl.b"):
            pass
        assert telemetry.flush(5.0)
        assert telemetry.shutdown(5.0) is False
    shutdown = [r for r in caplog.records if "raised in shutdown" in r.getMessage()]
    assert len(shutdown) == 1
    assert "keeps running" not in shutdown[0].getMessage()
    assert shutdown[0].exc_info is not None
    assert "last records lost" in caplog.text


class HttpShutdownRaises(HttpSpanExporter):
    def shutdown(self) -> None:
        super().shutdown()  # type: ignore[no-untyped-call]
        raise OSError("the connection pool could not be closed")


def test_an_otlp_exporter_whose_shutdown_raises_fails_the_retrying_shutdown(
    made: list[QueuedSpanProcessor], caplog: pytest.LogCaptureFixture
) -> None:
    """The retrying queue (OTLP) as the plain one: delivered, then ``False`` from shutdown."""
    with OtlpReceiver("http/protobuf") as receiver:
        exporter = HttpShutdownRaises(endpoint=receiver.traces_endpoint, timeout=TIMEOUT_S)
        processor = RetryingSpanProcessor(exporter, name="otlp", schedule_delay_millis=20)
        provider = TracerProvider()
        provider.add_span_processor(processor)
        provider.get_tracer("r").start_span("s").end()
        assert processor.force_flush(5_000)
        with caplog.at_level(logging.WARNING, logger="asynctrace"):
            assert processor.shutdown_within(5.0) is False
        assert processor.stats().exported == 1
        assert "raised in shutdown" in caplog.text
