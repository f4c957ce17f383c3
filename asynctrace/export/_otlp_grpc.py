"""OpenTelemetry's OTLP/gRPC exporter, which also sends requests encoded by asynctrace.

:class:`GrpcSpanExporter` is OpenTelemetry's ``OTLPSpanExporter``
(``opentelemetry-exporter-otlp-proto-grpc``), configured by the same
arguments and ``OTEL_EXPORTER_OTLP_*`` variables. Its stub's ``Export``
method takes a request message or bytes already encoded (the serializer
passes bytes through), so given :class:`~._otlp_wire.EncodedSpan` items the
exporter's own retry loop, channel, reconnection, headers, timeout and
compression send them.

The stub also keeps what OpenTelemetry's exporter drops, for the retry
buffer: the reply of a delivered batch (its ``partial_success`` says how
many spans the collector rejected), and the status of a failed one. A
status OTLP says not to retry (``UNAUTHENTICATED``, ``PERMISSION_DENIED``,
``INVALID_ARGUMENT``, ...) refuses the batch for good; ``RetryInfo`` in the
trailers says how long to wait before the next attempt.

An endpoint with a user name or password, or with a query string or
fragment, is refused when the exporter is made (one from the environment
already by :func:`~._otlp_env.check_environment`, for every signal's
exporter, the goodput metric exporter's too): gRPC cannot send them (the
channel fails to resolve such a target, or OpenTelemetry's exporter drops
the query) and OpenTelemetry's exporter would log them with every failure.

A ``RetryInfo`` trailer that does not parse is taken out of the error
before OpenTelemetry's exporter reads it (it would raise): the batch fails
as one to retry, with no wait said.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import grpc  # type: ignore[import-untyped]
from google.rpc.error_details_pb2 import RetryInfo  # type: ignore[import-untyped]
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from .._redact import redact_text
from .._secret_words import REDACTED
from ._otlp_wire import EncodedSpan, request_bytes

__all__ = ["GrpcSpanExporter"]

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# What the base exporter must have for encoded requests to go through its retry loop.
_HOOKS = ("_export", "_translate_data", "_initialize_channel_and_stub")
# What OTLP/gRPC says a client must not retry. RESOURCE_EXHAUSTED is not among them: the
# specification retries it only with RetryInfo, but OpenTelemetry's exporter retries it
# by default (its retryable codes), and a batch it gave up on is held here the same way.
_NOT_RETRYABLE = frozenset(
    (
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
    )
)
_RETRY_INFO = "google.rpc.retryinfo-bin"
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class _Encoded:
    """An encoded request and the number of spans it holds."""

    __slots__ = ("count", "data")

    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self.count = count


def _serialize(request: Any) -> bytes:
    data: bytes = (
        request.data
        if request.__class__ is _Encoded
        else ExportTraceServiceRequest.SerializeToString(request)
    )
    return data


class _Stub:
    """The trace service's ``Export``, taking messages or encoded bytes.

    Given *notes* (the exporter), each call leaves its reply or its error there.
    """

    def __init__(self, channel: Any, notes: GrpcSpanExporter | None = None) -> None:
        deserialize = ExportTraceServiceResponse.FromString
        try:
            call = channel.unary_unary(
                _EXPORT,
                request_serializer=_serialize,
                response_deserializer=deserialize,
                _registered_method=True,
            )
        except TypeError:  # a grpcio without registered methods
            call = channel.unary_unary(
                _EXPORT, request_serializer=_serialize, response_deserializer=deserialize
            )
        if notes is None:
            self.Export = call
            return

        def export_noting_the_outcome(request: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                reply = call(request, *args, **kwargs)
            except grpc.RpcError as error:
                notes._error = error
                if _malformed_retry_info(error):  # OpenTelemetry's exporter would raise on it
                    raise _WithoutRetryInfo(error) from error
                raise
            notes._reply = reply
            return reply

        self.Export = export_noting_the_outcome


def _malformed_retry_info(error: Any) -> bool:
    """Whether *error*'s trailers have a ``RetryInfo`` that does not parse."""
    try:
        value = dict(error.trailing_metadata() or ()).get(_RETRY_INFO)
    except Exception:  # an error without trailers (raised before the call)
        return False
    if value is None:
        return False
    try:
        RetryInfo.FromString(value)
    except Exception:  # protobuf's DecodeError, or not bytes at all
        return True
    return False


class _WithoutRetryInfo(grpc.RpcError):  # type: ignore[misc]
    """*error* as OpenTelemetry's exporter reads it, without its malformed ``RetryInfo``."""

    def __init__(self, error: Any) -> None:
        super().__init__(str(error))
        self._error = error

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return tuple(
            (key, value)
            for key, value in (self._error.trailing_metadata() or ())
            if key != _RETRY_INFO
        )

    def __getattr__(self, name: str) -> Any:  # code(), details(), initial_metadata(), ...
        return getattr(self._error, name)

    def __str__(self) -> str:
        return str(self._error)


