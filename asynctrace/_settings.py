"""Resolution: a TelemetryConfig plus the process identity -> validated Settings.

Pure: no file, thread or global is touched. The runtime checks the output
directory afterwards, then installs. What resolution makes is
:class:`~asynctrace._resolved_settings.Settings`; the keys a TracerProvider
handed in makes moot are checked by :mod:`asynctrace._provider_keys`, the
sampling is chosen by :mod:`asynctrace._settings_sampling` and the
environment's resource read by :mod:`asynctrace._settings_resource`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import socket
import time
from collections.abc import Mapping
from typing import Any

from ._config import TelemetryConfig, env_source
from ._config_checks import check_int
from ._config_env import otel_sdk_disabled
from ._config_fields import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_QUEUE_SIZE,
    SpanExporterLike,
    check_batch_fits,
    coerce_field,
    span_group_tokens,
)
from ._errors import ConfigurationError
from ._fast import limits_from
from ._goodput_settings import GoodputSettings
from ._profiler_settings import ProfilerSettings
from ._protocol import check_protocol, otlp_protocol
from ._provider_keys import own_provider_keys
from ._rank_env import MAX_WORLD_SIZE, env_local_rank
from ._ranks import ExportRanks
from ._resolved_settings import Settings
from ._session_config import SessionTracerConfig
from ._settings_resource import detected, env_service_name
from ._settings_sampling import sampling

__all__ = ["new_run_id", "resolve"]

# Resource attribute keys asynctrace adds next to service.name, host.name, process.pid.
RUN_ID_KEY = "asynctrace.run_id"
RANK_KEY = "asynctrace.rank"
WORLD_SIZE_KEY = "asynctrace.world_size"
LOCAL_RANK_KEY = "asynctrace.local_rank"
ROLE_KEY = "asynctrace.role"

DEFAULT_SERVICE_NAME = "asynctrace"
RUN_ID_ENV = "ASYNCTRACE_RUN_ID"
EXPORT_RANKS_ENV = "ASYNCTRACE_EXPORT_RANKS"

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def resolve(
    config: TelemetryConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    role: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Validate *config* and the process identity; returns :class:`Settings`.

    Pure: no file, thread or global is touched (the output directory is
    checked by the runtime, after this succeeds).

    Raises:
        ConfigurationError: the first bad value, naming its key.

    Example:
        >>> s = resolve(TelemetryConfig(enabled=True, run_id="r1"), rank=1, world_size=2)
        >>> s.output_dir, s.resource_attributes["asynctrace.rank"]
        ('asynctrace-traces/r1', 1)
    """
    env = os.environ if environ is None else environ
    if not isinstance(config, TelemetryConfig):
        raise ConfigurationError(
            f"config: expected a TelemetryConfig or a mapping, got {type(config).__name__}"
        )
    values = {f.name: coerce_field(f.name, f.name, getattr(config, f.name)) for f in _FIELDS}
    tokens = span_group_tokens(
        env_source(config, "span_groups") or "span_groups", values["span_groups"]
    )
    provider = _provider(values["provider"], env)
    own_provider_keys(config, values, provider, env)
    batch, queue = values["max_export_batch_size"], values["max_queue_size"]
    only_queue = batch == DEFAULT_BATCH_SIZE and queue != DEFAULT_QUEUE_SIZE
    check_batch_fits(  # a batch size left at its default: the queue size is the one to blame
        batch,
        queue,
        None if only_queue else "max_export_batch_size",
        None if queue == DEFAULT_QUEUE_SIZE else "max_queue_size",
    )
    rank = check_int("rank", rank, 0)
    world_size = check_int("world_size", world_size, 1)
    if world_size > MAX_WORLD_SIZE:
        raise ConfigurationError(
            f"world_size: {world_size!r} is not accepted; accepted: an integer from 1 to "
            f"{MAX_WORLD_SIZE}"
        )
    if rank >= world_size:
        raise ConfigurationError(
            f"rank: {rank} is not accepted with world_size={world_size}; "
            f"accepted: 0 <= rank < world_size"
        )
    if role is not None and (not isinstance(role, str) or not _SAFE_NAME.fullmatch(role)):
        raise ConfigurationError(
            f"role: {role!r} is not accepted; accepted: None or a name of letters, digits "
            "and _ . - (it is part of the trace file name)"
        )
    env_run_id = _env_text(env, RUN_ID_ENV)
    run_id = values["run_id"] or env_run_id
    # Named as the variable when it says so (configure() read it into the config, or not).
    run_id_key = RUN_ID_ENV if run_id and run_id == env_run_id else "run_id"
    run_id = run_id or new_run_id()
    if not _SAFE_NAME.fullmatch(run_id):
        raise ConfigurationError(
            f"{run_id_key}: {run_id!r} is not accepted; accepted: up to 128 letters, digits "
            "and _ . - (it may be part of a path)"
        )
    local_rank = env_local_rank(env)
    export_ranks: ExportRanks = values["export_ranks"]
    # The driver is rank 0 of a process group of its own: it always exports, and
    # export_ranks (shared with the workers) chooses among the workers' ranks.
    driver = role == "driver"
    if (
        not driver
        and export_ranks.mode == "list"
        and not any(r < world_size for r in export_ranks.ranks)
    ):
        raise ConfigurationError(
            f"{_export_ranks_key(export_ranks, env)}: {sorted(export_ranks.ranks)} names no "
            "rank of this job "
            f"(world_size={world_size}), so no rank would export; accepted: ranks below "
            "world_size, or all, first, last, local_first, sampled:<rate>"
        )
    exporting = driver or export_ranks.exports(
        rank=rank, world_size=world_size, local_rank=local_rank
    )
    session: SessionTracerConfig = values["session_tracer"]
    exporters: list[str | SpanExporterLike] = values["exporters"]
    goodput = _goodput(values["goodput"])
    metrics_protocol = "http/protobuf"
    if goodput is not None and goodput.metrics == "otlp":
        metrics_protocol = _metrics_protocol(values["otlp_protocol"], env)
    if "otlp" in exporters:
        protocol = otlp_protocol(values["otlp_protocol"], env)
    else:  # only the goodput metrics use OTLP, if anything does
        protocol = metrics_protocol
    writes_files = "chrome" in exporters or session.enabled or bool(goodput and goodput.file)
    # "~" expanded once, here: every writer gets the same directory
    run_dir = os.path.expanduser(values["output_dir"].replace("{run_id}", run_id))
    output_dir = run_dir if writes_files else None
    service_name = values["service_name"] or env_service_name(env) or DEFAULT_SERVICE_NAME
    own_resource: Mapping[str, Any] = {}
    if not isinstance(provider, str):  # its resource is the spans': the files say the same
        own_resource = provider.resource.attributes
        named = own_resource.get("service.name")
        service_name = named if isinstance(named, str) and named else service_name
    resource: dict[str, Any] = detected(env)
    resource.update(
        {
            "service.name": service_name,
            RUN_ID_KEY: run_id,
            RANK_KEY: rank,
            WORLD_SIZE_KEY: world_size,
            "host.name": socket.gethostname(),
            "process.pid": os.getpid(),
        }
    )
    if local_rank is not None:
        resource[LOCAL_RANK_KEY] = local_rank
    if role is not None:
        resource[ROLE_KEY] = role
    if isinstance(provider, str):
        resource.update(values["resource_attributes"])
    resource.update(own_resource)
    return Settings(
        enabled=values["enabled"] and exporting and not otel_sdk_disabled(env),
        span_groups=",".join(tokens),
        exporters=tuple(exporters),
        output_dir=output_dir,
        service_name=service_name,
        run_id=run_id,
        session_tracer=session,
        resource_attributes=resource,
        handle_sigterm=values["handle_sigterm"],
        max_queue_size=values["max_queue_size"],
        max_export_batch_size=values["max_export_batch_size"],
        schedule_delay_millis=values["schedule_delay_millis"],
        shutdown_timeout_s=values["shutdown_timeout_s"],
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        role=role,
        provider=provider,
        sampling=sampling(config, values["sample_rate"], values["sampling_ratio"], env),
        span_limits=limits_from(values["span_limits"], env),
        propagate_scopes=values["propagate_scopes"],
        loop_stall_threshold_ms=values["loop_stall_threshold_ms"],
        profiler=_profiler(values["profiler"], run_dir),
        otlp_protocol=protocol,
        otlp_metrics_protocol=metrics_protocol,
        exporting=exporting,
        export_ranks=str(export_ranks),
        retry_buffer_spans=values["retry_buffer_spans"],
        retry_buffer_bytes=values["retry_buffer_bytes"],
        goodput=goodput,
    )


