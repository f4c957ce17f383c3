"""Starting telemetry from a lens config (:func:`setup_telemetry`); the process's record of it."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from opentelemetry import metrics, trace

import asynctrace

from ._config import NemoLensConfig, warn_once
from ._environment import environment_base, have_grpc_exporter, lens_resource
from ._groups import SpanGroup, register_names
from ._strategies import should_export, strategy_named
from ._values import as_boolean

__all__ = ["TelemetryHandle", "set_enabled_span_groups", "setup_telemetry"]

_LOG = logging.getLogger("asynctrace_contrib.nemo_lens")  # one logger, the package's name


class TelemetryHandle:
    """What :func:`setup_telemetry` returns: ``tracer``, ``meter``, ``is_exporting``, ``shutdown``.

    ``telemetry`` is the underlying :class:`asynctrace.Telemetry`: the one
    :func:`setup_telemetry` started, the application's when it reused that,
    ``None`` for a disabled config. ``shutdown`` shuts down only telemetry
    this handle started; an application's stays its own to shut down.

    Example:
        >>> handle = setup_telemetry(NemoLensConfig())
        >>> handle.is_exporting
        False
    """

    def __init__(
        self,
        telemetry: asynctrace.Telemetry | None,
        is_exporting: bool,
        *,
        owned: bool = True,
    ) -> None:
        self.telemetry = telemetry
        self.is_exporting = is_exporting
        self._owned = owned

    @property
    def tracer(self) -> trace.Tracer:
        """The tracer asynctrace records through (a no-op one when not exporting)."""
        return asynctrace.get_tracer() if self.is_exporting else trace.NoOpTracer()

    @property
    def meter(self) -> metrics.Meter:
        """OpenTelemetry's global meter, as under lens."""
        return metrics.get_meter("nemo.lens")

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Flush and shut telemetry down (bounded by *timeout_ms*), if this handle started it."""
        if self.telemetry is not None and self._owned:
            self.telemetry.shutdown(timeout_ms / 1000)


_initialized = False
_started: asynctrace.Telemetry | None = None  # what setup_telemetry last configured


def _application_telemetry() -> asynctrace.Telemetry | None:
    """The running asynctrace telemetry, if the application (not this module) configured it."""
    current = asynctrace.current_telemetry()
    if current is None or current is _started or not current.enabled:
        return None
    return current


def setup_telemetry(
    config: NemoLensConfig,
    rank: int = 0,
    world_size: int = 1,
    resource_attributes: Mapping[str, Any] | None = None,
    span_exporter: Any = None,
    metric_reader: Any = None,
    export_strategy: Callable[[NemoLensConfig, int, int], bool] | None = None,
    _allow_reinit: bool = False,
    *,
    propagate_scopes: bool | None = None,
) -> TelemetryHandle:
    """Start telemetry for this process from a :class:`NemoLensConfig`, as lens's does.

    A disabled config returns a no-op handle and changes nothing (an
    application's own :func:`asynctrace.configure` keeps running). An
    enabled one calls :func:`asynctrace.configure` with the equivalent
    :class:`asynctrace.TelemetryConfig`: the groups ``span_groups`` resolves
    to through ``span_group_cls`` (a subclass's own groups are registered
    with asynctrace, unbucketed), ``service_name``, ``run_id`` (lens's rule:
    ``SLURM_JOB_ID`` or a random id when empty), the exporter
    (``span_exporter`` replaces it, as in lens) and the resource. A rank that
    does not export gets telemetry off. *metric_reader* is accepted and not
    used.

    As in lens, OTLP goes over gRPC unless ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``
    or ``OTEL_EXPORTER_OTLP_PROTOCOL`` (or asynctrace's ``ASYNCTRACE_OTLP_PROTOCOL``)
    says otherwise, or the gRPC exporter (extra ``otlp-grpc``) is not
    installed: then over HTTP, as lens falls back. The resource has lens's
    attributes (``nemo.run.id``,
    ``service.instance.id`` = ``<run_id>-rank<rank>``, ``dl.rank``,
    ``dl.world_size``, ``nemo.user.id``, ``wandb.entity``, ``wandb.project``,
    ``deployment.environment``), then *resource_attributes*, which win.
    asynctrace's own ``ASYNCTRACE_*`` variables apply, except those the lens
    config decides (enabled, groups, exporters, service name, run id, export
    ranks). *propagate_scopes* (``None``: ``ASYNCTRACE_PROPAGATE_SCOPES``,
    else off) makes carriers send the scopes and OpenTelemetry baggage.

    When the application already configured asynctrace itself (an enabled
    :func:`asynctrace.configure` this function did not make), that
    configuration is reused, as NeMo Gym reuses an existing lens setup: the
    handle wraps it, the lens config's settings are not applied (its
    subclass groups are still registered) and ``handle.shutdown()`` leaves
    it running for its owner.

    Raises:
        RuntimeError: called a second time with telemetry enabled (lens's
            rule), unless ``_allow_reinit`` (which also replaces an
            application's configuration).
        ValueError: an unknown span-group name or exporter (checked before
            anything changes; not checked when disabled), or an unknown
            export strategy (checked disabled too, as in lens, unless
            *export_strategy* is given).
        asynctrace.ConfigurationError: a field of *config* assigned a value
            of the wrong kind since it was made (checked first, disabled or
            not); with ``first_rank_per_node``, a ``LOCAL_RANK`` that is not
            an integer >= -1 (a ``ValueError``, checked before anything
            changes); a malformed ``ASYNCTRACE_*`` variable it reads, naming it.

    With ``single_rank``, an ``export_rank`` that names no rank of the job
    (``world_size`` or more) means no rank exports, as in lens; a warning is
    logged once.

    Example:
        >>> setup_telemetry(NemoLensConfig(enabled=False)).is_exporting
        False
    """
    global _initialized, _started
    config._check()  # fields may have been assigned since the config was made
    if export_strategy is None:
        strategy_named(config.export_strategy)  # lens looks it up, enabled or not
    if not config.enabled:  # lens: nothing to set up; the exporter is never looked at
        return TelemetryHandle(None, False, owned=False)
    application = None if _allow_reinit else _application_telemetry()
    if _initialized and application is None and not _allow_reinit:
        raise RuntimeError(
            "setup_telemetry() has already been initialised for this process. "
            "Call it once at startup. Pass _allow_reinit=True to override (testing only)."
        )
    groups_class = config._span_groups_class()
    groups = groups_class.resolve(config.span_groups)  # ValueError on an unknown name
    exporters: list[Any]
    if span_exporter is not None:
        exporters = [span_exporter]
    elif config.exporter in ("otlp", "console"):
        exporters = [config.exporter]
    else:
        raise ValueError(f"Unknown exporter {config.exporter!r}; accepted: otlp, console")
    decide = export_strategy if export_strategy is not None else should_export
    exporting = bool(config.traces_enabled and decide(config, rank, world_size))
    if groups_class is not SpanGroup:  # a lens library's own groups: asynctrace records them
        register_names(groups_class.ALL_GROUPS | groups, groups_class.__qualname__)
    if application is not None:
        _LOG.info(
            "setup_telemetry: asynctrace is already configured by the application; "
            "reusing it (the nemo-lens config's settings are not applied)"
        )
        return TelemetryHandle(application, application.enabled, owned=False)
    if not config.run_id:
        config.run_id = os.environ.get("SLURM_JOB_ID", "") or uuid.uuid4().hex[:12]
    base = environment_base()
    settings: dict[str, Any] = {
        "enabled": exporting,
        "span_groups": (
            config.span_groups if groups_class is SpanGroup else ",".join(sorted(groups))
        ),
        "exporters": exporters,
        "service_name": config.service_name,
        "run_id": config.run_id,
        "resource_attributes": {
            **base.resource_attributes,
            **lens_resource(config, rank, world_size),
            **(resource_attributes or {}),
        },
    }
    if base.otlp_protocol is None and have_grpc_exporter():
        settings["otlp_protocol"] = "grpc"  # lens's default (OTEL_EXPORTER_OTLP_*PROTOCOL win)
    if propagate_scopes is not None:
        settings["propagate_scopes"] = as_boolean("propagate_scopes", propagate_scopes)
    telemetry = asynctrace.configure(replace(base, **settings), rank=rank, world_size=world_size)
    _started = telemetry
    _initialized = True
    return TelemetryHandle(telemetry, exporting)


def set_enabled_span_groups(groups: frozenset[str] | set[str] | list[str]) -> None:
    """Enable exactly *groups* (keeping the pipeline), as lens's does for tests.

    As in lens, any name works: one no library registered is registered
    with asynctrace (under ``nemo_lens``, unbucketed) so its spans are
    recorded. Names are group names or asynctrace presets.

    As in lens, it works before :func:`setup_telemetry` too: with no
    telemetry running and an OpenTelemetry SDK ``TracerProvider`` set
    globally (lens's test pattern), asynctrace is configured to record
    through that provider, with these groups. With neither, nothing can be
    recorded and a warning says so, once. A later :func:`setup_telemetry`
    replaces either, with its own groups, as lens's does.

    Raises:
        asynctrace.ConfigurationError: a name that is not a valid group name,
            or *groups* is a string (a ``ValueError``): pass a set of names,
            ``frozenset({"step"})``, not ``"step"``.

    Example:
        >>> set_enabled_span_groups(frozenset({"job"}))
    """
    global _started
    given: object = groups  # annotated a collection; lens code passes a str too
    if isinstance(given, (str, bytes, bytearray)):  # iterated, it would be its characters
        raise asynctrace.ConfigurationError(
            f"set_enabled_span_groups: groups={groups!r} is not accepted; accepted: a set, "
            'frozenset or list of group names, e.g. frozenset({"step"})'
        )
    names = {str(name).strip().lower() for name in groups}
    names.discard("")
    register_names(names, "set_enabled_span_groups")
    spec = ",".join(sorted(names))
    if asynctrace.is_telemetry_enabled():  # configured, or a capture_spans() running
        asynctrace.set_span_groups(spec)
        return
    provider = trace.get_tracer_provider()
    from opentelemetry.sdk.trace import TracerProvider  # the SDK comes with asynctrace

    if isinstance(provider, TracerProvider):  # lens's test pattern: record through it
        _started = asynctrace.configure(
            asynctrace.TelemetryConfig(
                enabled=True, span_groups=spec, exporters=[], provider=provider
            )
        )
        return
    warn_once(
        ("set_enabled_span_groups", "unconfigured"),
        "set_enabled_span_groups: telemetry is not configured and no OpenTelemetry SDK "
        "TracerProvider is set, so no span is recorded; call setup_telemetry (or "
        "asynctrace.configure), or set an SDK TracerProvider first",
    )
    asynctrace.set_span_groups(spec)
