"""OTLP: OpenTelemetry's exporter for the chosen transport (see :mod:`asynctrace._protocol`).

The protocol is ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
``OTEL_EXPORTER_OTLP_PROTOCOL``, else the ``otlp_protocol`` configuration
key, else ``http/protobuf``. The exporters are OpenTelemetry's own
(``opentelemetry-exporter-otlp-proto-http`` and ``-grpc``); both read the
endpoint, headers, timeout, compression, certificate and client-key variables
themselves, per signal first (``OTEL_EXPORTER_OTLP_TRACES_*``) and then the
general ones (``OTEL_EXPORTER_OTLP_*``). They are subclasses that also send
requests asynctrace encoded itself from the fast provider's spans
(:mod:`._otlp_wire`), through the same client and retries.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .._errors import ConfigurationError, MissingExtraError

__all__ = ["exporter_timeout_s", "otlp_exporter", "sends_encoded"]

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
        import_module(f"{module}.trace_exporter")  # checked even when ours is imported already
        if protocol == "grpc":
            from ._otlp_grpc import GrpcSpanExporter as OTLPSpanExporter
        else:
            from ._otlp_http import HttpSpanExporter as OTLPSpanExporter  # type: ignore[assignment]
    except ImportError as exc:
        raise MissingExtraError(extra, module) from exc
    try:
        return OTLPSpanExporter()
    except Exception as exc:
        raise ConfigurationError(
            f"exporters: the otlp exporter ({protocol}) rejected its configuration ({exc}); "
            "check the OTEL_EXPORTER_OTLP_* environment variables"
        ) from exc


def sends_encoded(exporter: Any) -> bool:
    """Whether *exporter* takes the fast provider's spans encoded by :mod:`._otlp_wire`.

    True for the exporters :func:`otlp_exporter` makes, when the installed
    OpenTelemetry exporter has the internals they send bytes through;
    otherwise spans are converted to the SDK's and encoded by OpenTelemetry.
    """
    return getattr(exporter, "sends_encoded", False) is True


def exporter_timeout_s(exporter: Any) -> float | None:
    """The per-export timeout OpenTelemetry's exporter resolved (seconds), when it says."""
    for owner in (exporter, getattr(exporter, "_client", None)):
        value = getattr(owner, "_timeout", None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None
