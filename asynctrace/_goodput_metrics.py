"""Goodput as OpenTelemetry metrics, and the ``MeterProvider`` asynctrace can set up.

Instruments (meter ``asynctrace``), recorded once per finished step:

=====================  =========  ====  =================================================
name                   kind       unit  attributes
=====================  =========  ====  =================================================
``rl.goodput``         gauge      1     none: productive / wall of the last step
``rl.bucket.duration`` counter    s     ``rl.bucket``: productive, overhead, idle,
                                        wasted, unattributed (never negative)
``rl.step.duration``   histogram  s     none: the step's wall time
``<leaf span name>``   histogram  s     none: that leaf's seconds in the step
=====================  =========  ====  =================================================

A leaf's histogram carries the span's name (``rl.policy_update``), so a span
and the metric measuring it have one name. Names one reader would take for
the same series (see :func:`metric_key`: case, ``. _ / -``, a ``_seconds``
ending, past 255 characters) share one histogram; a name meeting a built-in
instrument's gets ``span.`` before it. At most 256 such histograms are made,
values of names past them are counted. ``rl.iteration`` is never an attribute: it grows
without bound, and each value would be a time series of its own.

The gauge and the counter are observable instruments: a step adds its
seconds to running totals (a few float additions on the export thread), and
the SDK reads the totals and the last goodput only when a reader collects
(an export interval, a Prometheus scrape). A synchronous gauge and counter
would run the SDK's measurement path (attribute hashing, locks, exemplar
filters) up to six times a step. What a reader sees is the same: the
cumulative sums of the same additions, and the last step's goodput.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import re
import socket
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ._errors import ConfigurationError, MissingExtraError, report_internal_error
from ._goodput import StepGoodput
from ._goodput_settings import GoodputSettings
from ._own_threads import leaving_signals
from ._rollup import BUCKETS

__all__ = [
    "MAX_SPAN_INSTRUMENTS",
    "GoodputMetrics",
    "MeterSetup",
    "listen_error",
    "meter_provider_for",
    "metric_key",
    "prometheus_port",
    "serving",
    "span_metric_name",
]

logger = logging.getLogger("asynctrace")

MAX_SPAN_INSTRUMENTS: Final = 256
SECONDS_BOUNDARIES: Final = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)
_INVALID = re.compile(r"[^A-Za-z0-9_./\-]")
_PROMETHEUS_RUN = re.compile(r"[^A-Za-z0-9:]+")  # what the Prometheus exporter makes one "_"
RESERVED_PREFIX: Final = "span."
# The built-in instruments' names, as metric_key() gives them.
_BUILT_IN: Final = frozenset({"rl_goodput", "rl_bucket_duration", "rl_step_duration"})
_NAME_CACHE: Final = 4096  # leaf names remembered with their histogram
SCRAPE_IDLE_S: Final = 5.0  # a scrape connection idle this long is closed (it holds a thread)


def span_metric_name(name: str) -> str:
    """The instrument name of a leaf span's histogram: the span's own name, when valid.

    OpenTelemetry instrument names are ASCII letters, digits and ``_ . / -``,
    start with a letter and have at most 255 characters; other characters
    become ``_``, and a name not starting with a letter gets ``span.`` before it.
    A name that would meet a built-in instrument (``rl.step.duration``,
    ``rl.goodput``, ``rl.bucket.duration``, in any case or spelling that
    :func:`metric_key` takes for the same) gets ``span.`` before it too.

    Example:
        >>> span_metric_name("rl.policy_update"), span_metric_name("2 phase")
        ('rl.policy_update', 'span.2_phase')
        >>> span_metric_name("rl.step.duration")
        'span.rl.step.duration'
    """
    clean = _INVALID.sub("_", name)
    if not clean[:1].isascii() or not clean[:1].isalpha():
        clean = RESERVED_PREFIX + clean
    clean = clean[:255]
    if metric_key(clean) in _BUILT_IN:
        clean = (RESERVED_PREFIX + clean)[:255]
    return clean


def metric_key(instrument_name: str) -> str:
    """The series an instrument of this name (unit ``s``) ends in, for every reader.

    OpenTelemetry takes instrument names without case; the Prometheus
    exporter makes each run of characters other than letters, digits and
    ``:`` one ``_``, and adds ``_seconds`` unless the name ends with it.
    Leaf names of one key share one histogram, so no reader sees a family
    twice.

    Example:
        >>> metric_key("RL.Phase"), metric_key("rl-phase_seconds")
        ('rl_phase', 'rl_phase')
    """
    key = _PROMETHEUS_RUN.sub("_", instrument_name).lower()
    return key[: -len("_seconds")] if key.endswith("_seconds") else key


class _Shared:
    """The observable instruments of one meter provider, reading its latest GoodputMetrics."""

    __slots__ = ("__weakref__", "counter", "gauge", "metrics")

    def __init__(self, metrics: GoodputMetrics) -> None:
        self.metrics = metrics
        self.gauge: Any = None
        self.counter: Any = None

    def observe_goodput(self, options: Any) -> list[Any]:
        return self.metrics._observe_goodput(options)

    def observe_buckets(self, options: Any) -> list[Any]:
        return self.metrics._observe_buckets(options)


# meter provider -> its observable instruments (gone with the provider)
_SHARED: weakref.WeakKeyDictionary[Any, _Shared] = weakref.WeakKeyDictionary()


def _proxy() -> Any:
    """The OpenTelemetry API's global proxy provider (``None`` if this API has none)."""
    try:
        from opentelemetry.metrics import _internal

        return _internal._PROXY_METER_PROVIDER
    except (ImportError, AttributeError):  # pragma: no cover - another API layout
        return None


