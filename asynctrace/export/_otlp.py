"""OTLP: OpenTelemetry's exporter for the chosen transport (see :mod:`asynctrace._protocol`).

The protocol is ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
``OTEL_EXPORTER_OTLP_PROTOCOL``, else the ``otlp_protocol`` configuration
key, else ``http/protobuf``. The exporters are OpenTelemetry's own
(``opentelemetry-exporter-otlp-proto-http`` and ``-grpc``); both read the
endpoint, headers, timeout, compression, certificate and client-key variables
themselves, per signal first (``OTEL_EXPORTER_OTLP_TRACES_*``) and then the
general ones (``OTEL_EXPORTER_OTLP_*``). A variable set to the empty string
counts as unset, as OpenTelemetry's specification says. They are subclasses
that also send requests asynctrace encoded itself from the fast provider's
spans (:mod:`._otlp_wire`), through the same client and retries.

The variables are checked first (:mod:`._otlp_env`), as both transports
would use them. What OpenTelemetry's exporters log is redacted as asynctrace's own
logs are, the configured header values included.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from importlib import import_module
from typing import Any

from .._errors import ConfigurationError, MissingExtraError
from .._redact import REDACTED, redact_text
from ._otlp_env import check_environment, configured_headers

__all__ = ["otlp_exporter", "sends_encoded"]

_EXTRAS = {
    "http/protobuf": ("otlp", "opentelemetry.exporter.otlp.proto.http"),
    "grpc": ("otlp-grpc", "opentelemetry.exporter.otlp.proto.grpc"),
}
_PREFIX = "OTEL_EXPORTER_OTLP_"
_TRACES = "OTEL_EXPORTER_OTLP_TRACES_"
_HEADERS_LOGGER = "opentelemetry.util.re"  # where OpenTelemetry warns of a malformed header
# Where OpenTelemetry's OTLP exporters log (a logger's filters see only its own records).
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc",
    "opentelemetry.exporter.otlp.common.http",
)


def otlp_exporter(protocol: str) -> Any:
    """OpenTelemetry's ``OTLPSpanExporter`` for *protocol*, configured from the environment.

    Nothing is sent and nothing connects here: the gRPC channel connects on
    the first export.

    Raises:
        MissingExtraError: the transport's package is not installed.
        ConfigurationError: a variable every request would fail with, or one
            the exporter would ignore (a header value with a line break, an
            endpoint without a scheme, a timeout of 0, an unknown compression,
            a missing certificate file): the same on both transports; or the
            exporter rejected its configuration.
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
    _redact_header_warnings()
    hidden = check_environment(protocol)
    _EXPORTER_LOG_FILTER.secrets = frozenset(v for _, v in configured_headers() if v)
    _redact_exporter_logs()
    try:
        with _empty_variables_unset(hidden):
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


@contextlib.contextmanager
def _empty_variables_unset(also: Iterable[str] = ()) -> Iterator[None]:
    """Hide the empty ``OTEL_EXPORTER_OTLP_*`` variables, and *also*, from the exporter.

    Arguments cannot stand in for them: OpenTelemetry's gRPC exporter converts
    ``..._TRACES_TIMEOUT`` with ``float()`` and looks ``..._COMPRESSION`` up
    whatever it is given, and reads an empty ``..._INSECURE`` as ``false``
    (TLS to an ``http://`` endpoint). Only when one is empty, only for the
    construction; each is put back unless something set it meanwhile.
    """
    empty = [
        key for key, value in os.environ.items() if key.startswith(_PREFIX) and not value.strip()
    ]
    empty.extend(also)
    saved = {key: os.environ.pop(key) for key in empty if key in os.environ}
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.setdefault(key, value)


class _HeaderValueFilter(logging.Filter):
    """Redacts the value in OpenTelemetry's warning about a malformed OTLP header.

    That warning quotes the whole ``key=value`` item of
    ``OTEL_EXPORTER_OTLP_[TRACES_]HEADERS``, a bearer token included; the
    key stays, to say which header is malformed.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(a) if isinstance(a, str) else a for a in record.args)
        return True


def _redacted(header: str) -> str:
    key, equals, _ = header.partition("=")
    return f"{key.strip()}={REDACTED}" if equals else REDACTED


def _redact_header_warnings() -> None:
    """Install :class:`_HeaderValueFilter` on OpenTelemetry's logger, once."""
    logger = logging.getLogger(_HEADERS_LOGGER)
    if not any(isinstance(item, _HeaderValueFilter) for item in logger.filters):
        logger.addFilter(_HeaderValueFilter())


# -- the variables, checked before the exporter reads them ---------------------


class _RedactingFilter(logging.Filter):
    """Redacts what OpenTelemetry's OTLP exporters log, as asynctrace redacts its own logs.

    ``requests`` quotes the request's URL (a token in its query string) and
    an invalid header's value in its errors; OpenTelemetry logs them with
    every failed batch. The message is formatted and redacted
    (:func:`~asynctrace._redact.redact_text`), with :attr:`secrets` (the
    configured header values) replaced wherever they appear; so is a
    traceback.
    """

    def __init__(self) -> None:
        super().__init__()
        self.secrets: frozenset[str] = frozenset()
        """The header values of the ``..._HEADERS`` in force (set by :func:`otlp_exporter`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self.secrets
        try:
            record.msg = redact_text(record.getMessage(), secrets)
            record.args = None
            if record.exc_info:  # formatters print exc_text once set, not the traceback
                text = record.exc_text or logging.Formatter().formatException(record.exc_info)
                record.exc_text = redact_text(text, secrets)
        except Exception:  # a record that cannot be examined is kept out whole
            record.msg, record.args, record.exc_info, record.exc_text = (
                "opentelemetry: a log record of the OTLP exporter could not be redacted; left out",
                None,
                None,
                None,
            )
        return True


_EXPORTER_LOG_FILTER = _RedactingFilter()


def _redact_exporter_logs() -> None:
    """Install the redacting filter on OpenTelemetry's OTLP exporter loggers, once each."""
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if _EXPORTER_LOG_FILTER not in logger.filters:
            logger.addFilter(_EXPORTER_LOG_FILTER)
