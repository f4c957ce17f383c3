"""The OTLP transport, chosen as OpenTelemetry's specification says (no SDK import).

``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``,
else the ``otlp_protocol`` configuration key, else ``http/protobuf``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import ConfigurationError

__all__ = ["PROTOCOLS", "check_protocol", "otlp_protocol"]

PROTOCOLS = ("http/protobuf", "grpc")
"""The OTLP transports asynctrace exports over."""

PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def check_protocol(key: str, value: Any) -> str:
    """*value* as an accepted protocol name.

    Raises:
        ConfigurationError: naming *key*, the value and the accepted names.

    Example:
        >>> check_protocol("otlp_protocol", " GRPC ")
        'grpc'
    """
    if isinstance(value, str) and value.strip().lower() in PROTOCOLS:
        return value.strip().lower()
    note = " (OpenTelemetry's Python exporters have no http/json)" if value == "http/json" else ""
    raise ConfigurationError(
        f"{key}: {value!r} is not accepted{note}; accepted: {', '.join(PROTOCOLS)}"
    )


def otlp_protocol(configured: str | None, environ: Mapping[str, str]) -> str:
    """The OTLP transport: the standard variables, then *configured*, then ``http/protobuf``.

    Raises:
        ConfigurationError: the deciding value is not a protocol asynctrace has.

    Example:
        >>> otlp_protocol("grpc", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
        'http/protobuf'
        >>> otlp_protocol(None, {})
        'http/protobuf'
    """
    for var in PROTOCOL_VARS:
        raw = environ.get(var, "").strip()
        if raw:
            return check_protocol(var, raw)
    if configured:
        return check_protocol("otlp_protocol", configured)
    return "http/protobuf"
