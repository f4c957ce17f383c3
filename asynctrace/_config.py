"""Telemetry configuration: the user-facing dataclasses, parsing and value checks.

:class:`TelemetryConfig` is what users write (in code, in a YAML ``telemetry:``
block, or through ``ASYNCTRACE_*`` variables); ``_settings.resolve`` turns it
into validated settings. This module imports nothing heavy (no OTel SDK).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from ._errors import ConfigurationError
from ._groups import split_spec

__all__ = ["SessionTracerConfig", "TelemetryConfig"]

EXPORTER_NAMES = ("chrome", "otlp", "console", "memory")
PROVIDER_NAMES = ("fast", "sdk")


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@runtime_checkable
class SpanExporterLike(Protocol):
    """Anything with OpenTelemetry's ``SpanExporter`` interface (``export``, ``shutdown``)."""

    def export(self, spans: Sequence[Any]) -> Any:
        """Export a batch of finished spans."""

    def shutdown(self) -> Any:
        """Release the exporter's resources."""


@dataclass
class SessionTracerConfig:
    """Settings of the per-sample session lifecycle tracer.

    Attributes:
        enabled: write one JSON line per finished session to
            ``sessions-r{rank}.jsonl`` in ``output_dir``.
        flush_threshold: number of finished sessions buffered before a write.
        max_pending: pending sessions kept; past it the oldest are written as
            ``pending``, reason ``evicted`` (counted in ``stats()["evicted"]``).
        output_dir: where the session records go instead: a directory
            relative to the configuration's ``output_dir`` (or absolute;
            ``{run_id}`` is substituted). ``None`` (the default): ``output_dir``
            itself. AReaL's layout keeps them apart from the trace files
            (``session_tracer/`` beside ``perf_tracer/``).
        ids: ``"unique"`` (the default) gives ``"<rank>-<pid hex><16 random
            hex>-<n>"``, unique across the run; ``"sequential"`` gives the
            per-process count alone (``"1"``, ``"2"``, ...), unique only
            within one process (and its ``sessions-r{rank}.jsonl``), as AReaL's
            session ids are, and numeric for tools that read them as numbers
            (AReaL's ``plot_session_trace``).

    Example:
        >>> SessionTracerConfig(enabled=True, flush_threshold=50).flush_threshold
        50
    """

    enabled: bool = False
    flush_threshold: int = 100
    output_dir: str | None = None
    ids: str = "unique"
    max_pending: int = 100_000

    def __post_init__(self) -> None:
        if self.ids not in ("unique", "sequential"):
            raise ConfigurationError(
                f"session_tracer.ids: {self.ids!r} is not accepted; accepted: unique, sequential"
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> SessionTracerConfig:
        """Build from a mapping such as the ``session_tracer:`` YAML block.

        Raises:
            ConfigurationError: an unknown key or a bad value; the message names
                the key, the value and what is accepted.

        Example:
            >>> SessionTracerConfig.from_mapping({"enabled": True}).enabled
            True
        """
        _check_keys(mapping, cls, "session_tracer")
        return cls(
            **{
                k: v
                if (k == "output_dir" and v is None) or k == "ids"
                else coerce_field(f"session_tracer.{k}", k, v)
                for k, v in mapping.items()
            }
        )


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
    max_queue_size: int = 8192
    max_export_batch_size: int = 512
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
        _check_keys(mapping, cls, "telemetry")
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
        _warn_unknown_vars(env)
        config = _copy_of(base) if base is not None else cls()
        updates: dict[str, Any] = {}
        sources: dict[str, str] = {}  # field -> the variable that set it
        for var, key in ENV_VARS.items():
            raw = _env_value(env, var)
            if raw is None and key in _OTEL_FALLBACKS:
                var = _OTEL_FALLBACKS[key]
                raw = _env_value(env, var)
            if raw is None:
                continue
            if key.startswith("session_tracer."):
                continue  # handled below, as one nested value
            updates[key] = _parse_env(var, key, raw)
            sources[key] = var
        ignored: list[str] = []
        if "exporters" not in updates:
            otel, ignored = _otel_exporters(env)
            if otel is not None:
                updates["exporters"] = otel
        session = _session_from_env(env, config.session_tracer)
        if session is not None:
            updates["session_tracer"] = session
        config = dataclasses.replace(config, **updates)
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


DEFAULT_QUEUE_SIZE: Final[int] = TelemetryConfig.max_queue_size
DEFAULT_BATCH_SIZE: Final[int] = TelemetryConfig.max_export_batch_size

ENV_VARS: dict[str, str] = {
    "ASYNCTRACE_ENABLED": "enabled",
    "ASYNCTRACE_SPAN_GROUPS": "span_groups",
    "ASYNCTRACE_EXPORTERS": "exporters",
    "ASYNCTRACE_OUTPUT_DIR": "output_dir",
    "ASYNCTRACE_SERVICE_NAME": "service_name",
    "ASYNCTRACE_RUN_ID": "run_id",
    "ASYNCTRACE_RESOURCE_ATTRIBUTES": "resource_attributes",
    "ASYNCTRACE_HANDLE_SIGTERM": "handle_sigterm",
    "ASYNCTRACE_SESSION_TRACER_ENABLED": "session_tracer.enabled",
    "ASYNCTRACE_SESSION_TRACER_FLUSH_THRESHOLD": "session_tracer.flush_threshold",
    "ASYNCTRACE_SESSION_TRACER_MAX_PENDING": "session_tracer.max_pending",
    "ASYNCTRACE_MAX_QUEUE_SIZE": "max_queue_size",
    "ASYNCTRACE_MAX_EXPORT_BATCH_SIZE": "max_export_batch_size",
    "ASYNCTRACE_SCHEDULE_DELAY_MILLIS": "schedule_delay_millis",
    "ASYNCTRACE_SHUTDOWN_TIMEOUT_S": "shutdown_timeout_s",
    "ASYNCTRACE_PROVIDER": "provider",
    "ASYNCTRACE_SAMPLING_RATIO": "sampling_ratio",
    "ASYNCTRACE_PROPAGATE_SCOPES": "propagate_scopes",
    "ASYNCTRACE_LOOP_STALL_THRESHOLD_MS": "loop_stall_threshold_ms",
    "ASYNCTRACE_OTLP_PROTOCOL": "otlp_protocol",
    "ASYNCTRACE_EXPORT_RANKS": "export_ranks",
    "ASYNCTRACE_SAMPLE_RATE": "sample_rate",
    "ASYNCTRACE_RETRY_BUFFER_SPANS": "retry_buffer_spans",
    "ASYNCTRACE_RETRY_BUFFER_BYTES": "retry_buffer_bytes",
    "ASYNCTRACE_GOODPUT": "goodput",
}
"""Environment variable → field (``session_tracer.*`` are nested fields)."""

KNOWN_VARS: Final = frozenset(
    {
        *ENV_VARS,
        "ASYNCTRACE_STRICT",  # hot-path failures raise (asynctrace._errors)
        "ASYNCTRACE_DEBUG",  # the CLI prints tracebacks
        # asynctrace's own test and build sessions
        "ASYNCTRACE_FUZZ",
        "ASYNCTRACE_FUZZ_EXAMPLES",
        "ASYNCTRACE_FUZZ_REPORT",
        "ASYNCTRACE_FUZZ_SECONDS",
        "ASYNCTRACE_SOAK_SCALE",
        "ASYNCTRACE_TORCH_REQUIREMENT",
    }
)
"""Every ``ASYNCTRACE_*`` variable asynctrace reads; another one is a typo, warned about."""

_warned_vars: set[str] = set()


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


def _warn_unknown_vars(env: Mapping[str, Any]) -> None:
    """Warn once per variable about an ``ASYNCTRACE_*`` name asynctrace does not read.

    A misspelt ``ASYNCTRACE_ENABLED`` would otherwise leave telemetry off without a word.
    The warning is logged and issued as a ``UserWarning``; under
    ``-W error`` the raised warning is swallowed, so a typo never fails a run.
    """
    import difflib
    import logging

    for var in list(env):
        if not isinstance(var, str) or not var.startswith("ASYNCTRACE_"):
            continue
        if var in KNOWN_VARS or var in _warned_vars:
            continue
        _warned_vars.add(var)
        close = difflib.get_close_matches(var, sorted(KNOWN_VARS), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        message = f"asynctrace: ignoring unknown environment variable {var}{hint}"
        logging.getLogger("asynctrace").warning(message)
        try:
            warnings.warn(message, UserWarning, stacklevel=4)
        except UserWarning:
            pass  # warnings are errors here: the log line says it


_OTEL_FALLBACKS = {
    "max_queue_size": "OTEL_BSP_MAX_QUEUE_SIZE",
    "max_export_batch_size": "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "schedule_delay_millis": "OTEL_BSP_SCHEDULE_DELAY",
}


def _otel_exporters(env: Mapping[str, str]) -> tuple[list[str] | None, list[str]]:
    """The exporters the standard ``OTEL_TRACES_EXPORTER`` names (or ``None``), and the rest.

    Lenient, since the variable may be set for other tools: names asynctrace
    does not have (``jaeger``, ``zipkin``, ...) are returned to be ignored
    (with a warning when telemetry is on); ``none`` alone means no exporter;
    a value with no usable name leaves the exporters as they are.
    """
    raw = _env_value(env, "OTEL_TRACES_EXPORTER")
    if raw is None:
        return None, []
    names = [part.strip().lower() for part in raw.split(",") if part.strip()]
    known = [name for name in dict.fromkeys(names) if name in EXPORTER_NAMES]
    unknown = [name for name in names if name not in EXPORTER_NAMES and name != "none"]
    if known:
        return known, unknown
    return ([] if "none" in names else None), unknown


def otel_sdk_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard ``OTEL_SDK_DISABLED`` variable is ``true``."""
    env = os.environ if environ is None else environ
    raw = _env_value(env, "OTEL_SDK_DISABLED")
    return raw is not None and raw.lower() == "true"


def _env_value(env: Mapping[str, str], var: str) -> str | None:
    raw = env.get(var)
    if raw is not None and not isinstance(raw, str):
        raise ConfigurationError(
            f"{var}: {raw!r} is not accepted; accepted: a string (as environment variables are)"
        )
    if raw is None or not raw.strip():
        return None
    return raw.strip()


def _session_from_env(
    env: Mapping[str, str], current: SessionTracerConfig | Mapping[str, Any]
) -> SessionTracerConfig | None:
    enabled = _env_value(env, "ASYNCTRACE_SESSION_TRACER_ENABLED")
    threshold = _env_value(env, "ASYNCTRACE_SESSION_TRACER_FLUSH_THRESHOLD")
    max_pending = _env_value(env, "ASYNCTRACE_SESSION_TRACER_MAX_PENDING")
    if enabled is None and threshold is None and max_pending is None:
        return None
    session = _session_config(current, "session_tracer")
    if enabled is not None:
        session.enabled = _bool("ASYNCTRACE_SESSION_TRACER_ENABLED", enabled)
    if threshold is not None:
        session.flush_threshold = check_int(
            "ASYNCTRACE_SESSION_TRACER_FLUSH_THRESHOLD", threshold, 1
        )
    if max_pending is not None:
        session.max_pending = check_int("ASYNCTRACE_SESSION_TRACER_MAX_PENDING", max_pending, 1)
    return session


def _parse_env(var: str, key: str, raw: str) -> Any:
    if key == "exporters":
        return [] if raw.lower() == "none" else _exporter_list(var, raw)
    if key == "resource_attributes":
        return _parse_kv_list(var, raw)
    return coerce_field(var, key, raw)


def _parse_kv_list(var: str, raw: str) -> dict[str, str]:
    """``k=v,k2=v2`` (the ``OTEL_RESOURCE_ATTRIBUTES`` syntax, values URL-decoded)."""
    from urllib.parse import unquote

    out: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(
                f"{var}: malformed entry {item!r} in {raw!r}; accepted: comma-separated "
                "key=value pairs"
            )
        out[key.strip()] = unquote(value.strip())
    return out


# ---------------------------------------------------------------------------
# Field coercion, shared by from_mapping and from_env.


def _check_keys(mapping: Mapping[str, Any], cls: type, where: str) -> None:
    accepted = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in mapping if k not in accepted]
    if unknown:
        raise ConfigurationError(unknown_keys_message(where, unknown, accepted))


def unknown_keys_message(where: str, unknown: Sequence[Any], accepted: Sequence[str]) -> str:
    """``where: unknown key 'x'; accepted keys: ...``, with a "did you mean" for near misses.

    Example:
        >>> unknown_keys_message("telemetry", ["enabeld"], ["enabled", "run_id"])
        "telemetry: unknown key 'enabeld'; accepted keys: enabled, run_id; did you mean 'enabled'?"
    """
    return (
        f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
        f"{', '.join(repr(k) for k in unknown)}; accepted keys: {', '.join(accepted)}"
        f"{did_you_mean(unknown, accepted)}"
    )


def did_you_mean(unknown: Sequence[Any], accepted: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the unknown keys close to an accepted one, else ``""``.

    With several unknown keys, each suggestion names the key it is for.
    """
    import difflib

    hints: list[tuple[Any, str]] = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), list(accepted), n=1)
        if close:
            hints.append((key, close[0]))
    if not hints:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {hints[0][1]!r}?"
    return "; did you mean " + ", ".join(f"{good!r} for {bad!r}" for bad, good in hints) + "?"


