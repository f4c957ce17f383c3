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
import os
import re
import threading
from urllib.parse import unquote, urlsplit

from .._config_checks import MAX_WAIT_S, float_text
from .._errors import ConfigurationError
from .._forksafe import reinit_at_fork
from .._redact import redact_text
from .._secret_words import REDACTED

__all__ = ["SIGNALS", "check_environment", "configured_headers"]

logger = logging.getLogger("asynctrace")

_PREFIX = "OTEL_EXPORTER_OTLP_"
SIGNALS = ("TRACES", "METRICS", "LOGS")
"""The signals of the per-signal variables (``OTEL_EXPORTER_OTLP_<SIGNAL>_*``)."""
_PATHS = {"TRACES": "/v1/traces", "METRICS": "/v1/metrics", "LOGS": "/v1/logs"}
_DEFAULT_TIMEOUT_S = 10  # OpenTelemetry's Python exporters, both transports
# A shorter timeout is used up before the request is made (OpenTelemetry's client then
# hands ``requests`` 0, which it refuses) or leaves no time to connect: every request fails.
_MIN_TIMEOUT_S = 0.001
_told: set[tuple[str, str]] = set()  # (variable, value) already logged about
_told_lock = threading.Lock()
reinit_at_fork(_told_lock)  # held at fork(): new in the child
_COMPRESSIONS = {"http/protobuf": ("none", "gzip", "deflate"), "grpc": ("none", "gzip")}
# OpenTelemetry's parsing of ..._HEADERS (opentelemetry.util.re): URL-encoded items, else
# (liberal) items taken as they are; an item matching neither is logged and left out.
_OWS = r"[ \t]*"
_KEY = r"[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+"
_ENCODED_ITEM = re.compile(
    rf"{_OWS}{_KEY}{_OWS}={_OWS}[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*{_OWS}"
)
_LIBERAL_ITEM = re.compile(
    rf"{_OWS}{_KEY}{_OWS}={_OWS}[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*{_OWS}"
)
_ITEM_SEPARATOR = re.compile(r"[ \t]*,[ \t]*")
_HTTP_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 token
_HTTP_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]*")  # no control character but tab
_GRPC_NAME = re.compile(r"[0-9a-z_.\-]+")
_GRPC_VALUE = re.compile(r"[\x20-\x7e]*")


def _per_signal(signal: str) -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_`` for ``TRACES``: the prefix of *signal*'s variables."""
    if signal not in SIGNALS:
        raise ValueError(f"signal: {signal!r}; accepted: {', '.join(SIGNALS)}")
    return f"{_PREFIX}{signal}_"


def _variable(name: str, signal: str) -> tuple[str, str] | None:
    """The variable in force for *name* (``TIMEOUT``, say) and its value, else None.

    *signal*'s own one first, then the general one, as OpenTelemetry reads
    them; one that is empty (or blank) counts as unset.
    """
    for key in (f"{_per_signal(signal)}{name}", f"{_PREFIX}{name}"):
        value = os.environ.get(key)
        if value is not None and value.strip():
            return key, value
    return None


def _refuse(key: str, value: str, problem: str, accepted: str) -> ConfigurationError:
    return ConfigurationError(
        f"{key}: {value!r} {problem}; accepted: {accepted} (an empty value counts as unset)"
    )


