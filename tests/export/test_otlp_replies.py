"""What the collector says back: partial success, Retry-After, RetryInfo, gRPC statuses.

A real OTLP receiver on 127.0.0.1 (``tests/_otlp_receiver.py``, decoding
with opentelemetry-proto) answers as each test sets it; the exporters and the
retry buffer are asynctrace's, over OpenTelemetry's clients. Also here: the
export queue's counting around exporters that empty their batch, flush
markers against a stuck exporter, the retry buffer's size estimate, the
abandoned-spans warning, span names that are not strings, and an OTLP/gRPC
endpoint with credentials.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags, TraceState

from asynctrace import ConfigurationError
from asynctrace._fast import FastTracerProvider
from asynctrace.export import _export_attempt, _retry_schedule
from asynctrace.export._adapters import ConvertingSink
from asynctrace.export._convert import Converter
from asynctrace.export._otlp import otlp_exporter
from asynctrace.export._otlp_http import HttpSpanExporter
from asynctrace.export._otlp_wire import WireEncoder, request_bytes
from asynctrace.export._queue import QueuedSpanProcessor
from asynctrace.export._retry import RetryingSpanProcessor
from asynctrace.export._sinks import ExporterSink
from asynctrace.export._span_bytes import estimate_bytes
from asynctrace.export._sync import _Marker

sys.path.insert(0, str(Path(__file__).parent.parent))
from _otlp_receiver import OtlpReceiver

TIMEOUT_S = 0.25  # per attempt: shorter than any wait a test's collector asks for


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


def _exporter(receiver: OtlpReceiver) -> Any:
    if receiver.protocol == "grpc":
        from asynctrace.export._otlp_grpc import GrpcSpanExporter

        return GrpcSpanExporter(endpoint=receiver.endpoint, insecure=True, timeout=TIMEOUT_S)
    return HttpSpanExporter(endpoint=receiver.traces_endpoint, timeout=TIMEOUT_S)


def _start(
    receiver: OtlpReceiver, made: list[QueuedSpanProcessor], provider: str = "fast"
) -> tuple[Any, RetryingSpanProcessor]:
    """A retrying processor to *receiver* on a fresh provider; its tracer."""
    exporter = _exporter(receiver)
    limits = {"schedule_delay_millis": 20, "max_export_batch_size": 5}
    resource = Resource.create({"service.name": "replies"})
    if provider == "fast":
        fast = FastTracerProvider(resource)
        encode = WireEncoder(fast.resource, fast.limits).encode
        processor = RetryingSpanProcessor(exporter, name="otlp", convert=encode, **limits)
        fast.add_queue(processor)
        tracer: Any = fast.get_tracer("replies")
    else:
        sdk = TracerProvider(resource=resource)
        processor = RetryingSpanProcessor(exporter, name="otlp", **limits)
        sdk.add_span_processor(processor)
        tracer = sdk.get_tracer("replies")
    made.append(processor)
    return tracer, processor


PROTOCOLS = ["http/protobuf", "grpc"]


def _grpc_or_skip(protocol: str) -> None:
    if protocol == "grpc":
        pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")


# -- partial success -------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["fast", "sdk"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_spans_the_collector_rejects_are_failed_not_exported(
    protocol: str,
    provider: str,
    made: list[QueuedSpanProcessor],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A reply with ``partial_success.rejected_spans`` moves those spans from exported to
    failed; the flush says so; the collector's message is logged once, redacted."""
    _grpc_or_skip(protocol)
    with OtlpReceiver(protocol) as receiver:
        receiver.reject_spans = 3  # of each request of 5
        receiver.reject_message = "too old; token=S3CRETVALUE"
        tracer, processor = _start(receiver, made, provider)
        with caplog.at_level(logging.WARNING, logger="asynctrace"):
            for n in range(10):
                tracer.start_span(f"s{n}").end()
            assert processor.force_flush(5_000) is False
        stats = processor.stats()
        assert receiver.requests == 2
        assert (stats.exported, stats.failed, stats.buffered, stats.retried) == (4, 6, 0, 0)
        rejections = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
        assert len(rejections) == 1
        assert "3 of the 5 spans" in rejections[0]
        assert "too old" in rejections[0]
        assert "S3CRETVALUE" not in caplog.text
        receiver.reject_spans = 0
        tracer.start_span("ok").end()
        assert processor.force_flush(5_000)
        assert processor.stats().exported == 5


# -- Retry-After and RetryInfo --------------------------------------------------------------