_FIELDS = dataclasses.fields(TelemetryConfig)


def _goodput(value: GoodputSettings | bool | None) -> GoodputSettings | None:
    """The goodput settings; unset (``None``), the callbacks alone if one is registered."""
    if isinstance(value, GoodputSettings):
        return value
    if value is None:
        from ._goodput import callbacks

        if callbacks():
            return GoodputSettings(file=False, metrics="none")
    return None


def _profiler(value: ProfilerSettings | None, output_dir: str) -> ProfilerSettings | None:
    """The profiler settings, with the captures' directory decided: ``profiler.output``,
    else ``output_dir``, whether or not anything else writes files there."""
    if value is None or value.output is not None:
        return value
    return dataclasses.replace(value, output=output_dir)


def new_run_id() -> str:
    """A fresh run id: UTC date-time plus 6 random hex digits.

    Example:
        >>> len(new_run_id().split("-"))
        3
    """
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def _provider(value: Any, env: Mapping[str, str]) -> Any:
    """The configured provider; unset: ``ASYNCTRACE_PROVIDER``, else ``"fast"``."""
    if value is not None:
        return value
    raw = env.get("ASYNCTRACE_PROVIDER", "").strip()
    return coerce_field("ASYNCTRACE_PROVIDER", "provider", raw) if raw else "fast"


def _export_ranks_key(export_ranks: ExportRanks, env: Mapping[str, str]) -> str:
    """``ASYNCTRACE_EXPORT_RANKS`` when that variable says *export_ranks*, else the key."""
    raw = env.get(EXPORT_RANKS_ENV)
    if isinstance(raw, str) and raw.strip():
        try:
            if coerce_field(EXPORT_RANKS_ENV, "export_ranks", raw.strip()) == export_ranks:
                return EXPORT_RANKS_ENV
        except ConfigurationError:  # the value came from elsewhere, then
            pass
    return "export_ranks"


def _env_text(env: Mapping[str, str], var: str) -> str:
    """Variable *var*, stripped (``""``: unset).

    Raises:
        ConfigurationError: the value is not a string (a hand-made mapping).
    """
    raw = env.get(var, "")
    if not isinstance(raw, str):
        raise ConfigurationError(f"{var}: {raw!r} is not accepted; accepted: a string")
    return raw.strip()


METRICS_PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def _metrics_protocol(configured: str | None, env: Mapping[str, str]) -> str:
    """The goodput metrics' OTLP transport: the metrics variable, the general one, the key."""
    for var in METRICS_PROTOCOL_VARS:
        raw = env.get(var, "").strip()
        if raw:
            return check_protocol(var, raw)
    return check_protocol("otlp_protocol", configured) if configured else "http/protobuf"
