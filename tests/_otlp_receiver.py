"""A small OTLP trace receiver for the tests: OTLP/HTTP and OTLP/gRPC on 127.0.0.1.

It decodes every ``ExportTraceServiceRequest`` with ``opentelemetry-proto``
and keeps the spans as plain :class:`ReceivedSpan` records. It can be
stopped (the port then refuses connections, as a collector that is down
does) and started again on the same port.

Run as a script (``python tests/_otlp_receiver.py grpc``), it serves until
killed, printing ``PORT <n>`` on its first line and a line per request.
"""

from __future__ import annotations

import contextlib
import gzip
import select
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OtlpReceiver", "ReceivedSpan", "free_port"]


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids in lower-case hex)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    attributes: Mapping[str, Any]
    resource: Mapping[str, Any]
    scope: str


def _peer_gone(connection: socket.socket) -> bool:
    """Whether the client closed its end (its timeout passed): a peek reads end of file."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return None if kind is None else getattr(value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


class OtlpReceiver:
    """Receives OTLP traces over ``http/protobuf`` or ``grpc`` on 127.0.0.1.

    Args:
        protocol: ``"http/protobuf"`` or ``"grpc"``.
        port: the port to listen on (default: a free one, kept across restarts).
        keep: keep every span as a :class:`ReceivedSpan` (what the tests read);
            ``False`` parses each request and only counts its spans in
            ``counted``, as a collector's receiver costs (the benchmarks).

    :attr:`spans` holds what the client was told arrived. A request whose client
    gave up first (its timeout passed while a loaded machine kept the receiver
    slow) still arrived, as with any collector, but the client counts it failed:
    its spans go to :attr:`unacknowledged`, so the tests' exact accounting of
    delivered and dropped spans compares like with like.
    """

    def __init__(
        self, protocol: str = "http/protobuf", port: int | None = None, *, keep: bool = True
    ) -> None:
        if protocol not in ("http/protobuf", "grpc"):
            raise ValueError(f"protocol: {protocol!r}; accepted: http/protobuf, grpc")
        self.protocol = protocol
        self.keep = keep  # False: every request is parsed and its spans counted, not kept
        self.counted = 0
        self.port = port if port is not None else free_port()
        self.spans: list[ReceivedSpan] = []
        self.unacknowledged: list[ReceivedSpan] = []  # arrived, but the reply did not
        self.requests = 0
        self.request_times: list[float] = []  # time.monotonic() of each request answered
        self.headers: list[dict[str, str]] = []
        self.on_request: Callable[[int], None] | None = None
        self.stall_next_s = 0.0  # the next request waits this long first: a slow collector
        self.refuse_with: int | None = None  # HTTP: answer every request with this status
        self.retry_after: str | None = None  # HTTP: the Retry-After header of a refusal
        # gRPC: fail every request with this status code (a grpc.StatusCode); with
        # retry_delay_s, a google.rpc.RetryInfo in the trailers asks for that wait.
        self.abort_with: Any = None
        self.retry_delay_s: float | None = None
        # Both: a delivered request's reply rejects up to this many of its spans
        # (OTLP partial success), with this message; the rest are kept.
        self.reject_spans = 0
        self.reject_message = ""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._server: Any = None
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # -- endpoints -----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The base endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_endpoint(self) -> str:
        """The traces endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)."""
        if self.protocol == "grpc":
            return self.endpoint
        return f"{self.endpoint}/v1/traces"

    def env(self, *, timeout_s: float | None = None) -> dict[str, str]:
        """The environment variables that point an exporter here, protocol included."""
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": self.protocol,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.traces_endpoint,
        }
        if self.protocol == "grpc":
            env["OTEL_EXPORTER_OTLP_TRACES_INSECURE"] = "true"
        if timeout_s is not None:
            env["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"] = f"{timeout_s:g}"
        return env

    # -- up and down -----------------------------------------------------------

    @property
    def up(self) -> bool:
        """Whether the receiver is listening."""
        return self._server is not None

    def start(self) -> OtlpReceiver:
        """Start listening (again) on :attr:`port`."""
        if self._server is not None:
            return self
        if self.protocol == "grpc":
            self._server = self._start_grpc()
        else:
            self._server = self._start_http()
        return self

    def stop(self) -> None:
        """Stop listening: connections are refused until :meth:`start`."""
        server, self._server = self._server, None
        if server is None:
            return
        if self.protocol == "grpc":
            server.stop(grace=None).wait(5)
        else:
            server.shutdown()
            server.server_close()
            with self._lock:  # kept-alive connections too: a collector that is down
                connections, self._connections = list(self._connections), set()
            for connection in connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if self._thread is not None:
                self._thread.join(5)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_http(self) -> ThreadingHTTPServer:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Buffered: a reply's status line, headers and body leave in one write at
            # flush(). Unbuffered, the headers alone are a whole reply (its body is
            # empty): the client may take it, succeed and close, and the body's own
            # write then fails, unacknowledging spans the client counts delivered.
            wbufsize = -1

            def setup(self) -> None:
                super().setup()
                with receiver._lock:
                    receiver._connections.add(self.connection)

            def finish(self) -> None:
                with receiver._lock:
                    receiver._connections.discard(self.connection)
                with contextlib.suppress(OSError):  # a reply that failed: flushed again here
                    super().finish()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                refusal = receiver.refuse_with
                if refusal is not None:  # a collector that refuses: nothing is kept
                    with receiver._lock:
                        receiver.requests += 1
                        receiver.request_times.append(time.monotonic())
                    self.send_response(refusal)
                    if receiver.retry_after is not None:
                        self.send_header("Retry-After", receiver.retry_after)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                receiver._stall()
                if _peer_gone(self.connection):  # the client timed out while we were slow
                    receiver._accept(request, {}, acknowledged=False)
                    return
                kept = receiver._accept(request, {k.lower(): v for k, v in self.headers.items()})
                reply = receiver._reply(request).SerializeToString()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                    self.wfile.flush()
                except OSError:  # the reply did not reach the client: it will count a failure
                    receiver._unacknowledge(kept)
                    raise

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return server

    def _start_grpc(self) -> Any:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(
                self, request: ExportTraceServiceRequest, context: Any
            ) -> ExportTraceServiceResponse:
                if receiver.abort_with is not None:  # a collector that fails the call
                    with receiver._lock:
                        receiver.requests += 1
                        receiver.request_times.append(time.monotonic())
                    if receiver.retry_delay_s is not None:
                        from google.rpc.error_details_pb2 import RetryInfo

                        info = RetryInfo()
                        info.retry_delay.FromNanoseconds(int(receiver.retry_delay_s * 1e9))
                        context.set_trailing_metadata(
                            (("google.rpc.retryinfo-bin", info.SerializeToString()),)
                        )
                    context.abort(receiver.abort_with, "refused by the test receiver")
                receiver._stall()
                metadata = dict(context.invocation_metadata())
                receiver._accept(request, metadata, acknowledged=context.is_active())
                return receiver._reply(request)

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4),
            options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 64 << 20)],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"127.0.0.1:{self.port}")
        server.start()
        return server

    # -- what arrived ------------------------------------------------------------

    def _accept(
        self,
        request: ExportTraceServiceRequest,
        headers: dict[str, str],
        *,
        acknowledged: bool = True,
    ) -> list[ReceivedSpan]:
        """Take one request's spans; those whose reply cannot reach the client go aside.

        A request the client gave up on (its timeout passed while the receiver was
        slow) arrived, but the client counts it failed: such spans are kept apart in
        :attr:`unacknowledged`, as a collector's at-least-once delivery leaves them.
        """
        if not self.keep:  # a collector's cost: the request parsed (in C), the spans counted
            count = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            with self._changed:
                self.counted += count
                self.requests += 1
                self._changed.notify_all()
            if self.on_request is not None:
                self.on_request(count)
            return []
        spans: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            name=span.name,
                            attributes=_attributes(span.attributes),
                            resource=resource,
                            scope=scope_spans.scope.name,
                        )
                    )
        if not acknowledged:
            with self._lock:
                self.unacknowledged.extend(spans)
            return spans
        with self._changed:
            self.spans.extend(spans)
            self.requests += 1
            self.request_times.append(time.monotonic())
            self.headers.append(headers)
            self._changed.notify_all()
        if self.on_request is not None:
            self.on_request(len(spans))
        return spans

    def _reply(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        """The reply to a delivered request: a partial success when spans are to be rejected."""
        reply = ExportTraceServiceResponse()
        if self.reject_spans:
            count = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            reply.partial_success.rejected_spans = min(count, self.reject_spans)
            reply.partial_success.error_message = self.reject_message
        return reply

    def _stall(self) -> None:
        with self._lock:
            stall, self.stall_next_s = self.stall_next_s, 0.0
        if stall:
            time.sleep(stall)

    def _unacknowledge(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            ids = {id(span) for span in spans}
            self.spans[:] = [span for span in self.spans if id(span) not in ids]
            self.unacknowledged.extend(spans)

    def wait_for(self, count: int, timeout_s: float = 10.0) -> bool:
        """Wait until at least *count* spans arrived; whether they did."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self.spans) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def clear(self) -> None:
        """Forget what arrived so far."""
        with self._lock:
            self.spans.clear()
            self.unacknowledged.clear()
            self.headers.clear()
            self.request_times.clear()
            self.requests = 0


if __name__ == "__main__":  # pragma: no cover - a manual aid
    # python _otlp_receiver.py [PROTOCOL] [count]: "count" parses and counts, keeps nothing
    receiver = OtlpReceiver(
        sys.argv[1] if len(sys.argv) > 1 else "http/protobuf", keep="count" not in sys.argv[2:]
    )
    receiver.on_request = lambda n: print(f"{n} spans", flush=True)
    receiver.start()
    print(f"PORT {receiver.port}", flush=True)
    threading.Event().wait()