def _shared_of(meter_provider: Any) -> _Shared | None:
    """The instruments already made on *meter_provider*, else ``None``.

    Instruments made on the API's global proxy before the program set its
    provider live on that provider once it is set (the proxy hands their
    callbacks over): the provider itself, given later (``global`` read
    again), finds them.
    """
    try:
        shared = _SHARED.get(meter_provider)
        if shared is not None:
            return shared
        proxy = _proxy()
        if proxy is None or proxy is meter_provider:
            return None
        if getattr(proxy, "_real_meter_provider", None) is not meter_provider:
            return None
        shared = _SHARED.get(proxy)
    except TypeError:  # a provider that cannot be weakly referenced
        return None
    if shared is not None:
        _keep(meter_provider, shared)
    return shared


def _keep(meter_provider: Any, shared: _Shared) -> None:
    try:
        _SHARED[meter_provider] = shared
    except TypeError:  # a provider that cannot be weakly referenced
        pass


class GoodputMetrics:
    """The instruments, made once; :meth:`record` adds one step (export thread)."""

    def __init__(self, meter_provider: Any) -> None:
        from . import __version__

        meter = meter_provider.get_meter("asynctrace", __version__)
        self._meter = meter
        self._goodput: float | None = None  # the last step's that had one
        # bucket -> seconds of every finished step (a bucket is reported once it has some)
        self._totals = dict.fromkeys((*BUCKETS, "unattributed"), 0.0)
        self._fields = tuple((bucket, f"{bucket}_s") for bucket in self._totals)
        # A meter provider keeps an observable instrument's first callbacks: made again
        # (a configure() again on the program's provider), it would read the first
        # telemetry's numbers for ever. So the instruments are made once per provider
        # and read the latest GoodputMetrics on it, whose totals go on from the last.
        shared = _shared_of(meter_provider)
        if shared is None:
            shared = _Shared(self)
            shared.gauge = meter.create_observable_gauge(
                "rl.goodput",
                callbacks=[shared.observe_goodput],
                unit="1",
                description="productive seconds / wall seconds of a step",
            )
            shared.counter = meter.create_observable_counter(
                "rl.bucket.duration",
                callbacks=[shared.observe_buckets],
                unit="s",
                description="seconds of finished steps by goodput bucket (rl.bucket)",
            )
            _keep(meter_provider, shared)
        else:
            self._totals = shared.metrics._totals  # a counter never goes back
            self._goodput = shared.metrics._goodput
            shared.metrics = self
        self.goodput = shared.gauge
        self.buckets = shared.counter
        self.step = meter.create_histogram(
            "rl.step.duration",
            unit="s",
            description="wall time of a training step",
            explicit_bucket_boundaries_advisory=SECONDS_BOUNDARIES,
        )
        self._bucket_attrs = {b: {"rl.bucket": b} for b in (*BUCKETS, "unattributed")}
        self._spans: dict[str, Any] = {}  # leaf name -> its histogram (up to _NAME_CACHE)
        self._families: dict[str, Any] = {}  # metric_key -> the histogram of those names
        self.untracked = 0  # leaf values not recorded: their name came past the limit
        self._walls: list[float] = []  # queued values of the step histogram
        self._leaf: list[Any] = []  # queued leaf values: name, seconds, name, seconds, ...

    def record(self, record: StepGoodput) -> None:
        """Record one finished step."""
        self.queue(record)
        self.commit()

    def queue(self, record: StepGoodput) -> None:
        """Count one finished step; its histogram values wait for :meth:`commit`.

        The observable instruments read the counts when a reader collects.
        The sink commits once per batch: the histograms' records in a row keep
        the metrics SDK's code and data in the cache (with 10 spans a step,
        metrics added 27-33 µs to a step recorded as it finished, 20-24 µs
        recorded a batch at a time). Only numbers and names wait, no record:
        an object that lives through a batch is work for the garbage
        collector.
        """
        if record.goodput is not None:
            self._goodput = record.goodput
        totals = self._totals
        for bucket, field in self._fields:
            seconds = getattr(record, field)
            if seconds > 0:
                totals[bucket] += seconds
        self._walls.append(record.wall_s)
        leaf = self._leaf
        for name, seconds in record.spans.items():
            leaf.append(name)
            leaf.append(seconds)

    def commit(self) -> None:
        """Record the queued histogram values (the thread that queues them).

        A value that cannot be recorded is reported once and skipped; the
        batch's other values are still recorded.
        """
        walls, self._walls = self._walls, []
        leaf, self._leaf = self._leaf, []
        record = self.step.record
        for seconds in walls:
            try:
                record(seconds)
            except Exception as exc:
                report_internal_error(("goodput metrics", "rl.step.duration"), exc)
        spans = self._spans
        for i in range(0, len(leaf), 2):
            name = leaf[i]
            try:
                histogram = spans.get(name)
                if histogram is None:
                    histogram = self._span_histogram(name)
                    if histogram is None:
                        continue
                histogram.record(leaf[i + 1])
            except Exception as exc:
                report_internal_error(("goodput metrics", "span histogram"), exc)

    def _observe_goodput(self, _options: Any) -> list[Any]:
        """The gauge's reading (on the reader's thread): the last step's goodput."""
        from opentelemetry.metrics import Observation

        goodput = self._goodput
        return [] if goodput is None else [Observation(goodput)]

    def _observe_buckets(self, _options: Any) -> list[Any]:
        """The counter's reading (on the reader's thread): each bucket's total so far."""
        from opentelemetry.metrics import Observation

        attrs = self._bucket_attrs
        return [
            Observation(seconds, attrs[bucket])
            for bucket, seconds in list(self._totals.items())
            if seconds > 0
        ]

    def _span_histogram(self, name: str) -> Any:
        """The histogram of leaf *name*: shared by the names of its :func:`metric_key`."""
        instrument = span_metric_name(name)
        key = metric_key(instrument)
        histogram = self._families.get(key)
        if histogram is None:
            if len(self._families) >= MAX_SPAN_INSTRUMENTS:
                self.untracked += 1
                if self.untracked == 1:
                    logger.warning(
                        "asynctrace: more than %d leaf span names; %r and later new names get "
                        "no duration histogram",
                        MAX_SPAN_INSTRUMENTS,
                        name,
                    )
                return None
            histogram = self._families[key] = self._meter.create_histogram(
                instrument,
                unit="s",
                description=f"seconds of {instrument} spans in a step",
                explicit_bucket_boundaries_advisory=SECONDS_BOUNDARIES,
            )
        if len(self._spans) < _NAME_CACHE:
            self._spans[name] = histogram
        return histogram


