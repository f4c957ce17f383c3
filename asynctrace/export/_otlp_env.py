"""The OTLP exporter variables, checked before either transport uses them.

Per signal: the trace exporter reads ``OTEL_EXPORTER_OTLP_TRACES_*``, the
goodput metric exporter ``OTEL_EXPORTER_OTLP_METRICS_*``, each before the
general ``OTEL_EXPORTER_OTLP_*``. A value that would fail every request (a
header with a line break, an endpoint without ``http://`` or ``https://``, a
gRPC endpoint with a user name, password, query string or fragment, an
endpoint with a space or line break around it (the exporters take the
variable as written), a negative timeout, one under a millisecond or one
longer than a thread can wait, a certificate file that is not there) or that one
transport would ignore with a warning (compression ``zstd``) is a
:class:`~asynctrace.ConfigurationError` naming the variable, the value (a
header's value as ``REDACTED``) and what is accepted. Headers are parsed as
OpenTelemetry parses them.

Two values the specification gives a meaning to are taken, with a message
once: a timeout of 0 (no limit; OpenTelemetry's Python exporters cannot
wait without one, so the variable is hidden from them and their default of
10 s applies) and an ``..._INSECURE`` other than ``true`` or ``false``
(false, with a warning).
"""

from __future__ import annotations

import logging
import math

from .._config_checks import MAX_WAIT_S, float_text
from ._otlp_endpoint import (
    check_certificates,
    check_endpoint_text,
    check_grpc_target,
    check_http_endpoint,
)
from ._otlp_headers import check_headers, parse_headers
from ._otlp_vars import PREFIX, once, per_signal, refuse, variable

__all__ = ["check_environment", "configured_headers"]

_DEFAULT_TIMEOUT_S = 10  # OpenTelemetry's Python exporters, both transports
# A shorter timeout is used up before the request is made (OpenTelemetry's client then
# hands ``requests`` 0, which it refuses) or leaves no time to connect: every request fails.
_MIN_TIMEOUT_S = 0.001
_COMPRESSIONS = {"http/protobuf": ("none", "gzip", "deflate"), "grpc": ("none", "gzip")}


def check_environment(protocol: str, signal: str = "TRACES") -> list[str]:
    """Check the ``OTEL_EXPORTER_OTLP_*`` variables *signal*'s exporter over *protocol*
    reads; which ones to hide from it while it is made.

    Args:
        protocol: ``http/protobuf`` or ``grpc``.
        signal: ``TRACES``, ``METRICS`` or ``LOGS``: whose per-signal
            variables (``OTEL_EXPORTER_OTLP_<SIGNAL>_*``) come first.

    Raises:
        ConfigurationError: a value every request would fail with, or one the
            exporter would not use as written. It names the variable, the
            value (a header value as ``REDACTED``, an endpoint redacted) and
            what is accepted.
    """
    grpc = protocol == "grpc"
    own = per_signal(signal)
    hidden: list[str] = []
    timeout = variable("TIMEOUT", signal)
    if timeout is not None:
        key, value = timeout
        number = float_text(value)
        seconds = math.nan if number is None else number
        if not (
            math.isfinite(seconds) and (seconds == 0 or _MIN_TIMEOUT_S <= seconds <= MAX_WAIT_S)
        ):
            problem = "is not a timeout"
            if seconds > MAX_WAIT_S:
                problem = "is longer than a thread can wait"
            elif seconds > 0:
                problem = "is too short for any request"
            raise refuse(
                key,
                value,
                problem,
                f"a number of seconds >= {_MIN_TIMEOUT_S:g} and <= {MAX_WAIT_S:.6g} (the "
                "longest wait a thread can make), such as 10 or 2.5 (OpenTelemetry's Python "
                "exporters read seconds, not milliseconds), or 0 for no limit",
            )
        if seconds == 0:  # the specification's "no limit"; requests and gRPC cannot wait so
            hidden += [f"{own}TIMEOUT", f"{PREFIX}TIMEOUT"]
            once(
                key,
                value,
                logging.INFO,
                "asynctrace: %s=%r means no limit; OpenTelemetry's Python OTLP exporters "
                "cannot wait without one, so their default of %d s per export applies",
                key,
                value,
                _DEFAULT_TIMEOUT_S,
            )
    compression = variable("COMPRESSION", signal)
    if compression is not None:
        key, value = compression
        accepted = _COMPRESSIONS[protocol]
        if value.strip().lower() not in accepted:
            raise refuse(key, value, f"is not a compression {protocol} has", ", ".join(accepted))
        if grpc and value.strip().lower() == "none":  # OpenTelemetry's gRPC exporter refuses it
            hidden += [f"{own}COMPRESSION", f"{PREFIX}COMPRESSION"]
    headers = variable("HEADERS", signal)
    if headers is not None:
        check_headers(*headers, grpc=grpc)
    check_endpoint_text(signal)
    tls = check_grpc_target(signal) if grpc else check_http_endpoint(signal)
    if tls:
        check_certificates(grpc, signal)
    return hidden


def configured_headers(signal: str = "TRACES") -> list[tuple[str, str]]:
    """The headers of *signal*'s ``..._HEADERS`` in force, as OpenTelemetry parses them."""
    headers = variable("HEADERS", signal)
    return parse_headers(headers[1]) if headers is not None else []