def _once(key: str, value: str, level: int, message: str, *args: object) -> None:
    """Log *message* the first time *key* is found set to *value* in this process."""
    with _told_lock:
        if (key, value) in _told:
            return
        _told.add((key, value))
    logger.log(level, message, *args)


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
    own = _per_signal(signal)
    hidden: list[str] = []
    timeout = _variable("TIMEOUT", signal)
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
            raise _refuse(
                key,
                value,
                problem,
                f"a number of seconds >= {_MIN_TIMEOUT_S:g} and <= {MAX_WAIT_S:.6g} (the "
                "longest wait a thread can make), such as 10 or 2.5 (OpenTelemetry's Python "
                "exporters read seconds, not milliseconds), or 0 for no limit",
            )
        if seconds == 0:  # the specification's "no limit"; requests and gRPC cannot wait so
            hidden += [f"{own}TIMEOUT", f"{_PREFIX}TIMEOUT"]
            _once(
                key,
                value,
                logging.INFO,
                "asynctrace: %s=%r means no limit; OpenTelemetry's Python OTLP exporters "
                "cannot wait without one, so their default of %d s per export applies",
                key,
                value,
                _DEFAULT_TIMEOUT_S,
            )
    compression = _variable("COMPRESSION", signal)
    if compression is not None:
        key, value = compression
        accepted = _COMPRESSIONS[protocol]
        if value.strip().lower() not in accepted:
            raise _refuse(key, value, f"is not a compression {protocol} has", ", ".join(accepted))
        if grpc and value.strip().lower() == "none":  # OpenTelemetry's gRPC exporter refuses it
            hidden += [f"{own}COMPRESSION", f"{_PREFIX}COMPRESSION"]
    headers = _variable("HEADERS", signal)
    if headers is not None:
        _check_headers(*headers, grpc=grpc)
    _check_endpoint_text(signal)
    tls = _check_grpc_target(signal) if grpc else _check_http_endpoint(signal)
    if tls:
        _check_certificates(grpc, signal)
    return hidden


def configured_headers(signal: str = "TRACES") -> list[tuple[str, str]]:
    """The headers of *signal*'s ``..._HEADERS`` in force, as OpenTelemetry parses them."""
    headers = _variable("HEADERS", signal)
    return _parse_headers(headers[1]) if headers is not None else []


def _parse_headers(text: str) -> list[tuple[str, str]]:
    """*text* parsed as OpenTelemetry's ``parse_env_headers(text, liberal=True)`` does."""
    parsed = []
    for item in _ITEM_SEPARATOR.split(text):
        item = item.strip()
        if not item:
            continue
        if _ENCODED_ITEM.fullmatch(item):
            name, _, value = item.partition("=")
            parsed.append((unquote(name).strip().lower(), unquote(value).strip()))
        elif _LIBERAL_ITEM.fullmatch(item):
            name, _, value = item.partition("=")
            parsed.append((name.strip().lower(), value.strip()))
        # anything else OpenTelemetry logs (redacted) and leaves out
    return parsed


def _check_headers(key: str, text: str, *, grpc: bool) -> None:
    """Each header of *text* must be one a request can carry: else every request would fail."""
    for name, value in _parse_headers(text):
        shown = redact_text(f"{name}={REDACTED}")
        if grpc:
            if not _GRPC_NAME.fullmatch(name) or name.endswith("-bin"):
                raise _refuse(
                    key,
                    shown,
                    "has a header name gRPC metadata cannot carry here",
                    "lower-case names of letters, digits, '-', '_' and '.', not ending in "
                    "'-bin' (binary metadata cannot be given as text)",
                )
            if not _GRPC_VALUE.fullmatch(value):
                raise _refuse(
                    key,
                    shown,
                    "has a header value gRPC metadata cannot carry (a line break, tab, other "
                    "control character or non-ASCII character, once URL-decoded)",
                    "printable ASCII values; URL-encode only what the variable's syntax needs",
                )
            continue
        if not _HTTP_NAME.fullmatch(name):
            raise _refuse(
                key,
                shown,
                "has a header name HTTP cannot carry",
                "names of letters, digits and !#$%&'*+-.^_`|~",
            )
        if not _HTTP_VALUE.fullmatch(value) or not _latin1(value):
            raise _refuse(
                key,
                shown,
                "has a header value HTTP cannot carry (a line break or other control "
                "character, or a character outside Latin-1, once URL-decoded)",
                "Latin-1 values without control characters (tab aside)",
            )