def coerce_field(key: str, name: str, value: Any) -> Any:
    """Check one field's value; strings are accepted for booleans and numbers."""
    if name in ("enabled", "handle_sigterm", "propagate_scopes"):
        return _bool(key, value)
    if name in (
        "max_queue_size",
        "max_export_batch_size",
        "flush_threshold",
        "max_pending",
        "retry_buffer_spans",
        "retry_buffer_bytes",
    ):
        return check_int(key, value, 1)
    if name in ("schedule_delay_millis",):
        return _schedule_delay(key, value)
    if name in ("shutdown_timeout_s",):
        return _at_most(key, check_number(key, value, 0.0, strict=False), MAX_WAIT_S, ">= 0")
    if name == "exporters":
        return _exporter_list(key, value)
    if name == "session_tracer":
        return _session_config(value, key)
    if name == "resource_attributes":
        return _attributes(key, value)
    if name == "span_groups":
        split_spec(value, key)
        return value if isinstance(value, str) else ",".join(value)
    if name == "output_dir":
        return _path(key, value)
    if name == "provider":
        return None if value is None else _provider(key, value)
    if name == "otlp_protocol":
        from ._protocol import check_protocol

        return None if value is None else check_protocol(key, value)
    if name == "export_ranks":
        from ._ranks import parse_export_ranks

        return parse_export_ranks(key, value)
    if name in ("sampling_ratio", "sample_rate"):
        if value is None:
            return None
        try:
            number = check_number(key, value, 0.0, strict=False)
        except ConfigurationError:
            number = -1.0
        if not 0.0 <= number <= 1.0:
            raise ConfigurationError(
                f"{key}: {value!r} is not accepted; accepted: a number in [0, 1], or null"
            )
        return number
    if name == "span_limits":
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"{key}: expected a mapping of limit names to integers, got {value!r}"
            )
        from ._fast._limits import FIELDS

        unknown = [k for k in value if k not in FIELDS]
        if unknown:
            raise ConfigurationError(unknown_keys_message(key, unknown[:1], FIELDS))
        return dict(value)
    if name == "loop_stall_threshold_ms":
        return _stall_threshold(key, value)
    if name == "goodput":
        from ._goodput_settings import GoodputSettings

        try:
            return GoodputSettings.parse(key, value)
        except OverflowError:  # an int past a float's range (10**400) in a number key
            raise ConfigurationError(
                f"{key}: {value!r} holds a number out of range; accepted: finite numbers "
                "(see the goodput keys)"
            ) from None
    if name == "profiler":
        from ._profiling import ProfilerSettings

        if isinstance(value, Mapping):
            from ._profiling import _KEYS

            unknown = sorted(str(k) for k in value if k not in _KEYS)
            if unknown:
                raise ConfigurationError(
                    f"{key}.{unknown[0]}: unknown key; accepted: {', '.join(_KEYS)}"
                    f"{did_you_mean(unknown[:1], _KEYS)}"
                )
        return None if value is None else ProfilerSettings.parse(key, value)
    if name in ("service_name", "run_id"):
        if not isinstance(value, str):
            raise ConfigurationError(f"{key}: expected a string, got {value!r}")
        return value.strip()
    raise ConfigurationError(f"{key}: unknown key")  # pragma: no cover - guarded by _check_keys