def _wait_for_requests(receiver: OtlpReceiver, count: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(receiver.request_times) >= count:
            return True
        time.sleep(0.01)
    return False


def _ask_to_wait(receiver: OtlpReceiver, seconds: float) -> None:
    if receiver.protocol == "grpc":
        import grpc

        receiver.abort_with = grpc.StatusCode.RESOURCE_EXHAUSTED
        receiver.retry_delay_s = seconds
    else:
        receiver.refuse_with = 429
        receiver.retry_after = f"{seconds:g}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_attempt_before_the_wait_the_collector_asked_for(
    protocol: str, made: list[QueuedSpanProcessor]
) -> None:
    """Retry-After on a 429 (HTTP) or RetryInfo (gRPC) longer than the exporter's timeout:
    OpenTelemetry's client gives up the attempt at once; the buffer sends nothing before
    the wait, not even for a flush, and then delivers."""
    _grpc_or_skip(protocol)
    with OtlpReceiver(protocol) as receiver:
        _ask_to_wait(receiver, 1.5)
        tracer, processor = _start(receiver, made)
        tracer.start_span("held").end()
        assert _wait_for_requests(receiver, 1)
        first = receiver.request_times[0]
        assert processor.force_flush(300) is False  # a flush does not send early
        time.sleep(0.5)  # the backoff alone (0.05 s, 0.1 s) would have sent five more
        assert len(receiver.request_times) == 1
        assert processor.stats().buffered == 1
        receiver.refuse_with = receiver.abort_with = None
        assert processor.force_flush(5_000)
        assert receiver.request_times[1] - first >= 1.4
        stats = processor.stats()
        assert (stats.exported, stats.failed, stats.buffered) == (1, 0, 0)


