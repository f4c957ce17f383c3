"""The gRPC exporter sends encoded requests only through a stub of its own, else SDK spans.

OpenTelemetry's gRPC exporter before its reconnection hook (1.30, say, which
``pyproject.toml`` still allows) builds its stock ``TraceServiceStub`` in
``__init__``; given asynctrace's encoded bytes, that stub fails to serialize
every request. The exporter must see this and take SDK spans instead, which
reach a real OTLP/gRPC receiver (``tests/_otlp_receiver.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.resources import Resource

from asynctrace._fast import FastTracerProvider
from asynctrace.export._convert import Converter
from asynctrace.export._otlp import sends_encoded
from asynctrace.export._otlp_grpc import GrpcSpanExporter
from asynctrace.export._otlp_wire import WireEncoder
from asynctrace.export._retry import RetryingSpanProcessor

sys.path.insert(0, str(Path(__file__).parent.parent))
from _otlp_receiver import OtlpReceiver


class _StubBuiltInInit(OTLPSpanExporter):
    """OpenTelemetry's exporter as 1.30 made it: ``__init__`` sets the stock stub itself."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client = TraceServiceStub(self._channel)  # type: ignore[no-untyped-call]


class _OursOnThatBase(GrpcSpanExporter, _StubBuiltInInit):
    """asynctrace's exporter over such a base: its own hooks are defined, never used."""


def _deliver(exporter: Any, receiver: OtlpReceiver) -> list[str]:
    """Record three spans through a retrying processor choosing as the pipeline chooses."""
    resource = Resource.create({"service.name": "grpc"})
    provider = FastTracerProvider(resource)
    encode = WireEncoder(provider.resource, provider.limits).encode
    readable = Converter(provider.resource, provider.limits).readable
    convert = encode if sends_encoded(exporter) else readable
    processor = RetryingSpanProcessor(exporter, name="otlp", convert=convert)
    provider.add_queue(processor)
    names = ["a", "b", "c"]
    for name in names:
        provider.get_tracer("grpc").start_span(name).end()
    try:
        assert processor.force_flush(10_000)
        stats = processor.stats()
        assert (stats.exported, stats.failed, stats.buffered) == (3, 0, 0)
    finally:
        processor.shutdown_within(2.0)
    return sorted(span.name for span in receiver.spans)


def test_encoded_requests_go_through_our_stub() -> None:
    """With the installed OpenTelemetry, the exporter's client is its own stub: bytes go."""
    with OtlpReceiver("grpc") as receiver:
        exporter = GrpcSpanExporter(endpoint=receiver.endpoint, insecure=True)
        assert sends_encoded(exporter)
        assert _deliver(exporter, receiver) == ["a", "b", "c"]


def test_a_base_that_builds_its_stock_stub_gets_sdk_spans() -> None:
    """The hooks are looked for past this class, and the client built is checked: over a
    base whose stock stub would get the encoded bytes, spans are converted to the SDK's,
    and arrive."""
    with OtlpReceiver("grpc") as receiver:
        exporter = _OursOnThatBase(endpoint=receiver.endpoint, insecure=True)
        assert isinstance(exporter._client, TraceServiceStub)
        assert not sends_encoded(exporter)
        assert _deliver(exporter, receiver) == ["a", "b", "c"]


def test_the_hooks_are_looked_for_past_this_class() -> None:
    """A base without the reconnection hook (1.30 has none): not sending encoded, though
    this class defines the hook itself and its client is its own stub.

    Such a base cannot be built on the installed OpenTelemetry (its ``__init__``
    calls the hook), so the instance is made bare, with only the client set.
    """
    import grpc

    from asynctrace.export._otlp_grpc import _Stub

    class _HookHidden(OTLPSpanExporter):
        _initialize_channel_and_stub = None  # type: ignore[assignment]

    class _Ours(GrpcSpanExporter, _HookHidden):
        pass

    channel = grpc.insecure_channel("127.0.0.1:9")
    try:
        exporter = object.__new__(_Ours)
        exporter._client = _Stub(channel)  # type: ignore[assignment]
        assert not exporter.sends_encoded
        whole = object.__new__(GrpcSpanExporter)
        whole._client = _Stub(channel)  # type: ignore[assignment]
        assert whole.sends_encoded
    finally:
        channel.close()
