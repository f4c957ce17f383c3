"""OTLP/HTTP statuses and unsendable batches: what is retried, what is refused, what is counted.

A real OTLP/HTTP receiver on 127.0.0.1 answers each request as the test says,
by the names of the spans it holds (decoded with opentelemetry-proto): a
status, or no answer at all (the connection closed, as a crashed collector
leaves it). The exporter and the retry buffer are asynctrace's own, over
OpenTelemetry's HTTP client; the buffer's first backoff is shortened so the
retries of a test take tens of milliseconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from asynctrace._fast import FastTracerProvider
from asynctrace.export import _retry_schedule
from asynctrace.export._otlp_http import HttpSpanExporter
from asynctrace.export._otlp_wire import WireEncoder
from asynctrace.export._retry import RetryingSpanProcessor

TIMEOUT_S = 0.25  # per attempt: shorter than OpenTelemetry's first backoff, so one request each
RETRYABLE = [429, 502, 503, 504]
REFUSED = [400, 401, 404, 408, 413, 500, 501, 505, 301, 302, 307, 308]

Answer = Callable[[list[str]], "int | None"]


class StatusReceiver(ThreadingHTTPServer):
    """Answers each OTLP/HTTP request with what *answer* says for its span names.

    ``None`` closes the connection without a reply. :attr:`log` has one
    ``(status, names)`` per request, :attr:`delivered` the names answered 200.
    """

    daemon_threads = True

    def __init__(self, answer: Answer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.log: list[tuple[int | None, list[str]]] = []
        self.delivered: list[str] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"

    def statuses(self) -> list[int | None]:
        with self.lock:
            return [status for status, _ in self.log]


class _Handler(BaseHTTPRequestHandler):
    server: StatusReceiver
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # the reply leaves in one write

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        names = [
            span.name
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        status = self.server.answer(names)
        with self.server.lock:
            self.server.log.append((status, names))
            if status == 200:
                self.server.delivered.extend(names)
        if status is None:  # no reply: the client sees the connection closed
            self.close_connection = True
            return
        reply = ExportTraceServiceResponse().SerializeToString() if status == 200 else b""
        self.send_response(status)
        if 300 <= status < 400:
            self.send_header("Location", "http://127.0.0.1:9/v1/traces")
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], StatusReceiver]]:
    """Start a :class:`StatusReceiver` with the given answer; stopped after the test."""
    started: list[tuple[StatusReceiver, threading.Thread]] = []

    def start(answer: Answer) -> StatusReceiver:
        server = StatusReceiver(answer)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_retry_schedule, "INITIAL_BACKOFF_S", 0.05)
    monkeypatch.setattr(_retry_schedule, "MAX_BACKOFF_S", 0.2)


@pytest.fixture
def processors() -> Iterator[list[RetryingSpanProcessor]]:
    made: list[RetryingSpanProcessor] = []
    yield made
    for processor in made:
        processor.shutdown_within(2.0)


def _start(
    receiver: StatusReceiver,
    made: list[RetryingSpanProcessor],
    *,
    provider: str = "fast",
    batch: int = 5,
    delay_ms: int = 20,
    **exporter_args: Any,
) -> tuple[Callable[[str], None], RetryingSpanProcessor]:
    """A retrying OTLP/HTTP processor to *receiver*; a function that records a span by name."""
    exporter = HttpSpanExporter(endpoint=receiver.endpoint, timeout=TIMEOUT_S, **exporter_args)
    limits = {"schedule_delay_millis": delay_ms, "max_export_batch_size": batch}
    resource = Resource.create({"service.name": "statuses"})
    if provider == "fast":
        fast = FastTracerProvider(resource)
        encode = WireEncoder(fast.resource, fast.limits).encode
        processor = RetryingSpanProcessor(exporter, name="otlp", convert=encode, **limits)
        fast.add_queue(processor)
        tracer: Any = fast.get_tracer("statuses")
    else:
        sdk = TracerProvider(resource=resource)
        processor = RetryingSpanProcessor(exporter, name="otlp", **limits)
        sdk.add_span_processor(processor)
        tracer = sdk.get_tracer("statuses")
    made.append(processor)

    def record(name: str, **attributes: Any) -> None:
        tracer.start_span(name, attributes=attributes).end()

    return record, processor


def _names(prefix: str, count: int = 5) -> list[str]:
    return [f"{prefix}{n}" for n in range(count)]


@pytest.mark.parametrize("provider", ["fast", "sdk"])
@pytest.mark.parametrize("status", REFUSED)
def test_a_status_not_to_retry_fails_the_batch_at_once(
    status: int,
    provider: str,
    serve: Callable[[Answer], StatusReceiver],
    processors: list[RetryingSpanProcessor],
) -> None:
    """Every status of 400 or more but 429, 502, 503 and 504 (OTLP/HTTP: MUST NOT retry),
    and a redirect, which OpenTelemetry's client neither follows nor fails: the batch is
    failed and counted at once, not held, not sent again. Later spans are delivered."""
    refuse = [True]
    receiver = serve(lambda names: status if refuse[0] else 200)
    record, processor = _start(receiver, processors, provider=provider)
    for name in _names("a"):
        record(name)
    assert processor.force_flush(5_000) is False
    time.sleep(0.2)  # a held batch would be sent again within 0.05 s
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.retried, stats.buffered) == (0, 5, 0, 0)
    # each span sent once, and refused (a host that stalls the recording thread past the
    # 20 ms delay splits the five into two requests)
    with receiver.lock:
        sent = sorted((answer, name) for answer, names in receiver.log for name in names)
    assert sent == [(status, name) for name in _names("a")]
    refuse[0] = False
    for name in _names("b"):
        record(name)
    assert processor.force_flush(5_000)
    assert receiver.delivered == _names("b")


@pytest.mark.parametrize("status", RETRYABLE)
def test_a_status_to_retry_is_held_and_delivered_later(
    status: int,
    serve: Callable[[Answer], StatusReceiver],
    processors: list[RetryingSpanProcessor],
) -> None:
    """429, 502, 503 and 504 hold the batch; it is sent again until the collector takes it."""
    receiver = serve(lambda names: status if len(receiver.log) < 2 else 200)
    record, processor = _start(receiver, processors)
    for name in _names("a"):
        record(name)
    assert processor.force_flush(5_000)
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.retried, stats.buffered) == (5, 0, 10, 0)
    assert receiver.statuses() == [status, status, 200]
    assert receiver.delivered == _names("a")


def test_a_head_that_met_transient_statuses_is_never_given_up(
    serve: Callable[[Answer], StatusReceiver],
    processors: list[RetryingSpanProcessor],
) -> None:
    """502 three times and then 200: the held batch is delivered, not given up because the
    batch behind it went through (a gateway's errors say the collector was not reached)."""
    receiver = serve(lambda names: 502 if len(receiver.log) < 3 else 200)
    record, processor = _start(receiver, processors, delay_ms=5_000)
    for name in _names("a") + _names("b"):  # two batches: b waits behind a
        record(name)
    assert processor.force_flush(5_000)
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.buffered) == (10, 0, 0)
    assert receiver.delivered == _names("a") + _names("b")
    assert receiver.statuses() == [502, 502, 502, 200, 200]


