"""The OTLP variables as the specification reads them: empty is unset; headers are secret.

Each transport sends to a real receiver (``tests/_otlp_receiver.py``) through
``configure()``, the way a user's environment reaches OpenTelemetry's exporters.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

import asynctrace as at
from asynctrace.export._otlp import otlp_exporter

sys.path.insert(0, str(Path(__file__).parent.parent))
from _otlp_receiver import OtlpReceiver

PROTOCOLS = ["http/protobuf", "grpc"]
EMPTY = [
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_empty_variables_count_as_unset(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty timeout, compression, insecure, certificate and endpoint variables: configure()
    does not raise, the general timeout applies, an http:// endpoint needs no TLS (grpc),
    spans arrive, and the variables are left as they were."""
    with OtlpReceiver(protocol) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "7")
        for name in EMPTY:
            monkeypatch.setenv(name, "")
        telemetry = at.configure(
            {
                "enabled": True,
                "exporters": ["otlp"],
                "span_groups": "all",
                "schedule_delay_millis": 50,
            }
        )
        try:
            exporter = telemetry._pipeline.queued[0]._exporter  # type: ignore[union-attr, attr-defined]
            client = exporter if protocol == "grpc" else exporter._client
            assert client._timeout == 7
            with at.umbrella_span("step", "rl.step"):
                pass
            assert telemetry.flush(10.0)
        finally:
            telemetry.shutdown(2.0)
        assert [span.name for span in receiver.spans] == ["rl.step"]
        assert all(os.environ[name] == "" for name in EMPTY)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_malformed_header_is_logged_without_its_value(
    protocol: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenTelemetry warns of a header it cannot parse, quoting it: the value (a bearer
    token, say) is redacted, the header's name stays."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_HEADERS", 'x-team=rl,authorization=Bearer "s3cr3t-token",s3cr3t'
    )
    caplog.set_level(logging.WARNING, logger="opentelemetry.util.re")
    otlp_exporter(protocol).shutdown()
    warned = [r.getMessage() for r in caplog.records if r.name == "opentelemetry.util.re"]
    assert len(warned) == 2, warned
    assert all("s3cr3t" not in message for message in warned), warned
    assert warned[0].endswith(": authorization=REDACTED")
    assert warned[1].endswith(": REDACTED")
