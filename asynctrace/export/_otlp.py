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
logs are, the configured header values included. :func:`build_exporter` does
both for every OTLP exporter asynctrace makes: the trace exporter here, the
goodput metric exporter (``goodput.metrics: otlp``, reading
``OTEL_EXPORTER_OTLP_METRICS_*``) in :mod:`asynctrace._meter_setup`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import pkgutil
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from importlib import import_module
from typing import Any, TypeVar

from .._errors import ConfigurationError, MissingExtraError, RedactingFilter
from .._forksafe import reinit_at_fork
from .._secret_words import REDACTED
from ._otlp_env import check_environment, configured_headers
from ._otlp_vars import PREFIX as _PREFIX

__all__ = [
    "build_exporter",
    "configured_header_secrets",
    "header_secrets",
    "otlp_exporter",
    "sends_encoded",
]

_T = TypeVar("_T")

_EXTRAS = {
    "http/protobuf": ("otlp", "opentelemetry.exporter.otlp.proto.http"),
    "grpc": ("otlp-grpc", "opentelemetry.exporter.otlp.proto.grpc"),
}
_HEADERS_LOGGER = "opentelemetry.util.re"  # where OpenTelemetry warns of a malformed header
# Where OpenTelemetry's OTLP exporters log: every module of these packages, found in the
# installed ones (a logger's filters see only its own records, not its children's), and
# these named ones whether installed or not.
_EXPORTER_PACKAGES = ("opentelemetry.exporter.otlp", "opentelemetry.exporter.http")
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc",
    "opentelemetry.exporter.otlp.proto.grpc._log_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.common._internal",
    "opentelemetry.exporter.otlp.common.http",
)
# Where the HTTP client under the http/protobuf exporter logs URLs: every module of these
# packages, and these named ones whether installed or not.
_HTTP_CLIENT_PACKAGES = ("urllib3",)
_HTTP_CLIENT_LOGGERS = (
    "urllib3.connectionpool",
    "urllib3.connection",
    "urllib3.poolmanager",
    "urllib3.util.retry",
)


def otlp_exporter(protocol: str) -> Any:
    """OpenTelemetry's ``OTLPSpanExporter`` for *protocol*, configured from the environment.

    Nothing is sent and nothing connects here: the gRPC channel connects on
    the first export.

    Raises:
        MissingExtraError: the transport's package is not installed.
        ConfigurationError: a variable every request would fail with, or one
            the exporter would ignore (a header value with a line break, an
            endpoint without a scheme, a negative timeout, an unknown compression,
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
    return build_exporter(protocol, "TRACES", OTLPSpanExporter, "exporters: the otlp exporter")


def build_exporter(protocol: str, signal: str, make: Callable[[], _T], what: str) -> _T:
    """``make()``, an OpenTelemetry OTLP exporter of *signal*, once its variables are checked.

    Every OTLP exporter asynctrace makes is made here: *signal*'s variables
    (``OTEL_EXPORTER_OTLP_<SIGNAL>_*``, then the general ones) are checked
    for *protocol*; the redacting filter is installed on every OTLP exporter
    logger (and, over http/protobuf, every urllib3 logger), with *signal*'s
    configured header values added to its secrets;
    then ``make()`` runs with the variables it must not see hidden.

    Args:
        protocol: ``http/protobuf`` or ``grpc``.
        signal: ``TRACES``, ``METRICS`` or ``LOGS``.
        make: makes the exporter from the environment.
        what: the configuration key and exporter, for the error message
            (``"exporters: the otlp exporter"``).

    Raises:
        ConfigurationError: a variable is refused (:func:`check_environment`),
            or the exporter rejected its configuration.
    """
    _redact_header_warnings()
    hidden = check_environment(protocol, signal)
    _redact_exporter_logs(
        signal,
        header_secrets(value for _, value in configured_headers(signal)),
        http=protocol == "http/protobuf",
    )
    try:
        with _empty_variables_unset(hidden):
            return make()
    except Exception as exc:
        raise ConfigurationError(
            f"{what} ({protocol}) rejected its configuration ({exc}); "
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


class _RedactingFilter(RedactingFilter):
    """Redacts what OpenTelemetry's OTLP exporters log, as asynctrace redacts its own logs.

    ``requests`` quotes the request's URL (a token in its query string) and
    an invalid header's value in its errors; OpenTelemetry logs them with
    every failed batch. The message is formatted and redacted
    (:func:`~asynctrace._redact.redact_text`), with :attr:`header_values` (the
    configured header values) replaced wherever they appear; so is a
    traceback.
    """

    left_out = "opentelemetry: a log record of the OTLP exporter could not be redacted; left out"

    def __init__(self) -> None:
        super().__init__()
        self.header_values: frozenset[str] = frozenset()
        """The header values of the ``..._HEADERS`` in force, every signal's (set by
        :func:`build_exporter`)."""
        self.by_signal: dict[str, frozenset[str]] = {}

    def secrets(self, record: logging.LogRecord) -> Collection[str]:
        """The configured header values, wherever they appear."""
        return self.header_values


_EXPORTER_LOG_FILTER = _RedactingFilter()
_FILTER_LOCK = threading.Lock()
reinit_at_fork(_FILTER_LOCK)  # held at fork(): new in the child


def header_secrets(values: Iterable[str]) -> list[str]:
    """The configured header *values*, each with its credential after a scheme word too.

    A backend's message may quote the token of ``Authorization: Bearer <token>``
    without the ``Bearer``: both are replaced.

    Example:
        >>> header_secrets(["Bearer tok123456", "org-42"])
        ['Bearer tok123456', 'tok123456', 'org-42']
    """
    secrets = []
    for value in values:
        value = value.strip()
        if not value:
            continue
        secrets.append(value)
        words = value.split(None, 1)
        if len(words) == 2:  # a scheme and its credential
            secrets.append(words[1])
    return secrets


def configured_header_secrets() -> frozenset[str]:
    """Every configured OTLP header value (:func:`header_secrets`), every signal's made so far:
    what a backend's own message (a partial success) must not show."""
    return _EXPORTER_LOG_FILTER.header_values