def check_batch_fits(
    batch: Any, queue: Any, batch_from: str | None, queue_from: str | None
) -> None:
    """Refuse an export batch larger than the queue, naming what was set.

    *batch_from* and *queue_from* name the key or variable that set each
    value; ``None``: it was not set there (the default, or a base
    configuration's). When only the queue size was set, the message is about
    the queue size.

    Raises:
        ConfigurationError: ``batch > queue``.
    """
    if not isinstance(batch, int) or not isinstance(queue, int) or batch <= queue:
        return
    if batch_from is None and queue_from is not None:
        raise ConfigurationError(
            f"{queue_from}: {queue} is not accepted: it is below the export batch size, "
            f"max_export_batch_size ({_origin(batch, None, DEFAULT_BATCH_SIZE)}); accepted: "
            f"an integer >= {batch}, or a max_export_batch_size <= {queue} set too"
        )
    raise ConfigurationError(
        f"{batch_from or 'max_export_batch_size'}: {batch} is not accepted; accepted: an "
        f"integer between 1 and max_queue_size ({_origin(queue, queue_from, DEFAULT_QUEUE_SIZE)})"
    )


def _origin(value: int, source: str | None, default: int) -> str:
    """``"100, set by VAR"``, ``"512, the default"`` or ``"100"``."""
    if source is not None and source.isupper():  # a variable
        return f"{value}, set by {source}"
    if source is None and value == default:
        return f"{value}, the default"
    return str(value)