def test_a_long_retry_after_is_honoured_up_to_the_bound(
    made: list[QueuedSpanProcessor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait longer than MAX_RETRY_AFTER_S is cut to it: the batch is not stuck for an hour."""
    monkeypatch.setattr(_export_attempt, "MAX_RETRY_AFTER_S", 0.5)
    with OtlpReceiver("http/protobuf") as receiver:
        _ask_to_wait(receiver, 3600)
        tracer, _processor = _start(receiver, made)
        tracer.start_span("held").end()
        assert _wait_for_requests(receiver, 2, timeout_s=5.0)
        gap = receiver.request_times[1] - receiver.request_times[0]
        assert 0.45 <= gap < 5.0


@pytest.mark.parametrize(
    ("code", "retry_info"),
    [
        ("UNAUTHENTICATED", False),
        ("PERMISSION_DENIED", False),
        ("INVALID_ARGUMENT", False),
        ("UNAUTHENTICATED", True),  # RetryInfo makes no other code retryable
    ],
)
def test_a_grpc_status_not_to_retry_fails_the_batch_at_once(
    code: str, retry_info: bool, made: list[QueuedSpanProcessor]
) -> None:
    """OTLP/gRPC: these statuses are not retried: the batch is failed, not held."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    import grpc

    with OtlpReceiver("grpc") as receiver:
        receiver.abort_with = getattr(grpc.StatusCode, code)
        if retry_info:
            receiver.retry_delay_s = 0.05
        tracer, processor = _start(receiver, made)
        for n in range(5):
            tracer.start_span(f"s{n}").end()
        assert processor.force_flush(5_000) is False
        time.sleep(0.3)  # a held batch would be sent again within 0.1 s
        stats = processor.stats()
        assert (stats.exported, stats.failed, stats.buffered, stats.retried) == (0, 5, 0, 0)
        assert receiver.requests == 1


# -- the queue's counting -----------------------------------------------------------------


class _Draining(SpanExporter):
    """Sends and consumes the list it is given, as an exporter may."""

    def __init__(self, result: SpanExportResult) -> None:
        self.result = result
        self.sent: list[Any] = []

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        assert isinstance(spans, list)
        while spans:
            self.sent.append(spans.pop())
        return self.result


@pytest.mark.parametrize("result", [SpanExportResult.SUCCESS, SpanExportResult.FAILURE])
@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_an_exporter_that_empties_its_batch_loses_no_count(
    provider: str, result: SpanExportResult, made: list[QueuedSpanProcessor]
) -> None:
    exporter = _Draining(result)
    if provider == "fast":
        fast = FastTracerProvider(Resource.create({}))
        sink: Any = ConvertingSink(exporter, Converter(fast.resource, fast.limits))
        processor = QueuedSpanProcessor(sink, name="draining", schedule_delay_millis=20)
        fast.add_queue(processor)
        tracer: Any = fast.get_tracer("d")
    else:
        sdk = TracerProvider()
        processor = QueuedSpanProcessor(
            ExporterSink(exporter), name="draining", schedule_delay_millis=20
        )
        sdk.add_span_processor(processor)
        tracer = sdk.get_tracer("d")
    made.append(processor)
    for n in range(10):
        tracer.start_span(f"s{n}").end()
    delivered = result is SpanExportResult.SUCCESS
    assert processor.force_flush(5_000) is delivered
    stats = processor.stats()
    assert len(exporter.sent) == 10
    assert (stats.exported, stats.failed) == ((10, 0) if delivered else (0, 10))


def test_repeated_flushes_against_a_stuck_exporter_leave_one_marker(
    made: list[QueuedSpanProcessor],
) -> None:
    """Each flush that times out would leave a marker behind in the queue, counted against
    max_queue_size: new spans were then dropped early. Flushes with nothing queued after
    the last marker share it."""
    release = threading.Event()

    class Stuck(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            release.wait(10)
            return SpanExportResult.SUCCESS

    sdk = TracerProvider()
    processor = QueuedSpanProcessor(
        ExporterSink(Stuck()), name="stuck", max_queue_size=10, schedule_delay_millis=10
    )
    sdk.add_span_processor(processor)
    made.append(processor)
    tracer = sdk.get_tracer("s")
    tracer.start_span("first").end()
    deadline = time.monotonic() + 5
    while processor.stats().in_flight != 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    try:
        for _ in range(50):
            assert processor.force_flush(1) is False
        assert sum(item.__class__ is _Marker for item in processor._queue) == 1
        for n in range(9):
            tracer.start_span(f"s{n}").end()
        assert processor.stats().dropped == 0
    finally:
        release.set()
    assert processor.force_flush(5_000)
    stats = processor.stats()
    assert (stats.exported, stats.dropped) == (10, 0)


def test_the_abandoned_spans_warning_counts_the_retry_buffer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.FAILURE

    sdk = TracerProvider()
    processor = RetryingSpanProcessor(Failing(), name="otlp", schedule_delay_millis=10)
    sdk.add_span_processor(processor)
    tracer = sdk.get_tracer("a")
    for n in range(7):
        tracer.start_span(f"s{n}").end()
    deadline = time.monotonic() + 5
    while processor.stats().buffered != 7 and time.monotonic() < deadline:
        time.sleep(0.005)
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        assert processor.shutdown_within(0.2) is False
    [warning] = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
    assert "7 buffered spans are abandoned" in warning
    assert processor.stats().dropped == 7


# -- the buffer's estimate --------------------------------------------------------------------


def _spans_with_large_parts() -> list[Any]:
    tracer = TracerProvider().get_tracer("t")
    spans = []
    span = tracer.start_span("err")
    span.set_status(Status(StatusCode.ERROR, "E" * 100_000))
    span.end()
    spans.append(span)
    span = tracer.start_span("link")
    context = SpanContext(1, 2, False, TraceFlags(1), TraceState([("k", "v" * 200)]))
    span.add_link(context, {"a": "x" * 50_000})
    span.end()
    spans.append(span)
    return spans


def test_the_estimate_counts_descriptions_links_and_trace_state() -> None:
    """retry_buffer_bytes bounds what the estimate counts: every large part is counted."""
    for span in _spans_with_large_parts():
        encoded = len(encode_spans([span]).SerializeToString())
        assert estimate_bytes(span) >= 0.9 * encoded, span.name
    tracer = TracerProvider().get_tracer("t")
    state = TraceState([("vendor", "s" * 200)])
    parent = SpanContext(3, 4, True, TraceFlags(1), state)
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    span = tracer.start_span("child", context=set_span_in_context(NonRecordingSpan(parent)))
    span.end()
    assert span.context.trace_state == state
    assert estimate_bytes(span) >= 260
    assert Link  # imported for the reader: links are what add_link makes


# -- span names -----------------------------------------------------------------------------


def test_a_name_that_is_not_a_string_is_written_as_its_str() -> None:
    """Span and event names the span helpers did not check are written as their text,
    as the chrome writer writes them (a list, which no cache can hold, included)."""
    provider = FastTracerProvider(Resource.create({}))
    encoder = WireEncoder(provider.resource, provider.limits)
    tracer = provider.get_tracer("n")
    spans = []
    tracer_spans: list[Any] = []
    for name in (123, 1.5, None, "ok", ["x"]):
        span = tracer.start_span(name)  # type: ignore[arg-type]
        span.add_event(name)  # type: ignore[arg-type]
        span.end()
        tracer_spans.append(span)
        spans.append(encoder.encode(span))
    request = ExportTraceServiceRequest.FromString(request_bytes(spans))
    names = [
        span.name
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    assert names == ["123", "1.5", "None", "ok", "['x']"]
    events = [
        event.name
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
        for event in span.events
    ]
    assert events == names
    converter = Converter(provider.resource, provider.limits)  # for the SDK's exporters
    readable = [converter.readable(span) for span in tracer_spans]
    assert [span.name for span in readable] == names
    assert [span.events[0].name for span in readable] == names


# -- credentials in a gRPC endpoint --------------------------------------------------------


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
)
def test_a_grpc_endpoint_with_credentials_is_refused_without_showing_them(
    variable: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """gRPC cannot send userinfo, and OpenTelemetry's exporter logs its endpoint on every
    failure: such an endpoint is a configuration error naming the variable, not the secret."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "http://user:S3CRETPW@127.0.0.1:1")
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigurationError) as raised:
        otlp_exporter("grpc")
    message = str(raised.value)
    assert variable in message
    assert "REDACTED@127.0.0.1:1" in message
    assert "S3CRETPW" not in message
    assert "S3CRETPW" not in caplog.text
    monkeypatch.setenv(variable, "http://127.0.0.1:1")
    otlp_exporter("grpc").shutdown()