def _redact_exporter_logs(signal: str, secrets: Iterable[str], http: bool = False) -> None:
    """Install the redacting filter on OpenTelemetry's OTLP exporter loggers, once each,
    with *secrets* (*signal*'s configured header values) among those it replaces; for
    an *http* (``http/protobuf``) exporter, on urllib3's loggers too
    (:func:`http_client_logger_names`).

    Only a filter is added: the loggers' levels, handlers and other filters
    stay as they are.
    """
    with _FILTER_LOCK:
        found = _EXPORTER_LOG_FILTER.by_signal
        found[signal] = frozenset(secrets)
        _EXPORTER_LOG_FILTER.header_values = frozenset().union(*found.values())
        names = exporter_logger_names()
        if http:
            names += http_client_logger_names()
        for name in names:
            logger = logging.getLogger(name)
            if _EXPORTER_LOG_FILTER not in logger.filters:
                logger.addFilter(_EXPORTER_LOG_FILTER)


@functools.cache
def exporter_logger_names() -> tuple[str, ...]:
    """The loggers OpenTelemetry's OTLP exporters may log on: a module's ``__name__`` each.

    Every module and package of the installed OTLP exporter packages (trace,
    metric and log exporters, http and grpc, their common modules), listed
    from the files without importing them (grpc is imported only when used),
    and the named ones in :data:`_EXPORTER_LOGGERS`.
    """
    return _module_loggers(_EXPORTER_PACKAGES, _EXPORTER_LOGGERS)


@functools.cache
def http_client_logger_names() -> tuple[str, ...]:
    """The loggers of the HTTP client under the http/protobuf exporter (``requests``).

    Every module of urllib3 (``requests`` itself logs no URL): at ``DEBUG``
    ``urllib3.connectionpool`` logs each request's path, its query string
    included, and ``urllib3.util.retry`` and ``urllib3.poolmanager`` the URL
    of a retry or a redirect.
    """
    return _module_loggers(_HTTP_CLIENT_PACKAGES, _HTTP_CLIENT_LOGGERS)


def _module_loggers(packages: Iterable[str], named: Iterable[str]) -> tuple[str, ...]:
    """The ``__name__`` of every module and package of the installed *packages*, listed
    from the files without importing them, and the *named* ones."""
    names = set(named)
    for root in packages:
        try:
            spec = importlib.util.find_spec(root)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        stack = [(list(spec.submodule_search_locations), root)]
        while stack:
            paths, package = stack.pop()
            names.add(package)
            for info in pkgutil.iter_modules(paths, f"{package}."):
                names.add(info.name)
            for path in paths:  # packages, namespace ones (no __init__.py) included
                with contextlib.suppress(OSError), os.scandir(path) as entries:
                    for entry in entries:
                        name = entry.name
                        if name.isidentifier() and not name.startswith("__") and entry.is_dir():
                            stack.append(([entry.path], f"{package}.{name}"))
    return tuple(sorted(names))