MAX_WAIT_S: Final = threading.TIMEOUT_MAX / 2
"""The longest wait a timeout may ask for: longer ones raise ``OverflowError`` in a thread."""


def _at_most(key: str, number: float, most: float, bound: str) -> float:
    """*number* if it is at most *most*: a thread could not wait that long."""
    if number <= most:
        return number
    raise ConfigurationError(
        f"{key}: {number!r} is not accepted; accepted: a finite number {bound} and "
        f"<= {most:.6g} (the longest wait a thread can make)"
    )


MIN_SCHEDULE_DELAY_MS: Final = 1.0
"""The shortest ``schedule_delay_millis``: below it an idle export thread would spin."""


def _schedule_delay(key: str, value: Any) -> float:
    """Milliseconds from :data:`MIN_SCHEDULE_DELAY_MS` to the longest wait a thread can make."""
    try:
        number = check_number(key, value, 0.0, strict=True)
    except ConfigurationError:
        number = -1.0
    if number < MIN_SCHEDULE_DELAY_MS:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: a finite number of milliseconds "
            f">= {MIN_SCHEDULE_DELAY_MS:g} (the floor: a shorter delay keeps an idle export "
            f"thread polling) and <= {MAX_WAIT_S * 1000.0:.6g} (default 1000)"
        )
    return _at_most(key, number, MAX_WAIT_S * 1000.0, f">= {MIN_SCHEDULE_DELAY_MS:g}")