def _nothing(_timeout_s: float) -> None:
    return None


@dataclass
class MeterSetup:
    """The meter provider goodput records to (``None``: no metrics), and its shutdown."""

    provider: Any
    shutdown: Callable[[float], None] = _nothing
    address: tuple[str, int] | None = None  # the Prometheus endpoint's


def meter_provider_for(
    settings: GoodputSettings,
    resource_attributes: Any,
    local_rank: int | None,
    otlp_protocol: str,
) -> MeterSetup:
    """The meter provider of ``goodput.metrics`` and how to shut it down (``None``: no metrics).

    ``global`` takes OpenTelemetry's global provider (the program's, or the
    API's no-op one), which asynctrace never shuts down. ``otlp``,
    ``console`` and ``prometheus`` make an SDK ``MeterProvider`` of
    asynctrace's own, with the run's resource. Everything is imported and
    constructed here, before anything starts, except the Prometheus
    endpoint's server, which is started here too: a port already in use is a
    configuration error.

    Raises:
        MissingExtraError: the exporter's extra is missing.
        ConfigurationError: the Prometheus host or port cannot be listened on.
    """
    choice = settings.metrics
    if choice == "none":
        return MeterSetup(None)
    if choice == "global":
        from opentelemetry import metrics

        return MeterSetup(metrics.get_meter_provider())
    if not isinstance(choice, str):
        return MeterSetup(choice)  # the program's own MeterProvider: it shuts it down
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
    except ImportError as exc:
        raise MissingExtraError("sdk", "opentelemetry.sdk") from exc
    interval_ms = settings.export_interval_s * 1000.0
    resource = Resource.create(dict(resource_attributes))
    if choice == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        reader: Any = PeriodicExportingMetricReader(
            _this_process_only(ConsoleMetricExporter(out=sys.stdout)),
            export_interval_millis=interval_ms,
        )
    elif choice == "otlp":
        reader = PeriodicExportingMetricReader(
            _this_process_only(_otlp_metric_exporter(otlp_protocol)),
            export_interval_millis=interval_ms,
        )
    else:
        return _prometheus(settings, resource, local_rank)
    provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)

    def shutdown(timeout_s: float) -> None:
        provider.shutdown(timeout_millis=max(0.0, timeout_s) * 1000.0)

    return MeterSetup(provider, shutdown)