class GrpcSpanExporter(OTLPSpanExporter):
    """``OTLPSpanExporter`` over gRPC that also takes encoded spans.

    Example:
        >>> exporter = GrpcSpanExporter(endpoint="http://127.0.0.1:4317")
        >>> exporter.sends_encoded
        True
        >>> exporter.shutdown()
    """

    def __init__(self, endpoint: str | None = None, **kwargs: Any) -> None:
        self.refused: str | None = None
        """Why the last batch failed for good (a status OTLP says not to retry), else None."""
        self.transient: str | None = None
        """The status of the last batch's failure when the collector asked for a retry."""
        self.retry_after: float | None = None
        """Seconds the collector asked to wait (``RetryInfo``) after the last failure."""
        self.rejected = 0
        """Spans of the last batch, delivered, that the collector rejected (partial success)."""
        self.rejection: str | None = None
        """The collector's ``partial_success.error_message`` for the last batch, if any."""
        self._reply: Any = None
        self._error: Any = None
        raw = endpoint or next((os.environ[n] for n in _ENDPOINT_VARS if os.environ.get(n)), "")
        if "?" in raw or "#" in raw:
            source = "endpoint" if endpoint else _endpoint_variable()
            cut = min(i for i in (raw.find("?"), raw.find("#")) if i >= 0)
            shown = f"{redact_text(raw[:cut])}{raw[cut]}{REDACTED}"
            raise ValueError(
                f"{source}: the endpoint {shown!r} has a query string or fragment, which "
                "OTLP/gRPC cannot send; "
                "accepted: host:port or http(s)://host:port, with credentials in "
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS or OTEL_EXPORTER_OTLP_HEADERS"
            )
        super().__init__(endpoint=endpoint, **kwargs)
        target = getattr(self, "_endpoint", "")
        if isinstance(target, str) and "@" in target:
            channel = getattr(self, "_channel", None)
            if channel is not None:
                channel.close()
            source = "endpoint" if endpoint else _endpoint_variable()
            raise ValueError(
                f"{source}: the endpoint 'REDACTED@{target.rpartition('@')[2]}' has a user "
                "name or password, which OTLP/gRPC cannot send; accepted: host:port or "
                "http(s)://host:port, with credentials in OTEL_EXPORTER_OTLP_TRACES_HEADERS "
                "or OTEL_EXPORTER_OTLP_HEADERS"
            )

    @property
    def sends_encoded(self) -> bool:
        """Whether the installed exporter has the channel and retry loop this relies on.

        Read on the base class, which this class overrides, and on the client
        built: an OpenTelemetry exporter whose ``__init__`` builds its stock
        stub itself (1.30, say) would hand it bytes it cannot serialize.
        """
        base = super()
        return (
            all(callable(getattr(base, name, None)) for name in _HOOKS)
            and getattr(self, "_client", None).__class__ is _Stub
        )

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()  # type: ignore[no-untyped-call]
        self._client = _Stub(self._channel, self)  # type: ignore[assignment]

    def _translate_data(self, data: Any) -> Any:
        if isinstance(data, _Encoded):
            return data
        return super()._translate_data(data)

    def _count_data(self, data: Any) -> int:
        if isinstance(data, _Encoded):
            return data.count
        return len(data)

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        """Export SDK spans (OpenTelemetry encodes them) or :class:`EncodedSpan` items."""
        self._reply = self._error = None
        self.refused = self.transient = self.rejection = self.retry_after = None
        self.rejected = 0
        if not spans or spans[0].__class__ is not EncodedSpan:
            result = super().export(spans)
        else:
            encoded = _Encoded(request_bytes(spans), len(spans))
            result = self._export(encoded)  # type: ignore[arg-type]
        if result is SpanExportResult.SUCCESS:
            partial = getattr(self._reply, "partial_success", None)
            if partial is not None:
                self.rejected = max(0, int(partial.rejected_spans))
                self.rejection = partial.error_message or None
        elif self._error is not None:
            self._classify(self._error)
        return result

    def _classify(self, error: Any) -> None:
        """:attr:`refused`, :attr:`transient` and :attr:`retry_after` from the last error."""
        code = error.code() if callable(getattr(error, "code", None)) else None
        name = getattr(code, "name", str(code))
        retry_info = None
        try:
            trailers = error.trailing_metadata() or ()
            retry_info = dict(trailers).get(_RETRY_INFO)
        except Exception:  # an error without trailers (raised before the call)
            pass
        retryable = getattr(self, "_retryable_error_codes", None) or ()
        if code in _NOT_RETRYABLE and code not in retryable:
            self.refused = f"gRPC {name}"  # RetryInfo makes none of these retryable
            return
        if retry_info is not None:
            try:
                delay = RetryInfo.FromString(retry_info).retry_delay
                self.retry_after = max(0.0, delay.seconds + delay.nanos / 1e9)
            except Exception:  # malformed: a retry, with no time said
                pass
            self.transient = f"gRPC {name}"


def _endpoint_variable() -> str:
    """The variable the endpoint came from (the per-signal one first, as OpenTelemetry reads)."""
    for name in _ENDPOINT_VARS:
        if os.environ.get(name):
            return name
    return _ENDPOINT_VARS[0]
