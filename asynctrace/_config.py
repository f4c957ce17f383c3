"""Telemetry configuration: :class:`TelemetryConfig`, what users write.

In code, in a YAML ``telemetry:`` block, or through ``ASYNCTRACE_*``
variables; ``_settings.resolve`` turns it into validated settings. The checks
of each field are in ``_config_fields``, the variables in ``_config_env``.
This module imports nothing heavy (no OTel SDK).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._config_checks import check_keys
from ._config_env import (
    ENV_VARS,
    OTEL_FALLBACKS,
    env_value,
    otel_exporters,
    otel_sdk_disabled,
    parse_env,
    session_from_env,
    warn_unknown_vars,
)
from ._config_fields import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_QUEUE_SIZE,
    EXPORTER_NAMES,
    SpanExporterLike,
    check_batch_fits,
    coerce_field,
)
from ._errors import ConfigurationError
from ._session_config import SessionTracerConfig

__all__ = ["SessionTracerConfig", "TelemetryConfig", "env_source"]

_SOURCES = "_env_sources"  # on a config from_env made: field -> (variable, the value it set)


@dataclass
class TelemetryConfig:
    """Everything :func:`asynctrace.configure` needs; field names are the contract.

    The object is plain data: :func:`asynctrace.configure` never mutates it
    (a generated run id lives on an internal copy).

    Attributes:
        enabled: record and export spans at all. Off by default.
        span_groups: span-group spec, e.g. ``"default,generation"``.
        exporters: any of ``"chrome"``, ``"otlp"``, ``"console"``, ``"memory"``, or
            objects with OpenTelemetry's ``SpanExporter`` interface (instances,
            not classes).
        output_dir: directory of the chrome trace and session files. The text
            ``{run_id}`` in it is replaced by the run id.
        service_name: ``service.name`` of the resource; empty means
            ``OTEL_SERVICE_NAME``, then ``service.name`` in
            ``OTEL_RESOURCE_ATTRIBUTES``, then ``"asynctrace"``.
        run_id: identifier shared by all processes of one run; empty means
            ``ASYNCTRACE_RUN_ID``, else a new one is generated.
        session_tracer: a :class:`SessionTracerConfig` or a mapping of its fields.
        resource_attributes: extra resource attributes; they win over computed ones.
        handle_sigterm: on SIGTERM, flush and shut down, then chain to the
            previous handler.
        max_queue_size: spans buffered per exporter before new ones are dropped.
        max_export_batch_size: spans handed to an exporter at once.
        schedule_delay_millis: longest time a span waits in the queue before
            it is exported (a full batch goes at once).
        shutdown_timeout_s: time :meth:`Telemetry.shutdown` waits for exporters
            at exit and on SIGTERM.
        provider: ``"fast"`` (asynctrace's own OpenTelemetry provider),
            ``"sdk"`` (a new OpenTelemetry SDK ``TracerProvider``), or your own
            SDK ``TracerProvider`` instance (with its ``resource``): asynctrace
            then records through it and adds its exporters to it (and never
            shuts it down). ``None`` (the default): the ``ASYNCTRACE_PROVIDER``
            variable, else ``"fast"``.
        sampling_ratio: share of traces recorded, in ``[0, 1]``, parent based
            (a span follows its parent's decision). ``None``: the standard
            ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``, else all.
        span_limits: ``max_attributes``, ``max_attribute_length``,
            ``max_events``, ``max_links``, ``max_event_attributes``,
            ``max_link_attributes`` (``None``: unlimited); unset keys come from
            the standard ``OTEL_*_LIMIT`` variables, else OpenTelemetry's
            defaults (128 of each, no length limit).
        propagate_scopes: carriers (``current_trace_carrier``, the env
            carriers, the HTTP integrations) also send the iteration,
            per-prompt, task and session scopes as W3C ``baggage`` entries
            under ``asynctrace.``, and restore the ones they receive. Off by
            default; the bucket scope never travels.
        loop_stall_threshold_ms: with the ``loop_stall`` group on, an event
            loop that has not run for longer than this (milliseconds, from 1
            to 60000) is recorded as one stall span with the blocking frames.
        profiler: profile chosen steps (see :mod:`asynctrace._profiling`): a
            mapping with ``steps`` (``rl.iteration`` values), ``backend``
            (``"python"``: viztracer, extra ``profile``; ``"torch"``, extra
            ``torch``), ``output`` (default: ``output_dir``), and for torch
            ``record_shapes`` and ``with_stack``. ``None``: no profiling.
        otlp_protocol: the OTLP transport, ``"http/protobuf"`` or ``"grpc"``
            (extra ``otlp-grpc``), when neither
            ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` nor
            ``OTEL_EXPORTER_OTLP_PROTOCOL`` is set. ``None``: ``http/protobuf``.
        export_ranks: which ranks record and export: ``"all"``, ``"first"``
            (rank 0), ``"last"``, ``"local_first"`` (``LOCAL_RANK`` 0, one per
            node), a list of ranks, or ``"sampled:<rate>"`` (a fixed,
            hash-chosen share of ranks). Other ranks run disabled.
        sample_rate: share of traces kept, decided from the trace id at the
            root and followed by every span downstream, on every rank and
            process. ``None``: ``sampling_ratio``.
        retry_buffer_spans: spans of failed OTLP batches held for retry.
        retry_buffer_bytes: estimated encoded bytes held for retry.
        goodput: live goodput per finished step (see :mod:`asynctrace._goodput_settings`):
            ``true`` (a ``goodput-r{rank}.jsonl`` file and metrics through the
            global ``MeterProvider``), a mapping of ``file``, ``metrics``
            (``global``, ``none``, ``otlp``, ``console``, ``prometheus``, or a
            ``MeterProvider``), ``prometheus_host``, ``prometheus_port``,
            ``export_interval_s``, ``callback_queue``, ``grace_s``, ``window``,
            ``max_pending``, ``step_name``; or ``false``. ``None`` (the
            default): on for the callbacks alone (no file, no metrics) when
            :func:`asynctrace.on_step_goodput` has registered one by the time
            :func:`asynctrace.configure` runs, else off.

    Example:
        >>> TelemetryConfig(enabled=True, exporters=["chrome"]).span_groups
        'default'
    """

    enabled: bool = False
    span_groups: str = "default"
    exporters: list[str | SpanExporterLike] = field(default_factory=lambda: ["chrome"])
    output_dir: str = "asynctrace-traces/{run_id}"
    service_name: str = ""
    run_id: str = ""
    session_tracer: SessionTracerConfig | Mapping[str, Any] = field(
        default_factory=SessionTracerConfig
    )
    resource_attributes: dict[str, Any] = field(default_factory=dict)
    handle_sigterm: bool = False
    max_queue_size: int = DEFAULT_QUEUE_SIZE
    max_export_batch_size: int = DEFAULT_BATCH_SIZE
    schedule_delay_millis: float = 1000.0
    shutdown_timeout_s: float = 5.0
    provider: Any = None
    sampling_ratio: float | None = None
    span_limits: dict[str, Any] = field(default_factory=dict)
    propagate_scopes: bool = False
    loop_stall_threshold_ms: float = 50.0
    profiler: Any = None
    otlp_protocol: str | None = None
    export_ranks: Any = "all"
    sample_rate: float | None = None
    retry_buffer_spans: int = 65_536
    retry_buffer_bytes: int = 64 << 20
    goodput: Any = None

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> TelemetryConfig:
        """Build from a mapping such as a YAML ``telemetry:`` block.

        ``exporters`` may be a list or a comma-separated string and
        ``session_tracer`` a nested mapping.

        Raises:
            ConfigurationError: an unknown key (the message lists the accepted
                keys) or a value of the wrong kind.

        Example:
            >>> cfg = TelemetryConfig.from_mapping(
            ...     {"enabled": True, "exporters": "chrome,otlp",
            ...      "session_tracer": {"enabled": True, "flush_threshold": 10}})
            >>> cfg.exporters, cfg.session_tracer.flush_threshold
            (['chrome', 'otlp'], 10)
        """
        if mapping is None:
            return cls()
        if not isinstance(mapping, Mapping):
            raise ConfigurationError(
                f"telemetry: expected a mapping of configuration keys, got {mapping!r}"
            )
        check_keys(mapping, cls, "telemetry")
        return cls(**{k: coerce_field(k, k, v) for k, v in mapping.items()})

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, base: TelemetryConfig | None = None
    ) -> TelemetryConfig:
        """Overlay ``ASYNCTRACE_*`` variables on *base* (defaults when omitted).

        Only variables that are set (and not empty) change a field. The
        exporters fall back to the standard ``OTEL_TRACES_EXPORTER``
        (``otlp``, ``console``, ``none`` or asynctrace's own names; other
        names are ignored, with a warning when telemetry is on), the queue
        limits to the standard ``OTEL_BSP_*`` variables, and
        ``OTEL_SDK_DISABLED=true`` turns telemetry off whatever else says.
        *base* is not mutated.

        Raises:
            ConfigurationError: a variable's value is malformed, or the export
                batch size set is larger than the queue size; the message names
                the variable.

        Example:
            >>> env = {"ASYNCTRACE_ENABLED": "1", "ASYNCTRACE_EXPORTERS": "memory"}
            >>> cfg = TelemetryConfig.from_env(env)
            >>> cfg.enabled, cfg.exporters
            (True, ['memory'])
        """
        env = os.environ if environ is None else environ
        if not isinstance(env, Mapping):
            raise ConfigurationError(
                f"environ: expected a mapping of variable names to strings (such as "
                f"os.environ), got {type(env).__name__}"
            )
        if base is not None and not isinstance(base, TelemetryConfig):
            raise ConfigurationError(
                f"base: expected a TelemetryConfig, got {type(base).__name__}; accepted: a "
                "TelemetryConfig (TelemetryConfig.from_mapping(...) makes one of a mapping) "
                "or None"
            )
        warn_unknown_vars(env)
        config = _copy_of(base) if base is not None else cls()
        updates: dict[str, Any] = {}
        sources: dict[str, str] = {}  # field -> the variable that set it
        for var, key in ENV_VARS.items():
            raw = env_value(env, var)
            if raw is None and key in OTEL_FALLBACKS:
                var = OTEL_FALLBACKS[key]
                raw = env_value(env, var)
            if raw is None:
                continue
            if key.startswith("session_tracer."):
                continue  # handled below, as one nested value
            updates[key] = parse_env(var, key, raw)
            sources[key] = var
        ignored: list[str] = []
        if "exporters" not in updates:
            otel, ignored = otel_exporters(env)
            if otel is not None:
                updates["exporters"] = otel
        session = session_from_env(env, config.session_tracer)
        if session is not None:
            updates["session_tracer"] = session
        config = dataclasses.replace(config, **updates)
        _mark_sources(config, base, set(updates), {k: (v, updates[k]) for k, v in sources.items()})
        if "max_queue_size" in sources or "max_export_batch_size" in sources:
            check_batch_fits(
                config.max_export_batch_size,
                config.max_queue_size,
                sources.get("max_export_batch_size"),
                sources.get("max_queue_size"),
            )
        if otel_sdk_disabled(env):
            config.enabled = False
        if ignored and config.enabled:
            message = (
                f"OTEL_TRACES_EXPORTER: ignoring {', '.join(map(repr, ignored))}; asynctrace "
                f"exports to {', '.join(EXPORTER_NAMES)} (set ASYNCTRACE_EXPORTERS to choose)"
            )
            try:
                warnings.warn(message, UserWarning, stacklevel=2)
            except UserWarning:  # warnings are errors here: a variable for other tools
                logging.getLogger("asynctrace").warning("asynctrace: %s", message)
        return config


def env_source(config: TelemetryConfig, name: str) -> str | None:
    """The variable :meth:`TelemetryConfig.from_env` set the field *name* of *config* from,
    while the field still holds that variable's value; else ``None`` (set in code or YAML).

    Example:
        >>> config = TelemetryConfig.from_env({"ASYNCTRACE_SAMPLE_RATE": "0.5"})
        >>> env_source(config, "sample_rate"), env_source(config, "sampling_ratio")
        ('ASYNCTRACE_SAMPLE_RATE', None)
    """
    found = getattr(config, _SOURCES, {}).get(name)
    if found is None or getattr(config, name, None) is not found[1]:
        return None
    return str(found[0])


def _mark_sources(
    config: TelemetryConfig,
    base: TelemetryConfig | None,
    changed: set[str],
    sources: dict[str, tuple[str, Any]],
) -> None:
    """Record on *config* which fields variables set: *sources*, and those of *base* that
    *config* copied (*changed* are the fields the environment changed)."""
    marked: dict[str, tuple[str, Any]] = {}
    if base is not None:
        for name in getattr(base, _SOURCES, {}):
            var = env_source(base, name)
            if var is not None and name not in changed:
                marked[name] = (var, getattr(config, name))
    marked.update(sources)
    object.__setattr__(config, _SOURCES, marked)


def _copy_of(config: TelemetryConfig) -> TelemetryConfig:
    """*config* with its own lists, dicts and session block: changing one changes no other."""
    return dataclasses.replace(
        config,
        **{f.name: _data_copy(getattr(config, f.name)) for f in dataclasses.fields(config)},
    )


def _data_copy(value: Any) -> Any:
    """Plain containers copied all the way down; anything else (an exporter, a provider,
    a read-only mapping) is the same object."""
    if isinstance(value, dict):
        return {key: _data_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_data_copy(item) for item in value]
    if isinstance(value, set):
        return set(value)
    if isinstance(value, SessionTracerConfig):
        return dataclasses.replace(value)
    return value