def _stall_threshold(key: str, value: Any) -> float:
    """Milliseconds in [1, 60000]: below 1 ms the heartbeat would cost the loop, and a
    value in seconds (``0.05``) is refused rather than read as 50 µs."""
    try:
        number = check_number(key, value, 0.0, strict=True)
    except ConfigurationError:
        number = -1.0
    if not 1.0 <= number <= 60_000.0:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: a number of milliseconds "
            "from 1 to 60000 (default 50)"
        )
    return number


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigurationError(
        f"{key}: {value!r} is not a boolean; accepted: true/false "
        "(or 1/0, yes/no, on/off as strings)"
    )


def check_int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: an integer >= {minimum}"
        )
    return value


def is_finite(value: Any) -> bool:
    """Whether *value* is an int or float (not a bool) that a float holds, finite.

    ``math.isfinite`` raises ``OverflowError`` for an int past a float's range
    (``10**400``); that is a value out of range here, as infinity is.

    Example:
        >>> is_finite(10**400), is_finite(1.5), is_finite(True)
        (False, True, False)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_number(key: str, value: Any, minimum: float, *, strict: bool) -> float:
    """*value* (a number, or a string of one) as a finite float above *minimum*.

    Raises:
        ConfigurationError: naming *key*, the value and what is accepted (never
            ``OverflowError``, whatever the value).
    """
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            pass
    if is_finite(value) and (value > minimum if strict else value >= minimum):
        return float(value)
    bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
    raise ConfigurationError(
        f"{key}: {value!r} is not accepted; accepted: a finite number {bound}"
    )


def _exporter_list(key: str, value: Any) -> list[str | SpanExporterLike]:
    items: list[Any]
    if isinstance(value, str):
        items = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, (bytes, bytearray, memoryview)):  # a Sequence, of numbers
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted (bytes: decode them); accepted: a list of "
            f"exporter names ({', '.join(EXPORTER_NAMES)}) and SpanExporter objects, or a "
            "comma-separated string"
        )
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise ConfigurationError(
            f"{key}: expected a list of exporter names or a comma-separated string, got {value!r}"
        )
    out: list[str | SpanExporterLike] = []
    for item in items:
        if isinstance(item, str):
            name = item.strip().lower()
            if name not in EXPORTER_NAMES:
                raise ConfigurationError(
                    f"{key}: unknown exporter {item!r}; accepted: {', '.join(EXPORTER_NAMES)} "
                    "(or an object with the SpanExporter interface)"
                )
            if name not in out:
                out.append(name)
        elif isinstance(item, type):
            raise ConfigurationError(
                f"{key}: the class {item.__qualname__} is not accepted (pass an instance, "
                f"e.g. {item.__name__}()); accepted: {', '.join(EXPORTER_NAMES)} or an "
                "exporter object with export() and shutdown()"
            )
        elif isinstance(item, SpanExporterLike):
            out.append(item)
        else:
            raise ConfigurationError(
                f"{key}: {item!r} is neither an exporter name nor a SpanExporter; accepted: "
                f"{', '.join(EXPORTER_NAMES)} or an object with export() and shutdown()"
            )
    return out


def _session_config(value: Any, key: str) -> SessionTracerConfig:
    if isinstance(value, SessionTracerConfig):
        return SessionTracerConfig(
            enabled=_bool(f"{key}.enabled", value.enabled),
            flush_threshold=check_int(f"{key}.flush_threshold", value.flush_threshold, 1),
            output_dir=(
                None if value.output_dir is None else _path(f"{key}.output_dir", value.output_dir)
            ),
            ids=value.ids,
            max_pending=check_int(f"{key}.max_pending", value.max_pending, 1),
        )
    if isinstance(value, Mapping):
        return SessionTracerConfig.from_mapping(value)
    raise ConfigurationError(
        f"{key}: expected a SessionTracerConfig or a mapping with keys enabled, "
        f"flush_threshold, output_dir, ids, max_pending; got {value!r}"
    )


_SCALARS = (str, bool, int, float)


def _scalar_kind(value: Any) -> type | None:
    """The attribute type of *value* (``bool`` before ``int``), or ``None``: not one."""
    for kind in (bool, str, int, float):
        if isinstance(value, kind):
            return kind
    return None


def _attributes(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: a mapping of attribute names to "
            "values (str, bool, int, float, or lists of one of these)"
        )
    out: dict[str, Any] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"{key}: attribute names must be non-empty strings: {name!r}")
        if isinstance(item, _SCALARS):
            out[name] = item
        elif (
            isinstance(item, Sequence)
            and not isinstance(item, (bytes, bytearray, memoryview))
            and len({_scalar_kind(v) for v in item} | {None}) <= 2
            and None not in {_scalar_kind(v) for v in item}
        ):
            out[name] = tuple(item)
        else:
            raise ConfigurationError(
                f"{key}.{name}: {item!r} is not accepted; accepted: str, bool, int, float "
                "or a list of values of one of these types (bytes are not: decode them)"
            )
    return out


def _provider(key: str, value: Any) -> Any:
    """``"fast"``, ``"sdk"``, or an SDK ``TracerProvider`` object."""
    if isinstance(value, str):
        name = value.strip().lower()
        if name in PROVIDER_NAMES:
            return name
    elif isinstance(value, type):
        raise ConfigurationError(
            f"{key}: the class {value.__qualname__} is not accepted (pass an instance, "
            f"e.g. {value.__name__}()); accepted: {', '.join(PROVIDER_NAMES)}, or an "
            "OpenTelemetry SDK TracerProvider object"
        )
    elif (
        callable(getattr(value, "add_span_processor", None))
        and callable(getattr(value, "get_tracer", None))
        and isinstance(getattr(getattr(value, "resource", None), "attributes", None), Mapping)
    ):
        if type(value).__module__.startswith("opentelemetry.sdk"):
            return value
        if not type(value).__module__.startswith("asynctrace"):
            return value  # an SDK TracerProvider subclass of the user's
    raise ConfigurationError(
        f"{key}: {value!r} is not accepted; accepted: {', '.join(PROVIDER_NAMES)}, or an "
        "OpenTelemetry SDK TracerProvider object"
    )


def _path(key: str, value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{key}: expected a non-empty directory path, got {value!r}")
    if "\x00" in value:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted (it holds a NUL character); accepted: a "
            "directory path"
        )
    return value
