"""OTLP: OpenTelemetry's exporter for the chosen transport (see :mod:`asynctrace._protocol`).

The protocol is ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
``OTEL_EXPORTER_OTLP_PROTOCOL``, else the ``otlp_protocol`` configuration
key, else ``http/protobuf``. The exporters are OpenTelemetry's own
(``opentelemetry-exporter-otlp-proto-http`` and ``-grpc``); both read the
endpoint, headers, timeout, compression, certificate and client-key variables
themselves, per signal first (``OTEL_EXPORTER_OTLP_TRACES_*``) and then the
general ones (``OTEL_EXPORTER_OTLP_*``).
"""

from __future__ import annotations

from typing import Any

from .._errors import ConfigurationError, MissingExtraError

__all__ = ["exporter_timeout_s", "otlp_exporter"]

_EXTRAS = {
    "http/protobuf": ("otlp", "opentelemetry.exporter.otlp.proto.http"),
    "grpc": ("otlp-grpc", "opentelemetry.exporter.otlp.proto.grpc"),
}


def otlp_exporter(protocol: str) -> Any:
    """OpenTelemetry's ``OTLPSpanExporter`` for *protocol*, configured from the environment.

    Nothing is sent and nothing connects here: the gRPC channel connects on
    the first export.

    Raises:
        MissingExtraError: the transport's package is not installed.
        ConfigurationError: the exporter rejected a variable (a bad timeout or
            compression, say).
    """
    extra, module = _EXTRAS[protocol]
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
                OTLPSpanExporter,
            )
    except ImportError as exc:
        raise MissingExtraError(extra, module) from exc
    try:
        return OTLPSpanExporter()
    except Exception as exc:
        raise ConfigurationError(
            f"exporters: the otlp exporter ({protocol}) rejected its configuration ({exc}); "
            "check the OTEL_EXPORTER_OTLP_* environment variables"
        ) from exc


def exporter_timeout_s(exporter: Any) -> float | None:
    """The per-export timeout OpenTelemetry's exporter resolved (seconds), when it says."""
    for owner in (exporter, getattr(exporter, "_client", None)):
        value = getattr(owner, "_timeout", None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None