def prometheus_port(settings: GoodputSettings, local_rank: int | None) -> int:
    """The port the Prometheus endpoint listens on: ``prometheus_port + LOCAL_RANK``.

    Raises:
        ConfigurationError: the sum is past 65535.

    Example:
        >>> prometheus_port(GoodputSettings(prometheus_port=9464), 2)
        9466
    """
    if not settings.prometheus_port:
        return 0
    rank = local_rank or 0
    port = settings.prometheus_port + rank
    if port > 65535:
        var = _local_rank_var(rank)
        ports = (
            f"1 to {65535 - rank} with {var}={rank} (the port is prometheus_port + the local "
            "rank, at most 65535), or 0 for any free port"
            if rank < 65535
            else f"only 0 (any free port) with {var}={rank}: prometheus_port + the local rank "
            "is past 65535 for every other port"
        )
        raise ConfigurationError(
            f"goodput.prometheus_port: {settings.prometheus_port} + {var} {rank} = {port} "
            f"is not a port; accepted: {ports}"
        )
    return port


def _local_rank_var(rank: int) -> str:
    """The variable the local rank *rank* was read from (for an error message)."""
    from ._ranks import env_local_rank_var

    try:
        found = env_local_rank_var(os.environ)
    except ConfigurationError:  # pragma: no cover - read without error at configure()
        found = None
    return found[0] if found is not None and found[1] == rank else "the local rank"


