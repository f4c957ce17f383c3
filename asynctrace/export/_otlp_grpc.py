"""OpenTelemetry's OTLP/gRPC exporter, which also sends requests encoded by asynctrace.

:class:`GrpcSpanExporter` is OpenTelemetry's ``OTLPSpanExporter``
(``opentelemetry-exporter-otlp-proto-grpc``), configured by the same
arguments and ``OTEL_EXPORTER_OTLP_*`` variables. Its stub's ``Export``
method takes a request message or bytes already encoded (the serializer
passes bytes through), so given :class:`~._otlp_wire.EncodedSpan` items the
exporter's own retry loop, channel, reconnection, headers, timeout and
compression send them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from ._otlp_wire import EncodedSpan, request_bytes

__all__ = ["GrpcSpanExporter"]

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# What the base exporter must have for encoded requests to go through its retry loop.
_HOOKS = ("_export", "_translate_data", "_initialize_channel_and_stub")


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
    """The trace service's ``Export``, taking messages or encoded bytes."""

    def __init__(self, channel: Any) -> None:
        deserialize = ExportTraceServiceResponse.FromString
        try:
            self.Export = channel.unary_unary(
                _EXPORT,
                request_serializer=_serialize,
                response_deserializer=deserialize,
                _registered_method=True,
            )
        except TypeError:  # a grpcio without registered methods
            self.Export = channel.unary_unary(
                _EXPORT, request_serializer=_serialize, response_deserializer=deserialize
            )


class GrpcSpanExporter(OTLPSpanExporter):
    """``OTLPSpanExporter`` over gRPC that also takes encoded spans.

    Example:
        >>> exporter = GrpcSpanExporter(endpoint="http://127.0.0.1:4317")
        >>> exporter.sends_encoded
        True
        >>> exporter.shutdown()
    """

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
        self._client = _Stub(self._channel)  # type: ignore[assignment]

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
        if not spans or spans[0].__class__ is not EncodedSpan:
            return super().export(spans)
        return self._export(_Encoded(request_bytes(spans), len(spans)))  # type: ignore[arg-type]
