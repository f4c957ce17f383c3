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
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from importlib import import_module
from typing import Any

from .._errors import ConfigurationError, MissingExtraError
from .._redact import REDACTED

__all__ = ["otlp_exporter", "sends_encoded"]

_EXTRAS = {
    "http/protobuf": ("otlp", "opentelemetry.exporter.otlp.proto.http"),
    "grpc": ("otlp-grpc", "opentelemetry.exporter.otlp.proto.grpc"),
}
_PREFIX = "OTEL_EXPORTER_OTLP_"
_HEADERS_LOGGER = "opentelemetry.util.re"  # where OpenTelemetry warns of a malformed header


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
    _redact_header_warnings()
    try:
        with _empty_variables_unset():
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
def _empty_variables_unset() -> Iterator[None]:
    """Hide the empty ``OTEL_EXPORTER_OTLP_*`` variables while the exporter reads them.

    Arguments cannot stand in for them: OpenTelemetry's gRPC exporter converts
    ``..._TRACES_TIMEOUT`` with ``float()`` and looks ``..._COMPRESSION`` up
    whatever it is given, and reads an empty ``..._INSECURE`` as ``false``
    (TLS to an ``http://`` endpoint). Only when one is empty, only for the
    construction; each is put back unless something set it meanwhile.
    """
    empty = [
        key for key, value in os.environ.items() if key.startswith(_PREFIX) and not value.strip()
    ]
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
