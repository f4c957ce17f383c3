"""The OTLP endpoint variables: the URL as written, the transport's TLS and its files.

An endpoint with a space or line break around it (the exporters take the
variable as written), an http/protobuf endpoint without ``http://`` or
``https://``, a gRPC endpoint with a user name, password, query string or
fragment, or a certificate file that is not there would fail every request:
each is refused naming the variable and the value (redacted). An
``..._INSECURE`` other than ``true`` or ``false`` is taken as false, with a
warning once.
"""

from __future__ import annotations

import logging
import os
from urllib.parse import urlsplit

from .._errors import ConfigurationError
from .._redact import redact_text
from .._secret_words import REDACTED
from ._otlp_vars import PREFIX, once, per_signal, refuse, variable

__all__ = [
    "check_certificates",
    "check_endpoint_text",
    "check_grpc_target",
    "check_http_endpoint",
]

_PATHS = {"TRACES": "/v1/traces", "METRICS": "/v1/metrics", "LOGS": "/v1/logs"}


def check_endpoint_text(signal: str) -> None:
    """The endpoint variable the exporter reads must be the URL alone, with no whitespace
    after or inside it: OpenTelemetry's exporters take it as written (a trailing line
    break, as ``$(cat file)`` leaves none but ``echo`` in a file does, fails every
    request). Leading whitespace is harmless: URL parsing drops it."""
    for key in (f"{per_signal(signal)}ENDPOINT", f"{PREFIX}ENDPOINT"):
        value = os.environ.get(key)
        if not value:
            continue  # unset or empty: the exporter reads the next one
        url = value.lstrip()
        if not url or url != url.rstrip() or any(c.isspace() for c in url):
            raise refuse(
                key,
                redact_text(value),
                "has whitespace after or inside the URL (a space or line break), which the "
                "exporter would keep in it",
                "the URL alone, such as http://collector:4318",
            )
        return


def check_http_endpoint(signal: str) -> bool:
    """The http/protobuf endpoint must be an ``http://`` or ``https://`` URL; whether TLS."""
    endpoint = variable("ENDPOINT", signal)
    key, url = endpoint if endpoint is not None else ("", f"http://localhost:4318{_PATHS[signal]}")
    try:
        parts = urlsplit(url.strip())
        scheme, host = parts.scheme.lower(), parts.hostname
        port_ok = parts.port is None or parts.port >= 0
    except ValueError:  # a port that is not a number, an unclosed '['
        scheme, host, port_ok = "", None, False
    if scheme not in ("http", "https") or not host or not port_ok:
        raise refuse(
            key,
            redact_text(url),
            "is not an OTLP/HTTP endpoint",
            "an http:// or https:// URL with a host, such as http://collector:4318 (the "
            f"per-signal variable is the whole URL: http://collector:4318{_PATHS[signal]})",
        )
    return scheme == "https"


def check_grpc_target(signal: str) -> bool:
    """Whether the gRPC channel uses TLS, as OpenTelemetry decides.

    An ``..._INSECURE`` other than ``true`` or ``false`` (in any case) is
    false, as the specification says of a boolean, with a warning once.
    """
    insecure = variable("INSECURE", signal)
    if insecure is not None and insecure[1].lower() not in ("true", "false"):
        key, value = insecure
        once(
            key,
            value,
            logging.WARNING,
            "asynctrace: %s=%r is not true or false; it counts as false, as OpenTelemetry's "
            "specification says of a boolean: the gRPC connection uses TLS, whatever the "
            "endpoint's scheme",
            key,
            value,
        )
    endpoint = variable("ENDPOINT", signal)
    if endpoint is not None:
        _check_grpc_endpoint(signal, *endpoint)
    try:
        scheme = urlsplit(endpoint[1]).scheme.lower() if endpoint is not None else "http"
    except ValueError:  # an unclosed '[': OpenTelemetry's exporter refuses it when made
        return False
    if scheme == "https":
        return True
    if insecure is not None:
        return insecure[1].lower() != "true"
    return scheme != "http"


def _check_grpc_endpoint(signal: str, key: str, value: str) -> None:
    """A gRPC endpoint must not carry a user name, password, query string or fragment.

    gRPC cannot send them (the channel fails to resolve such a target, or
    OpenTelemetry's exporter drops the query), and OpenTelemetry's exporter
    logs its endpoint with every failed export: every signal's exporter is
    refused here, before it is made, with the secret shown as ``REDACTED``.
    """
    accepted = (
        "host:port or http(s)://host:port, with credentials in "
        f"{per_signal(signal)}HEADERS or {PREFIX}HEADERS"
    )
    if "?" in value or "#" in value:
        cut = min(i for i in (value.find("?"), value.find("#")) if i >= 0)
        shown = f"{redact_text(value[:cut])}{value[cut]}{REDACTED}"
        raise ConfigurationError(
            f"{key}: the endpoint {shown!r} has a query string or fragment, which OTLP/gRPC "
            f"cannot send; accepted: {accepted}"
        )
    try:
        netloc = urlsplit(value).netloc
    except ValueError:  # an unclosed '[': OpenTelemetry's exporter refuses it when made
        netloc = ""
    target = netloc or value  # the channel's target, as OpenTelemetry's exporter takes it
    if "@" in target:
        raise ConfigurationError(
            f"{key}: the endpoint '{REDACTED}@{target.rpartition('@')[2]}' has a user name or "
            f"password, which OTLP/gRPC cannot send; accepted: {accepted}"
        )


def check_certificates(grpc: bool, signal: str) -> None:
    """The certificate and key files the TLS connection will read must be there."""
    if grpc:
        if any(
            os.environ.get(f"_OTEL_PYTHON_EXPORTER_OTLP_GRPC{part}CREDENTIAL_PROVIDER", "").strip()
            for part in ("_", f"_{signal}_")
        ):
            return  # credentials come from the provider: no file is read
        # OpenTelemetry's gRPC exporter reads the three of one group: the per-signal
        # ones if the per-signal certificate is set, else the general ones.
        own = per_signal(signal)
        group = own if os.environ.get(f"{own}CERTIFICATE", "").strip() else PREFIX
        if not os.environ.get(f"{group}CERTIFICATE", "").strip():
            return  # the system's roots
        keys = [f"{group}{name}" for name in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")]
    else:
        names = ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")
        keys = [
            found[0] for found in (variable(name, signal) for name in names) if found is not None
        ]
    for key in keys:
        path = os.environ.get(key, "")
        if not path.strip():
            continue
        bundle = not grpc and "CLIENT" not in key  # requests takes a directory of CAs too
        usable = os.path.isfile(path) or (bundle and os.path.isdir(path))
        if not usable or not os.access(path, os.R_OK):
            raise refuse(
                key,
                path,
                "is not a readable file",
                "the path of a PEM file that exists"
                + (", or a directory of CA certificates" if bundle else ""),
            )
