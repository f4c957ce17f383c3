"""OTLP/HTTP export to a real receiver on 127.0.0.1."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from asynctrace import Bucket, iteration_scope, managed_span, umbrella_span
from asynctrace._running import shutdown
from asynctrace._runtime import configure


class Receiver(ThreadingHTTPServer):
    """A minimal OTLP/HTTP trace receiver: decodes every request with opentelemetry-proto."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.received = threading.Event()

    @property
    def endpoint(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        encoding = self.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.requests.append(request)
        self.server.paths.append(self.path)
        self.server.headers.append({k.lower(): v for k, v in self.headers.items()})
        self.server.received.set()
        payload = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver served from a thread."""
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _value(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value"))


def test_spans_reach_an_otlp_receiver(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resource attributes, parent links and rl.* attributes arrive intact over http/protobuf."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=rl")
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["otlp"],
            "service_name": "trainer",
            "run_id": "otlp-run",
            "resource_attributes": {"team": "rl"},
        },
        rank=1,
        world_size=2,
    )
    try:
        with iteration_scope(7), umbrella_span("step", "rl.step"):
            with managed_span("generation", "rl.generate", bucket=Bucket.PRODUCTIVE) as span:
                span.set_attribute("rl.rollout.attempt", 2)
        assert telemetry.flush(10.0)
    finally:
        shutdown(timeout_s=5.0)
    assert receiver.received.is_set()
    assert receiver.paths == ["/v1/traces"] * len(receiver.paths)
    assert all(h["x-team"] == "rl" for h in receiver.headers)  # OTEL_EXPORTER_OTLP_HEADERS
    resource_spans = [rs for request in receiver.requests for rs in request.resource_spans]
    resource = {a.key: _value(a.value) for a in resource_spans[0].resource.attributes}
    assert resource["service.name"] == "trainer"
    assert resource["asynctrace.run_id"] == "otlp-run"
    assert resource["asynctrace.rank"] == 1
    assert resource["asynctrace.world_size"] == 2
    assert resource["team"] == "rl"
    assert resource["host.name"]
    assert resource["process.pid"]
    spans = {
        span.name: span
        for rs in resource_spans
        for scope in rs.scope_spans
        for span in scope.spans
    }
    step, generate = spans["rl.step"], spans["rl.generate"]
    assert generate.parent_span_id == step.span_id
    assert generate.trace_id == step.trace_id
    attrs = {a.key: _value(a.value) for a in generate.attributes}
    assert attrs == {"rl.iteration": 7, "rl.bucket": "productive", "rl.rollout.attempt": 2}
    assert {a.key: _value(a.value) for a in step.attributes} == {
        "rl.iteration": 7,
        "asynctrace.group": "step",
    }
    assert telemetry.stats()["otlp"].exported == 2


def test_the_proxy_variables_are_read_once_at_start(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY and NO_PROXY are honoured as requests honours them, read at start.

    The receiver stands in for the proxy: a request sent through a proxy names
    the whole URL on its request line. Changing the variables afterwards
    changes nothing (requests would otherwise scan the environment on every
    request).
    """
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector.invalid:4318")
    monkeypatch.setenv("HTTP_PROXY", receiver.endpoint)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    _export_one_span(lambda: monkeypatch.setenv("NO_PROXY", "collector.invalid"))  # too late
    assert receiver.paths == ["http://collector.invalid:4318/v1/traces"]

    # NO_PROXY set at start: straight to the endpoint, the dead proxy never asked
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    receiver.paths.clear()
    _export_one_span()
    assert receiver.paths == ["/v1/traces"]


def _export_one_span(after_start: Callable[[], object] = lambda: None) -> None:
    """Start an otlp-only pipeline, call *after_start*, export one span, shut down."""
    telemetry = configure({"enabled": True, "span_groups": "all", "exporters": ["otlp"]})
    try:
        after_start()
        with umbrella_span("step", "rl.step"):
            pass
        assert telemetry.flush(10.0)
    finally:
        shutdown(timeout_s=5.0)
