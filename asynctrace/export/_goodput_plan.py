"""The ``goodput`` block checked before anything starts (extras, provider, port), and its start."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

from .._goodput_settings import GoodputSettings
from .._meter_setup import MeterSetup, meter_provider_for
from .._resolved_settings import Settings
from ._goodput_sink import GoodputSink

__all__ = ["GoodputPlan", "goodput_filename", "prepare_goodput"]

logger = logging.getLogger("asynctrace")


def goodput_filename(rank: int, role: str | None) -> str:
    """``goodput-r{rank}.jsonl``, or ``goodput-{role}-r{rank}.jsonl`` for other roles.

    Example:
        >>> goodput_filename(1, "driver")
        'goodput-driver-r1.jsonl'
    """
    if role in (None, "worker"):
        return f"goodput-r{rank}.jsonl"
    return f"goodput-{role}-r{rank}.jsonl"


class GoodputPlan:
    """The goodput block checked (extras imported, port free), nothing started."""

    def __init__(self, settings: Settings, goodput: GoodputSettings) -> None:
        self.settings = settings
        self.goodput = goodput
        self.path: Path | None = None
        if goodput.file and settings.output_dir is not None:
            self.path = Path(settings.output_dir) / goodput_filename(settings.rank, settings.role)

    def start(self) -> GoodputSink:
        """Set the meter provider up and make the sink."""
        settings, goodput = self.settings, self.goodput
        try:
            meters = meter_provider_for(
                goodput,
                settings.resource_attributes,
                settings.local_rank,
                settings.otlp_metrics_protocol,
            )
        except Exception as exc:  # the port was taken since prepare(): run without metrics
            logger.warning("asynctrace: goodput metrics are off: %s", exc)
            meters = MeterSetup(None)
        if meters.address is not None:
            logger.info(
                "asynctrace: goodput metrics for Prometheus on http://%s:%d/metrics",
                *meters.address,
            )
        return GoodputSink(
            goodput,
            rank=settings.rank,
            role=settings.role,
            path=self.path,
            meters=meters,
        )


def prepare_goodput(settings: Settings) -> GoodputPlan | None:
    """Check the ``goodput`` block before anything starts (``None``: it is off).

    Raises:
        MissingExtraError: the metrics exporter's extra is not installed.
        ConfigurationError: the Prometheus port is taken.
    """
    goodput: GoodputSettings | None = getattr(settings, "goodput", None)
    if goodput is None:
        return None
    metrics = goodput.metrics
    if not isinstance(metrics, str):
        _check_meter_provider(metrics)
    elif metrics in ("otlp", "console", "prometheus"):
        from .._errors import MissingExtraError

        try:
            import opentelemetry.sdk.metrics
        except ImportError as exc:
            raise MissingExtraError("sdk", "opentelemetry.sdk") from exc
        if metrics == "otlp":
            from .._meter_setup import otlp_metric_exporter

            otlp_metric_exporter(settings.otlp_metrics_protocol)  # the extra, its settings
        elif metrics == "prometheus":
            try:
                import opentelemetry.exporter.prometheus  # noqa: F401
                import prometheus_client  # noqa: F401
            except ImportError as exc:
                raise MissingExtraError("prometheus", "opentelemetry.exporter.prometheus") from exc
            _check_port(goodput, settings.local_rank)
    plan = GoodputPlan(settings, goodput)
    if plan.path is not None:  # a directory in its place fails here, not after the swap
        from .._output_dir import writable_file

        writable_file(plan.path, "output_dir", "goodput file")
    return plan


def _check_meter_provider(provider: Any) -> None:
    """The program's provider must give the meter, before anything is swapped."""
    from .. import __version__
    from .._errors import ConfigurationError

    try:
        provider.get_meter("asynctrace", __version__)
    except Exception as exc:
        raise ConfigurationError(
            f"goodput.metrics: {provider!r} could not give a meter ({type(exc).__name__}: "
            f"{exc}); accepted: global, none, otlp, console, prometheus, or an OpenTelemetry "
            "MeterProvider object"
        ) from None


def _check_port(goodput: GoodputSettings, local_rank: int | None) -> None:
    """The endpoint's host must resolve to an address of this machine, its port be free.

    The host resolves as the endpoint's server resolves it. With port 0 (any
    free port), or the very address and port of this process's own endpoint
    (it is stopped before the new one starts), only the host is tried. An
    address that shares the port with this process's own endpoint without
    being its address (a wildcard on either side) is refused: that endpoint
    would be stopped before the new one found out whether it can listen.

    Raises:
        ConfigurationError: naming ``goodput.prometheus_host`` or ``goodput.prometheus_port``.
    """
    from .._errors import ConfigurationError
    from .._prometheus_endpoint import endpoint, listen_error, prometheus_port, serving

    port = prometheus_port(goodput, local_rank)  # ConfigurationError past 65535
    host = goodput.prometheus_host
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise listen_error(host, port, exc, "LOCAL_RANK") from None
    family, kind, proto, _, address = infos[0]
    same, overlapped = serving(str(address[0]), port) if port else (False, None)
    if overlapped is not None:
        raise ConfigurationError(
            f"goodput.prometheus_host: {host!r} ({endpoint(str(address[0]), port)}) shares "
            f"the port with this process's running endpoint: this process already serves "
            f"goodput metrics on {endpoint(overlapped, port)}; accepted: that host "
            f"({overlapped}) to take the endpoint over, another port, or an address that "
            "does not overlap it"
        )
    tried = 0 if not port or same else port
    try:
        with socket.socket(family, kind, proto) as probe:
            # As the endpoint's server does: a port whose last connections linger
            # (TIME_WAIT) can be listened on; one that is listened on cannot.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((address[0], tried, *address[2:]))
    except OSError as exc:
        raise listen_error(host, port, exc, "LOCAL_RANK") from None
