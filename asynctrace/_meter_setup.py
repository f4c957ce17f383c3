"""The meter provider ``goodput.metrics`` names, made before anything starts, and its shutdown."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._errors import MissingExtraError
from ._goodput_settings import GoodputSettings
from ._prometheus_endpoint import prometheus_meter_provider

__all__ = ["MeterSetup", "meter_provider_for", "otlp_metric_exporter"]


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
            _this_process_only(otlp_metric_exporter(otlp_protocol)),
            export_interval_millis=interval_ms,
        )
    else:
        return MeterSetup(*prometheus_meter_provider(settings, resource, local_rank))
    provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)

    def shutdown(timeout_s: float) -> None:
        provider.shutdown(timeout_millis=max(0.0, timeout_s) * 1000.0)

    return MeterSetup(provider, shutdown)


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


def otlp_metric_exporter(protocol: str) -> Any:
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