def test_a_refusal_of_the_batch_behind_does_not_give_up_the_head(
    serve: Callable[[Answer], StatusReceiver],
    processors: list[RetryingSpanProcessor],
) -> None:
    """The head gets no answer (a failure that says nothing), the batch behind it is refused
    (400): that refusal says nothing about the head, which stays held and is delivered when
    the collector answers."""
    answering = threading.Event()

    def answer(names: list[str]) -> int | None:
        if names[0].startswith("b"):
            return 400
        return 200 if answering.is_set() else None

    receiver = serve(answer)
    record, processor = _start(receiver, processors, delay_ms=5_000)
    for name in _names("a") + _names("b"):
        record(name)
    assert processor.force_flush(50) is False  # wakes the worker; a is held
    deadline = time.monotonic() + 5.0
    while 400 not in receiver.statuses() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 400 in receiver.statuses()  # the head failed three times: the batch behind was tried
    time.sleep(0.1)
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.buffered) == (0, 5, 5)
    answering.set()
    assert processor.force_flush(5_000) is False  # b failed since the last flush
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.buffered) == (5, 5, 0)
    assert receiver.delivered == _names("a")


def test_a_held_batch_refused_later_is_not_logged_as_delivered(
    serve: Callable[[Answer], StatusReceiver],
    processors: list[RetryingSpanProcessor],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No answer, then a 401 when the collector is back: the log says the batch was given
    up, not that the exporter delivers again."""
    back = threading.Event()
    receiver = serve(lambda names: 401 if back.is_set() else None)
    record, processor = _start(receiver, processors)
    caplog.set_level(logging.INFO, logger="asynctrace")
    for name in _names("a"):
        record(name)
    deadline = time.monotonic() + 5.0
    while len(receiver.log) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    back.set()
    assert processor.force_flush(5_000) is False
    assert processor.stats().failed == 5
    messages = [r.getMessage() for r in caplog.records if r.name == "asynctrace"]
    assert any("gave up a held batch" in m for m in messages), messages
    assert not any("delivers again" in m for m in messages), messages


def test_retried_counts_only_what_is_sent_again(
    serve: Callable[[Answer], StatusReceiver],
    processors: list[RetryingSpanProcessor],
) -> None:
    """One 503, then 200, for three batches: the first is sent again (5 spans retried); the
    two that waited behind it are sent once each, and are not counted as retried."""
    receiver = serve(lambda names: 503 if not receiver.log else 200)
    record, processor = _start(receiver, processors, delay_ms=5_000)
    for name in _names("a") + _names("b") + _names("c"):
        record(name)
    assert processor.force_flush(5_000)
    stats = processor.stats()
    assert (stats.exported, stats.retried, stats.failed) == (15, 5, 0)
    assert receiver.statuses() == [503, 200, 200, 200]


def test_spans_the_sdk_cannot_encode_fail_alone(
    serve: Callable[[Answer], StatusReceiver],
    processors: list[RetryingSpanProcessor],
) -> None:
    """The SDK provider: a span name with a lone surrogate makes OpenTelemetry's encoder fail
    the whole batch, and no request is made. The other spans of the batch are sent, the bad
    one is counted as failed, nothing is held or sent again."""
    receiver = serve(lambda names: 200)
    record, processor = _start(receiver, processors, provider="sdk", batch=64, delay_ms=5_000)
    good = _names("ok", 9)
    for name in [*good[:4], "bad\ud800", *good[4:]]:
        record(name)
    assert processor.force_flush(5_000) is False
    time.sleep(0.2)
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.retried, stats.buffered) == (9, 1, 0, 0)
    assert receiver.delivered == good
    for name in _names("later", 3):
        record(name)
    assert processor.force_flush(5_000)
    assert receiver.delivered == good + _names("later", 3)


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_a_batch_too_large_to_send_is_failed_not_retried(
    provider: str,
    serve: Callable[[Answer], StatusReceiver],
    processors: list[RetryingSpanProcessor],
) -> None:
    """A request over max_request_size is not sent (OpenTelemetry's rule): the batch fails
    at once and counted, instead of being held as if the collector were down."""
    receiver = serve(lambda names: 200)
    record, processor = _start(receiver, processors, provider=provider, max_request_size=600)
    record("big", blob="x" * 2_000)
    assert processor.force_flush(5_000) is False
    time.sleep(0.2)
    stats = processor.stats()
    assert (stats.exported, stats.failed, stats.retried, stats.buffered) == (0, 1, 0, 0)
    assert receiver.log == []
    record("small")
    assert processor.force_flush(5_000)
    assert receiver.delivered == ["small"]