def _latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _check_endpoint_text(signal: str) -> None:
    """The endpoint variable the exporter reads must be the URL alone, with no whitespace
    after or inside it: OpenTelemetry's exporters take it as written (a trailing line
    break, as ``$(cat file)`` leaves none but ``echo`` in a file does, fails every
    request). Leading whitespace is harmless: URL parsing drops it."""
    for key in (f"{_per_signal(signal)}ENDPOINT", f"{_PREFIX}ENDPOINT"):
        value = os.environ.get(key)
        if not value:
            continue  # unset or empty: the exporter reads the next one
        url = value.lstrip()
        if not url or url != url.rstrip() or any(c.isspace() for c in url):
            raise _refuse(
                key,
                redact_text(value),
                "has whitespace after or inside the URL (a space or line break), which the "
                "exporter would keep in it",
                "the URL alone, such as http://collector:4318",
            )
        return


def _check_http_endpoint(signal: str) -> bool:
    """The http/protobuf endpoint must be an ``http://`` or ``https://`` URL; whether TLS."""
    endpoint = _variable("ENDPOINT", signal)
    key, url = endpoint if endpoint is not None else ("", f"http://localhost:4318{_PATHS[signal]}")
    try:
        parts = urlsplit(url.strip())
        scheme, host = parts.scheme.lower(), parts.hostname
        port_ok = parts.port is None or parts.port >= 0
    except ValueError:  # a port that is not a number, an unclosed '['
        scheme, host, port_ok = "", None, False
    if scheme not in ("http", "https") or not host or not port_ok:
        raise _refuse(
            key,
            redact_text(url),
            "is not an OTLP/HTTP endpoint",
            "an http:// or https:// URL with a host, such as http://collector:4318 (the "
            f"per-signal variable is the whole URL: http://collector:4318{_PATHS[signal]})",
        )
    return scheme == "https"


def _check_grpc_target(signal: str) -> bool:
    """Whether the gRPC channel uses TLS, as OpenTelemetry decides.

    An ``..._INSECURE`` other than ``true`` or ``false`` (in any case) is
    false, as the specification says of a boolean, with a warning once.
    """
    insecure = _variable("INSECURE", signal)
    if insecure is not None and insecure[1].lower() not in ("true", "false"):
        key, value = insecure
        _once(
            key,
            value,
            logging.WARNING,
            "asynctrace: %s=%r is not true or false; it counts as false, as OpenTelemetry's "
            "specification says of a boolean: the gRPC connection uses TLS, whatever the "
            "endpoint's scheme",
            key,
            value,
        )
    endpoint = _variable("ENDPOINT", signal)
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
        f"{_per_signal(signal)}HEADERS or {_PREFIX}HEADERS"
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


def _check_certificates(grpc: bool, signal: str) -> None:
    """The certificate and key files the TLS connection will read must be there."""
    if grpc:
        if any(
            os.environ.get(f"_OTEL_PYTHON_EXPORTER_OTLP_GRPC{part}CREDENTIAL_PROVIDER", "").strip()
            for part in ("_", f"_{signal}_")
        ):
            return  # credentials come from the provider: no file is read
        # OpenTelemetry's gRPC exporter reads the three of one group: the per-signal
        # ones if the per-signal certificate is set, else the general ones.
        own = _per_signal(signal)
        group = own if os.environ.get(f"{own}CERTIFICATE", "").strip() else _PREFIX
        if not os.environ.get(f"{group}CERTIFICATE", "").strip():
            return  # the system's roots
        keys = [f"{group}{name}" for name in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")]
    else:
        names = ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")
        keys = [
            found[0] for found in (_variable(name, signal) for name in names) if found is not None
        ]
    for key in keys:
        path = os.environ.get(key, "")
        if not path.strip():
            continue
        bundle = not grpc and "CLIENT" not in key  # requests takes a directory of CAs too
        usable = os.path.isfile(path) or (bundle and os.path.isdir(path))
        if not usable or not os.access(path, os.R_OK):
            raise _refuse(
                key,
                path,
                "is not a readable file",
                "the path of a PEM file that exists"
                + (", or a directory of CA certificates" if bundle else ""),
            )


# -- what OpenTelemetry's exporters log ------------------------------------------