def serving(address: str, port: int) -> tuple[bool, str | None]:
    """How *address*:*port* meets this process's own goodput endpoint on *port*.

    Returns ``(same, overlapped)``: *same* when the endpoint listens on that
    very address (``localhost`` resolved to ``127.0.0.1`` is ``127.0.0.1``):
    ``configure()`` stops it before the new one starts, so the port is free
    by then. *overlapped* is the address of an endpoint on *port* that
    *address* is not but may share the port with (either one a wildcard
    such as ``0.0.0.0``, or an address that cannot be compared): this
    process's own socket answers for it, so no trial bind can tell whether
    the port is free. Two distinct specific addresses (``127.0.0.1`` and
    ``127.0.0.2``) are neither: each takes the port on its own.

    Example:
        >>> serving("127.0.0.1", 9464)  # nothing served by this process
        (False, None)
    """
    same, overlapped = False, None
    for (_, on), server in list(_serving.items()):
        if on != port:
            continue
        running = str(server.server_address[0])
        found = _ip(address), _ip(running)
        if found[0] is None or found[1] is None:
            if address == running:
                same = True
            else:
                overlapped = running
        elif found[0] == found[1]:
            same = True
        elif found[0].is_unspecified or found[1].is_unspecified:
            overlapped = running
    return same, overlapped


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """*address* as an IP address (an IPv4-mapped IPv6 one as its IPv4), or ``None``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def endpoint(address: str, port: int) -> str:
    """``address:port``, an IPv6 address in brackets.

    Example:
        >>> endpoint("::1", 9464)
        '[::1]:9464'
    """
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def listen_error(host: str, port: int, exc: OSError, rank_words: str) -> ConfigurationError:
    """The configuration error of an endpoint that cannot listen on *host*:*port*.

    A host that does not resolve, or is no address of this machine, is
    ``goodput.prometheus_host``'s error; a port in use or refused is
    ``goodput.prometheus_port``'s.
    """
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return ConfigurationError(
            f"goodput.prometheus_host: {host!r} cannot be listened on ({exc}); accepted: a "
            "host name or address of this machine, such as localhost, 127.0.0.1, or 0.0.0.0 "
            "for every interface"
        )
    return ConfigurationError(
        f"goodput.prometheus_port: cannot listen on {host}:{port} ({exc}); accepted: a free "
        f"port (the port is prometheus_port + {rank_words}), or 0 for any free port"
    )


def _close_in_child() -> None:
    """A forked child: close the inherited listening sockets (the parent serves them)."""
    for server in list(_serving.values()):
        try:
            server.socket.close()
        except Exception:
            pass
    _serving.clear()


# (host, port) as configured -> the server of this process's Prometheus endpoint there
_serving: dict[tuple[str, int], Any] = {}
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


def _this_process_only(exporter: Any) -> Any:
    """*exporter*, exporting nothing in a forked child.

    The SDK starts a periodic reader's thread again in a forked child, which
    would export the parent's last values, frozen, under the parent's
    identity (its ``service.instance.id`` and pid) for as long as the child
    lives: the child's own telemetry, if it configures one, has its own.
    """
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    pid = os.getpid()

    class ThisProcessOnly(MetricExporter):
        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=exporter._preferred_temporality,
                preferred_aggregation=exporter._preferred_aggregation,
            )

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            if os.getpid() != pid:
                return MetricExportResult.SUCCESS
            return exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return os.getpid() != pid or bool(exporter.force_flush(timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            if os.getpid() == pid:
                exporter.shutdown(timeout_millis=timeout_millis, **kwargs)

    return ThisProcessOnly()


def _otlp_metric_exporter(protocol: str) -> Any:
    """The OTLP metric exporter of *protocol* (resolved and checked with the settings:
    ``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
    ``otlp_protocol``).

    Made as the trace exporter is (:func:`~asynctrace.export._otlp.build_exporter`): the
    ``OTEL_EXPORTER_OTLP_METRICS_*`` variables, then the general ones, are checked, and what
    OpenTelemetry's exporters log is redacted.

    Raises:
        MissingExtraError: the transport's package is not installed.
        ConfigurationError: a variable is refused, or the exporter rejected its configuration.
    """
    from .export._otlp import build_exporter

    what = "goodput.metrics: the otlp metric exporter"
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
        except ImportError as exc:
            raise MissingExtraError("otlp-grpc", "opentelemetry.exporter.otlp.proto.grpc") from exc
        return build_exporter(protocol, "METRICS", OTLPMetricExporter, what)
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpExporter,
        )
    except ImportError as exc:
        raise MissingExtraError("otlp", "opentelemetry.exporter.otlp.proto.http") from exc
    return build_exporter(protocol, "METRICS", HttpExporter, what)


def _prometheus(settings: GoodputSettings, resource: Any, local_rank: int | None) -> MeterSetup:
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry
    except ImportError as exc:
        raise MissingExtraError("prometheus", "opentelemetry.exporter.prometheus") from exc
    from opentelemetry.sdk.metrics import MeterProvider

    registry = CollectorRegistry()  # the process-wide default is left alone
    reader = PrometheusMetricReader(registry=registry)
    port = prometheus_port(settings, local_rank)
    host = settings.prometheus_host
    try:
        server, thread = _start_server(host, port, registry)
    except OSError as exc:
        raise listen_error(host, port, exc, "the local rank") from None
    provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    where = (host, port)
    if port:
        _serving[where] = server
    pid = os.getpid()

    def shutdown(timeout_s: float) -> None:
        try:
            provider.shutdown(timeout_millis=max(0.0, timeout_s) * 1000.0)
        finally:
            if _serving.get(where) is server:
                del _serving[where]
            if os.getpid() == pid:  # a forked child has no serving thread to stop
                server.shutdown()
                thread.join(max(0.0, timeout_s))
                server.close_connections()
            server.server_close()

    bound_host, bound = server.server_address[:2]
    return MeterSetup(provider, shutdown, (str(bound_host), int(bound)))


def _start_server(host: str, port: int, registry: Any) -> tuple[Any, threading.Thread]:
    """The Prometheus endpoint's server, serving on a daemon thread.

    As ``prometheus_client.start_http_server`` makes it (a thread per
    connection, the registry's ``/metrics``), except that a connection
    idle for :data:`SCRAPE_IDLE_S` is closed, and the connections still
    open when the endpoint shuts down are closed with it: each holds a
    thread, which an idle client would keep for as long as it liked.

    Raises:
        OSError: the host does not resolve, or *host*:*port* cannot be listened on.
    """
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, address = infos[0][0], str(infos[0][4][0])

    class Server(ThreadingWSGIServer):
        address_family = family

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._open: set[Any] = set()
            self._open_lock = threading.Lock()
            super().__init__(*args, **kwargs)

        def process_request(self, request: Any, client_address: Any) -> None:
            with self._open_lock:
                self._open.add(request)
            super().process_request(request, client_address)

        def shutdown_request(self, request: Any) -> None:
            with self._open_lock:
                self._open.discard(request)
            super().shutdown_request(request)

        def close_connections(self) -> None:
            """End every open connection: its thread reads the end and returns."""
            with self._open_lock:
                connections = list(self._open)
            for connection in connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    class Handler(WSGIRequestHandler):
        timeout = SCRAPE_IDLE_S  # each read and write of the connection

        def handle(self) -> None:
            try:
                super().handle()
            except OSError:  # idle past the timeout, reset, or closed at shutdown
                pass

        def log_message(self, format: str, *args: Any) -> None:
            """Log nothing (as prometheus_client's handler)."""

    server = make_server(address, port, make_wsgi_app(registry), Server, handler_class=Handler)
    thread = threading.Thread(
        target=leaving_signals(server.serve_forever),
        name="asynctrace-goodput-prometheus",
        daemon=True,
    )
    thread.start()
    return server, thread
