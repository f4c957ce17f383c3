"""nemo-lens's names on asynctrace: porting a lens script is an import change.

``from nemo.lens import ...`` (and ``from nemo.lens.contrib.ray import ...``)
becomes ``from asynctrace_contrib.nemo_lens import ...``; the calls stay as
they are. The spans are asynctrace's: gated by the same group switch,
bucketed by the group's goodput bucket, stamped with the scopes, exported by
:func:`asynctrace.configure`'s pipeline, and read by ``asynctrace goodput``
and ``report``.

Importing this module registers lens's base groups that asynctrace does not
already have (``forward_backward``, ``optimizer``, ``load_checkpoint``) under
the namespace ``nemo_lens``, so the spans a lens script asks for under them
are recorded instead of vanishing. What differs from lens, and why, is on the
"Coming from nemo-lens" page of the documentation; in short:

* a disabled ``managed_span`` yields a shared non-recording span, not
  ``None`` (setting attributes on it is safe);
* ``trace_fn`` on an ``async def`` times the awaited body, where lens's ends
  its span when the coroutine object is created;
* a value under a listed key (:data:`DEFAULT_REDACT_KEYS`, matched
  case-insensitively by the key's trailing words: ``OPENAI_API_KEY``) is
  recorded as ``"[REDACTED]"`` whatever its type, a list or a number too;
* the Ray keyword ``_otel_carrier`` is understood by
  :func:`asynctrace.accepts_trace_context`, so actors ported and actors still
  on lens interoperate during a rollout.

Example:
    >>> from asynctrace_contrib.nemo_lens import SpanGroup, managed_span
    >>> with managed_span(SpanGroup.OPTIMIZER, "rl.policy.optimizer_step", lr=1e-5):
    ...     pass
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib.util
import inspect
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final, TypeAlias, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

import asynctrace

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "ExportStrategy",
    "NemoLensConfig",
    "SpanGroup",
    "TelemetryHandle",
    "create_linked_span",
    "extract_context",
    "extract_ray_context",
    "get_meter",
    "get_tracer",
    "inject_context",
    "inject_ray_context",
    "is_span_group_enabled",
    "managed_span",
    "ray_dispatch_with_context",
    "redact_value",
    "register_export_strategy",
    "registered_strategies",
    "safe_set_span_attributes",
    "set_enabled_span_groups",
    "setup_telemetry",
    "span_cm",
    "trace_fn",
    "traced_remote_call",
    "unregister_export_strategy",
]

F = TypeVar("F", bound=Callable[..., Any])

NAMESPACE: Final = "nemo_lens"
"""The namespace lens's extra groups (and names lens code enables) are registered under."""

_LOG = logging.getLogger(__name__)

asynctrace.register_span_groups(
    NAMESPACE,
    [
        asynctrace.SpanGroup(
            "forward_backward", asynctrace.Bucket.PRODUCTIVE, description="forward and backward"
        ),
        asynctrace.SpanGroup(
            "optimizer", asynctrace.Bucket.PRODUCTIVE, description="the optimizer step"
        ),
        asynctrace.SpanGroup(
            "load_checkpoint", asynctrace.Bucket.OVERHEAD, description="loading a checkpoint"
        ),
    ],
)


class SpanGroup:
    """lens's group names, as constants; every one is registered with asynctrace.

    ``SpanGroup.resolve(spec)`` resolves a spec against the class's own
    ``ALL_GROUPS`` and ``_PRESETS`` (as lens does, so a lens library's
    subclass declares its groups the lens way) and against asynctrace's
    registry (so groups other libraries registered count too). A preset both
    know gives the union. An unknown name raises
    :class:`asynctrace.ConfigurationError` (a ``ValueError``, as lens raises).
    :func:`setup_telemetry` registers a subclass's groups with asynctrace
    (unbucketed), so their spans are recorded.

    Example:
        >>> SpanGroup.FORWARD_BACKWARD
        'forward_backward'
        >>> sorted(SpanGroup.resolve("job,optimizer"))
        ['job', 'optimizer']
    """

    JOB = "job"
    CHECKPOINT = "checkpoint"
    EVALUATE = "evaluate"
    MODEL_INIT = "model_init"
    LOAD_CHECKPOINT = "load_checkpoint"
    STEP = "step"
    FORWARD_BACKWARD = "forward_backward"
    OPTIMIZER = "optimizer"

    ALL_GROUPS: ClassVar[frozenset[str]] = frozenset(
        [JOB, CHECKPOINT, EVALUATE, MODEL_INIT, LOAD_CHECKPOINT, STEP, FORWARD_BACKWARD, OPTIMIZER]
    )
    # lens's presets, by the same name (asynctrace's presets of these names are supersets).
    _PRESETS: ClassVar[dict[str, frozenset[str]]] = {
        "default": frozenset([JOB, CHECKPOINT, EVALUATE]),
        "per_step": ALL_GROUPS,
        "all": ALL_GROUPS,
    }

    @classmethod
    def resolve(cls, spec: str) -> frozenset[str]:
        """The group names *spec* turns on (presets and bare names, case-insensitive)."""
        names: set[str] = set()
        rest: list[str] = []
        known_presets = asynctrace.registered_presets()
        for token in (part.strip().lower() for part in spec.split(",")):
            if not token:
                continue
            if token in cls._PRESETS:
                names |= cls._PRESETS[token]
                if token in known_presets:
                    names |= known_presets[token]
            elif token in cls.ALL_GROUPS:
                names.add(token)
            else:
                rest.append(token)
        if rest:
            joined = ",".join(rest)
            try:
                names |= asynctrace.resolve_span_groups(joined)
            except asynctrace.ConfigurationError as exc:
                # asynctrace saw only the names left over: quote the spec as written.
                text = str(exc)
                quoted = f" in {joined!r}; "
                if quoted not in text:
                    raise
                raise asynctrace.ConfigurationError(
                    text.replace(quoted, f" in {spec!r}; ", 1)
                ) from None
        return frozenset(names)


def _register_names(names: frozenset[str] | set[str], origin: str) -> None:
    """Register the *names* asynctrace does not know yet, as unbucketed groups.

    lens has no buckets and no registry: a name is a group when its class (or
    ``set_enabled_span_groups``) says so. Registering it (under ``nemo_lens``)
    makes asynctrace record its spans; a name already registered, or a
    preset, keeps its definition.
    """
    registered = asynctrace.registered_span_groups()
    presets = asynctrace.registered_presets()
    new = sorted(n for n in names if n not in registered and n not in presets)
    if new:
        asynctrace.register_span_groups(
            NAMESPACE,
            [asynctrace.SpanGroup(n, None, description=f"enabled through {origin}") for n in new],
        )


_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})
_BOOL_FIELDS: Final = (
    "enabled",
    "sampler_enabled",
    "traces_enabled",
    "metrics_enabled",
    "logs_enabled",
)
_TEXT_FIELDS: Final = (
    "service_name",
    "export_strategy",
    "span_groups",
    "exporter",
    "run_id",
    "user",
    "wandb_entity",
    "wandb_project",
)
# The names from_env reads after ``{prefix}_``.
_ENV_KEYS: Final = (
    "ENABLED",
    "EXPORT_STRATEGY",
    "EXPORT_RANK",
    "EXPORT_SAMPLE_RATE",
    "SAMPLER_ENABLED",
    "TRACES_ENABLED",
    "METRICS_ENABLED",
    "LOGS_ENABLED",
    "SPAN_GROUPS",
    "EXPORTER",
    "RUN_ID",
    "USER_ID",
)
_warned: set[tuple[str, ...]] = set()  # what was warned about once already


def _boolean(key: str, value: object) -> bool:
    """*value* as a bool: a bool, or ``1``/``0``, ``true``/``false``, ``yes``/``no``,
    ``on``/``off`` as a string (any case), as asynctrace reads its own booleans.

    Raises:
        asynctrace.ConfigurationError: anything else, naming *key*.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise asynctrace.ConfigurationError(
        f"{key}: {value!r} is not a boolean; accepted: true/false "
        "(or 1/0, yes/no, on/off as strings)"
    )


def _text(key: str, value: object) -> str:
    """*value*, checked to be a string.

    Raises:
        asynctrace.ConfigurationError: not a string, naming *key*.
    """
    if not isinstance(value, str):
        raise asynctrace.ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: a string"
        )
    return value


def _export_rank(value: object) -> int:
    """``export_rank`` as an int (a string of one too): a rank, or -1 for the last one.

    Raises:
        asynctrace.ConfigurationError: not an integer >= -1.
    """
    number = value
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < -1:
        raise asynctrace.ConfigurationError(
            f"export_rank: {value!r} is not accepted; accepted: an integer >= 0 (the rank "
            "that exports with export_strategy single_rank), or -1: the last rank"
        )
    return number


def _sample_rate(value: object) -> float:
    """``export_sample_rate`` as a float (a string of one too), from 0.0 to 1.0.

    Raises:
        asynctrace.ConfigurationError: anything else (``nan`` too).
    """
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if (
        isinstance(number, bool)
        or not isinstance(number, int | float)
        or not 0.0 <= number <= 1.0  # false for nan
    ):
        raise asynctrace.ConfigurationError(
            f"export_sample_rate: {value!r} is not accepted; accepted: a number from 0.0 "
            "to 1.0 (the fraction of ranks that export with export_strategy sampled)"
        )
    return float(number)


def _warn_once(key: tuple[str, ...], message: str) -> None:
    """Log *message* as a warning, once per process for *key*."""
    if key not in _warned:
        _warned.add(key)
        _LOG.warning(message)


def _warn_unknown_variables(prefixes: Collection[str]) -> None:
    """Warn once about each ``{prefix}_*`` variable :meth:`NemoLensConfig.from_env` does
    not read, with the closest name it does read: a typo otherwise changes nothing."""
    for prefix in prefixes:
        known = [f"{prefix}_{key}" for key in _ENV_KEYS]
        for name in sorted(os.environ):
            if not name.startswith(f"{prefix}_") or name in known:
                continue
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            _warn_once(
                ("variable", name),
                f"NemoLensConfig.from_env: ignoring {name}, which it does not read{hint}",
            )


@dataclass
class NemoLensConfig:
    """lens's configuration, field for field; :func:`setup_telemetry` maps it.

    ``span_groups`` is resolved by asynctrace (its ``default``, ``per_step`` and
    ``all`` presets). ``exporter`` is ``"otlp"`` or ``"console"``; the standard
    ``OTEL_EXPORTER_OTLP_*`` variables configure OTLP as they do under lens.
    ``export_strategy`` / ``export_rank`` / ``export_sample_rate`` decide, as in
    lens, whether this rank exports; a rank that does not gets telemetry off.
    The metrics, logs and W&B fields are kept so a lens config loads, and are
    not used. Every field is checked when the config is made and again by
    :func:`setup_telemetry`: a boolean may also be ``"true"``/``"false"``,
    ``"1"``/``"0"``, ``"yes"``/``"no"``, ``"on"``/``"off"`` (a quoted YAML
    value), ``export_rank`` and ``export_sample_rate`` a string of a number.

    Raises:
        asynctrace.ConfigurationError: a field of the wrong kind or out of
            range (a ``ValueError``), naming the field, its value and what is
            accepted.

    Example:
        >>> NemoLensConfig(enabled=True, span_groups="per_step").exporter
        'otlp'
    """

    enabled: bool = False
    service_name: str = "nemo"
    export_strategy: str = "single_rank"
    export_rank: int = -1
    export_sample_rate: float = 1.0
    sampler_enabled: bool = False
    traces_enabled: bool = True
    metrics_enabled: bool = True
    logs_enabled: bool = False
    span_groups: str = "default"
    exporter: str = "otlp"
    run_id: str = ""
    user: str = ""
    wandb_entity: str = ""
    wandb_project: str = ""
    _span_group_cls: type | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Check every field, turning ``"false"``/``"0.5"`` (quoted YAML) into their values.

        Raises:
            asynctrace.ConfigurationError: naming the field, its value and what
                is accepted (a ``ValueError``, as lens raises).
        """
        for name in _BOOL_FIELDS:
            setattr(self, name, _boolean(name, getattr(self, name)))
        for name in _TEXT_FIELDS:
            _text(name, getattr(self, name))
        self.export_rank = _export_rank(self.export_rank)
        self.export_sample_rate = _sample_rate(self.export_sample_rate)

    @property
    def resolved_span_groups(self) -> frozenset[str]:
        """:attr:`span_groups` resolved to group names, through ``span_group_cls`` as in lens."""
        return self._span_groups_class().resolve(self.span_groups)

    def _span_groups_class(self) -> type[SpanGroup]:
        cls = self._span_group_cls
        if cls is None:
            return SpanGroup
        if not (isinstance(cls, type) and issubclass(cls, SpanGroup)):
            raise TypeError(
                f"span_group_cls: {cls!r} is not a subclass of "
                "asynctrace_contrib.nemo_lens.SpanGroup (subclass the ported SpanGroup, "
                "not nemo.lens's)"
            )
        return cls

    @classmethod
    def from_env(
        cls,
        prefix: str = "NEMO_LENS",
        fallback_prefix: str | None = None,
        span_group_cls: type | None = None,
    ) -> NemoLensConfig:
        """Read ``{prefix}_*`` (then ``{fallback_prefix}_*``) variables, as lens does.

        The variables are lens's: ``ENABLED``, ``EXPORT_STRATEGY``,
        ``EXPORT_RANK``, ``EXPORT_SAMPLE_RATE``, ``SAMPLER_ENABLED``,
        ``TRACES_ENABLED``, ``METRICS_ENABLED``, ``LOGS_ENABLED``,
        ``SPAN_GROUPS``, ``EXPORTER``, ``RUN_ID``, ``USER_ID``; plus
        ``OTEL_SERVICE_NAME``, ``WANDB_ENTITY`` and ``WANDB_PROJECT``. Any
        other ``{prefix}_*`` variable (``NEMO_LENS_ENABLE``) is logged once as a
        warning naming the closest one read.

        Raises:
            ValueError: a boolean, integer or float variable that does not parse,
                or a value out of range.

        Example:
            >>> NemoLensConfig.from_env(prefix="NO_SUCH_PREFIX").enabled
            False
        """

        _warn_unknown_variables([p for p in (prefix, fallback_prefix) if p])

        def env(key: str, default: str = "") -> str:
            value = os.environ.get(f"{prefix}_{key}", "").strip()
            if not value and fallback_prefix:
                value = os.environ.get(f"{fallback_prefix}_{key}", "").strip()
            return value or default

        def boolean(key: str, default: bool) -> bool:
            value = env(key).lower()
            if not value:
                return default
            if value in ("1", "true", "yes", "on"):
                return True
            if value in ("0", "false", "no", "off"):
                return False
            raise ValueError(
                f"Invalid boolean for {prefix}_{key}: {value!r}. "
                "Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'."
            )

        def number(key: str, default: Any, kind: type) -> Any:
            value = env(key)
            if not value:
                return default
            try:
                return kind(value)
            except ValueError as exc:
                raise ValueError(
                    f"Invalid {kind.__name__} for {prefix}_{key}: {value!r}."
                ) from exc

        return cls(
            enabled=boolean("ENABLED", False),
            service_name=os.environ.get("OTEL_SERVICE_NAME", "").strip() or "nemo",
            export_strategy=env("EXPORT_STRATEGY", "single_rank"),
            export_rank=number("EXPORT_RANK", -1, int),
            export_sample_rate=number("EXPORT_SAMPLE_RATE", 1.0, float),
            sampler_enabled=boolean("SAMPLER_ENABLED", False),
            traces_enabled=boolean("TRACES_ENABLED", True),
            metrics_enabled=boolean("METRICS_ENABLED", True),
            logs_enabled=boolean("LOGS_ENABLED", False),
            span_groups=env("SPAN_GROUPS", "default"),
            exporter=env("EXPORTER", "otlp"),
            run_id=env("RUN_ID", ""),
            user=env("USER_ID", ""),
            wandb_entity=os.environ.get("WANDB_ENTITY", ""),
            wandb_project=os.environ.get("WANDB_PROJECT", ""),
            _span_group_cls=span_group_cls,
        )


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


ExportStrategy: TypeAlias = Callable[[NemoLensConfig, int, int], bool]
"""An export strategy: ``(config, rank, world_size) -> bool``, whether this rank exports."""


def _all_ranks(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """lens's ``all_ranks``: every rank exports."""
    return True


def _single_rank(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """lens's ``single_rank``: ``export_rank`` exports (``-1``: the last rank)."""
    target = config.export_rank if config.export_rank >= 0 else world_size - 1
    if target >= world_size:  # lens exports nowhere then, silently
        _warn_once(
            ("export_rank", str(target), str(world_size)),
            f"setup_telemetry: export_rank {target} names no rank of this job "
            f"(world_size={world_size}), so no rank exports; accepted: a rank below "
            "world_size, or -1: the last rank",
        )
    return rank == target


def _sampled(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """lens's deterministic hash: same rank and rate, same outcome."""
    digest = hashlib.md5(str(rank).encode(), usedforsecurity=False).hexdigest()
    return (int(digest, 16) % 10000) / 10000.0 < config.export_sample_rate


def _first_rank_per_node(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """lens's ``first_rank_per_node``: ``LOCAL_RANK`` 0 (or not known) exports."""
    return _local_rank() in (None, 0)


BUILTIN_STRATEGIES: Final = frozenset(
    {"all_ranks", "single_rank", "sampled", "first_rank_per_node"}
)
"""lens's four built-in export strategies: never unregistered, replaced only with
``allow_override=True``."""

_STRATEGIES: dict[str, ExportStrategy] = {
    "all_ranks": _all_ranks,
    "single_rank": _single_rank,
    "sampled": _sampled,
    "first_rank_per_node": _first_rank_per_node,
}
_STRATEGIES_LOCK = threading.Lock()


def _new_strategies_lock_in_child() -> None:
    """A lock another thread held at ``fork()`` would stay held in the child: a new one."""
    global _STRATEGIES_LOCK
    _STRATEGIES_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_strategies_lock_in_child)


def register_export_strategy(
    name: str, strategy: ExportStrategy, *, allow_override: bool = False
) -> None:
    """Register *strategy* under *name*, selectable as ``export_strategy=name`` (lens's).

    Raises:
        ValueError: *name* empty, or already registered without
            ``allow_override=True``.

    Example:
        >>> register_export_strategy("even_ranks", lambda config, rank, size: rank % 2 == 0)
        >>> "even_ranks" in registered_strategies()
        True
        >>> unregister_export_strategy("even_ranks")
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_export_strategy: name {name!r}; accepted: a non-empty string")
    with _STRATEGIES_LOCK:
        if name in _STRATEGIES and not allow_override:
            raise ValueError(
                f"Strategy {name!r} is already registered. Pass allow_override=True to replace it."
            )
        _STRATEGIES[name] = strategy


def unregister_export_strategy(name: str) -> None:
    """Remove the strategy registered under *name* (lens's).

    Raises:
        ValueError: *name* is a built-in strategy, or is not registered.
    """
    if name in BUILTIN_STRATEGIES:
        raise ValueError(f"Cannot unregister built-in strategy {name!r}.")
    with _STRATEGIES_LOCK:
        if name not in _STRATEGIES:
            raise ValueError(f"Strategy {name!r} is not registered.")
        del _STRATEGIES[name]


def registered_strategies() -> list[str]:
    """The registered strategy names, built-ins and custom, sorted (lens's).

    Example:
        >>> registered_strategies()
        ['all_ranks', 'first_rank_per_node', 'sampled', 'single_rank']
    """
    with _STRATEGIES_LOCK:
        return sorted(_STRATEGIES)


def _export_strategy(name: str) -> ExportStrategy:
    """The strategy registered under *name*.

    Raises:
        ValueError: no strategy is registered under *name*; the registered ones listed.
    """
    with _STRATEGIES_LOCK:
        strategy = _STRATEGIES.get(name)
        if strategy is None:
            raise ValueError(
                f"Unknown export strategy {name!r}; accepted: "
                f"{', '.join(sorted(_STRATEGIES))} (register_export_strategy adds one)"
            )
        return strategy


def _should_export(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """Whether this rank exports, by the strategy ``config.export_strategy`` names."""
    return bool(_export_strategy(config.export_strategy)(config, rank, world_size))


def _local_rank() -> int | None:
    """This process's ``LOCAL_RANK`` (``None``: unset, empty or ``-1``), as asynctrace reads it.

    Unset, empty and ``-1`` (which some launchers set outside a distributed
    run) mean not known: the process counts as the first of its node, as it
    does for asynctrace's ``local_first`` and, unset, for lens.

    Raises:
        asynctrace.ConfigurationError: a value that is not an integer, or one
            below ``-1``; naming the variable, the value and what is accepted.
    """
    raw = os.environ.get("LOCAL_RANK", "").strip()
    if not raw:
        return None
    value = int(raw) if re.fullmatch(r"[+-]?[0-9]+", raw) else None
    if value is None or value < -1:
        raise asynctrace.ConfigurationError(
            f"LOCAL_RANK: {raw!r} is not accepted by export_strategy first_rank_per_node; "
            "accepted: an integer >= 0 (as launchers set it), or -1 or empty: not known "
            "(the process counts as the first of its node)"
        )
    return None if value == -1 else value


# ASYNCTRACE_* variables the lens config decides instead (lens's own variables set them).
_LENS_DECIDES: Final = frozenset(
    {
        "ASYNCTRACE_ENABLED",
        "ASYNCTRACE_SPAN_GROUPS",
        "ASYNCTRACE_EXPORTERS",
        "ASYNCTRACE_SERVICE_NAME",
        "ASYNCTRACE_RUN_ID",
        "ASYNCTRACE_EXPORT_RANKS",
    }
)


def _environment_base() -> asynctrace.TelemetryConfig:
    """asynctrace's own settings from its ``ASYNCTRACE_*`` variables, except those the lens
    config decides (enabled, groups, exporters, service name, run id, export ranks).

    So ``ASYNCTRACE_PROPAGATE_SCOPES=1``, ``ASYNCTRACE_OTLP_PROTOCOL``,
    ``ASYNCTRACE_RESOURCE_ATTRIBUTES`` or the queue sizes apply to a ported
    script as they do to an asynctrace one.

    Raises:
        asynctrace.ConfigurationError: a malformed variable, naming it.
    """
    environ = {
        name: value
        for name, value in os.environ.items()
        if name.startswith("ASYNCTRACE_") and name not in _LENS_DECIDES
    }
    return asynctrace.TelemetryConfig.from_env(environ)


def _have_grpc_exporter() -> bool:
    """Whether OpenTelemetry's OTLP/gRPC trace exporter imports (lens tries the import and
    falls back to HTTP when it fails: a missing package, or a ``grpcio`` that will not
    load on this host)."""
    try:
        importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
    except Exception:  # ImportError, or whatever a broken grpcio raises as it loads
        return False
    return True


def _lens_resource(config: NemoLensConfig, rank: int, world_size: int) -> dict[str, Any]:
    """The resource attributes lens sets (its ``providers.py``), from *config*."""
    attributes: dict[str, Any] = {"dl.rank": rank, "dl.world_size": world_size}
    if config.run_id:
        attributes["nemo.run.id"] = config.run_id
        attributes["service.instance.id"] = f"{config.run_id}-rank{rank}"
    if config.user:
        attributes["nemo.user.id"] = config.user
    if config.wandb_entity:
        attributes["wandb.entity"] = config.wandb_entity
    if config.wandb_project:
        attributes["wandb.project"] = config.wandb_project
    environment = os.environ.get("DEPLOYMENT_ENV", os.environ.get("ENVIRONMENT", ""))
    if environment:
        attributes["deployment.environment"] = environment
    return attributes


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
        _export_strategy(config.export_strategy)  # lens looks it up, enabled or not
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
    decide = export_strategy if export_strategy is not None else _should_export
    exporting = bool(config.traces_enabled and decide(config, rank, world_size))
    if groups_class is not SpanGroup:  # a lens library's own groups: asynctrace records them
        _register_names(groups_class.ALL_GROUPS | groups, groups_class.__qualname__)
    if application is not None:
        _LOG.info(
            "setup_telemetry: asynctrace is already configured by the application; "
            "reusing it (the nemo-lens config's settings are not applied)"
        )
        return TelemetryHandle(application, application.enabled, owned=False)
    if not config.run_id:
        config.run_id = os.environ.get("SLURM_JOB_ID", "") or uuid.uuid4().hex[:12]
    base = _environment_base()
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
            **_lens_resource(config, rank, world_size),
            **(resource_attributes or {}),
        },
    }
    if base.otlp_protocol is None and _have_grpc_exporter():
        settings["otlp_protocol"] = "grpc"  # lens's default (OTEL_EXPORTER_OTLP_*PROTOCOL win)
    if propagate_scopes is not None:
        settings["propagate_scopes"] = _boolean("propagate_scopes", propagate_scopes)
    telemetry = asynctrace.configure(replace(base, **settings), rank=rank, world_size=world_size)
    _started = telemetry
    _initialized = True
    return TelemetryHandle(telemetry, exporting)


DEFAULT_REDACT_KEYS: frozenset[str] = frozenset(
    {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"}
)
"""Attributes under these keys are recorded as ``"[REDACTED]"``, whatever their type.

A key is listed when it, or its trailing words, is one of these, compared
case-insensitively with ``.``, ``_``, ``-`` and camelCase as word breaks:
``token``, ``access_token``, ``OPENAI_API_KEY``, ``apiKey`` and
``gen_ai.prompt`` are; ``max_tokens``, ``prompt_len`` and ``context`` are not.
"""

_REDACTED: Final = "[REDACTED]"  # what any value under a listed key becomes (lens's marker)

_SCALARS = (bool, int, float, str)


# Word breaks of an attribute key: any run of non-alphanumerics, and camelCase
# ("apiKey", "HTTPToken").
def _redacts(key: object, redact_keys: Collection[str]) -> bool:
    # OpenTelemetry drops a key that is not a str; a listed key's rule is asynctrace's,
    # and asynctrace's own credential names (authorization, cookie, passwd, ...) count too.
    return isinstance(key, str) and (
        asynctrace.is_credential_key(key, redact_keys) or asynctrace.is_credential_key(key)
    )


def _scrubbed_text(text: str) -> str:
    """*text* redacted as asynctrace redacts text when it holds a URL (its userinfo, a
    secret query value) or is an ``Authorization`` value (``Bearer ...``); any other text
    as it is: a value such as ``"max_new_tokens=64, temperature=0.7"`` is data."""
    if "://" in text or text[:7].lower() == "bearer " or text[:6].lower() == "basic ":
        return asynctrace.redact_text(text)
    return text


def _scrubbed(value: Any) -> Any:
    """*value* with credentials inside its text redacted (:func:`_scrubbed_text`); a
    list's strings each."""
    if isinstance(value, str):
        return _scrubbed_text(value)
    if isinstance(value, list | tuple):
        return [_scrubbed_text(v) if isinstance(v, str) else v for v in value]
    return value


def redact_value(key: str, value: str, redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS) -> str:
    """``"[REDACTED]"`` if *key* is listed, else *value* with its credentials redacted.

    Listed is :data:`DEFAULT_REDACT_KEYS`'s rule: the key or its trailing
    words, case-insensitively, in *redact_keys* or asynctrace's credential
    names (``authorization``, ``cookie``, ``passwd``, ``credentials``, ...).
    Another string holding a URL, or a ``Bearer``/``Basic`` value, goes
    through :func:`asynctrace.redact_text` (URL userinfo, a secret query
    value, the credential); any other text is recorded as it is.

    Example:
        >>> redact_value("prompt", "hello"), redact_value("OPENAI_API_KEY", "sk-1")
        ('[REDACTED]', '[REDACTED]')
        >>> redact_value("max_tokens", "8")
        '8'
    """
    if _redacts(key, redact_keys):
        return _REDACTED
    return _scrubbed_text(value) if isinstance(value, str) else value


def _clean(
    attributes: Mapping[str, Any], redact_keys: Collection[str] = DEFAULT_REDACT_KEYS
) -> dict[str, Any]:
    """lens's attribute rule: scalars and scalar lists, ``None`` skipped, keys redacted.

    A value under a listed key, or under one of asynctrace's credential names
    (:func:`asynctrace.is_credential_key`), is recorded as ``"[REDACTED]"``
    whatever its type: a batch of prompts or a numeric secret is as secret as
    one string. Other strings go through :func:`asynctrace.redact_text`.
    """
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if _redacts(key, redact_keys):
            out[key] = _REDACTED
        elif isinstance(value, _SCALARS) or (
            isinstance(value, list | tuple) and all(isinstance(v, _SCALARS) for v in value)
        ):
            out[key] = _scrubbed(value)
    return out


def safe_set_span_attributes(
    span: trace.Span,
    attributes: Mapping[str, Any],
    redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS,
) -> None:
    """Set *attributes* on *span*, skipping what OpenTelemetry cannot hold, redacting keys.

    ``None`` values are skipped, as are values that are neither a scalar
    nor a list or tuple of scalars. A non-``None`` value under a key listed
    in *redact_keys* (:data:`DEFAULT_REDACT_KEYS`'s rule) or under one of
    asynctrace's credential names is set as the string ``"[REDACTED]"``,
    whatever its type; other strings go through :func:`asynctrace.redact_text`.

    Example:
        >>> safe_set_span_attributes(trace.INVALID_SPAN, {"n": 1, "skip": None})
    """
    if not span.is_recording():
        return
    for key, value in _clean(attributes, redact_keys).items():
        span.set_attribute(key, value)


def managed_span(
    group: str, name: str, tracer: trace.Tracer | None = None, **attributes: Any
) -> contextlib.AbstractContextManager[trace.Span]:
    """A span of *group* around the block, with *attributes*; lens's signature.

    A leaf of a bucketed group gets its bucket, a span of an umbrella group
    (``job``, ``step``, ...) is an umbrella, exactly as
    :func:`asynctrace.managed_span`, which this returns. *tracer* is accepted
    and ignored: spans go through asynctrace's pipeline. Disabled, it yields
    asynctrace's shared non-recording span (lens yields ``None``).
    *attributes* are filtered and redacted as by :func:`safe_set_span_attributes`.

    An ``rl.bucket`` attribute (``**{"rl.bucket": "idle"}``, the only way a
    lens signature gives one) is the span's explicit bucket: it wins over the
    bucket scope and the group's bucket, as ``bucket=`` does for
    :func:`asynctrace.managed_span`. On an umbrella (or inside a per-prompt
    scope) it is dropped, as there. An ``rl.bucket`` that names no bucket
    (lens has none, so lens code may use the key for its own labels) is
    logged once and left out; the span is recorded with its group's bucket.

    Example:
        >>> with managed_span("forward_backward", "rl.policy.forward_backward", mb=4) as span:
        ...     span.set_attribute("rl.loss", 0.5)
    """
    bucket = None
    if _BUCKET_KEY in attributes:
        bucket = _bucket(attributes.pop(_BUCKET_KEY))
    return asynctrace.managed_span(
        group, name, attributes=_clean(attributes) if attributes else None, bucket=bucket
    )


_BUCKET_KEY: Final = "rl.bucket"


def _bucket(value: object) -> asynctrace.Bucket | None:
    """The bucket an ``rl.bucket`` attribute names; ``None`` for none, and for a value
    that names no bucket (logged once: a span call never raises for it, as the span
    helpers do not)."""
    if value is None or isinstance(value, asynctrace.Bucket):
        return value
    if isinstance(value, str):
        try:
            return asynctrace.Bucket(value.strip().lower())
        except ValueError:
            pass
    if not _unknown_bucket_told:
        _unknown_bucket_told.append(True)
        _LOG.warning(
            "asynctrace: managed_span: rl.bucket=%s names no bucket (accepted: %s); it is "
            "left out and the span keeps its group's bucket (told once)",
            asynctrace.redact_text(repr(value))[:80],
            ", ".join(b.value for b in asynctrace.Bucket),
        )
    return None


_unknown_bucket_told: list[bool] = []


@contextlib.contextmanager
def span_cm(
    name: str,
    tracer: trace.Tracer | None = None,
    record_exception: bool = True,
    **attributes: Any,
) -> Iterator[trace.Span]:
    """An ungated span around the block (lens's ``span_cm``), current inside it.

    Recorded through asynctrace's tracer whenever telemetry is on, whatever
    groups are enabled; *tracer* overrides it, as in lens. *attributes* are
    filtered and redacted as by :func:`safe_set_span_attributes`.

    Example:
        >>> with span_cm("rl.setup.tokenizer", vocab=32000):
        ...     pass
    """
    chosen = tracer if tracer is not None else asynctrace.get_tracer()
    with _redacting_span(chosen, name, record_exception) as span:
        if attributes:
            safe_set_span_attributes(span, attributes)
        yield span


@contextlib.contextmanager
def _redacting_span(
    tracer: trace.Tracer, name: str, record_exception: bool = True
) -> Iterator[trace.Span]:
    """``tracer.start_as_current_span(name)``, an escaping exception recorded redacted.

    OpenTelemetry's ``use_span`` and the SDK's ``record_exception`` record an
    exception's message, stack trace and ``"<type>: <message>"`` status as
    they are: here they go through asynctrace's redaction (no URL userinfo,
    no secret-like values, none of the secrets remembered for the exception),
    on any provider (:func:`asynctrace.record_error`).
    """
    with tracer.start_as_current_span(
        name, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except Exception as exc:
            asynctrace.record_error(span, exc, event=record_exception)  # never raises
            raise


def trace_fn(group: str, name: str, tracer: trace.Tracer | None = None) -> Callable[[F], F]:
    """Each call of the decorated function is a span of *group* (checked per call).

    :func:`asynctrace.trace_fn`: on an ``async def`` the span covers the
    awaited body (lens's ends when the coroutine object is made). *tracer* is
    accepted and ignored.

    Example:
        >>> @trace_fn("optimizer", "rl.policy.optimizer_step")
        ... def step():
        ...     return 1
        >>> step()
        1
    """
    return asynctrace.trace_fn(group, name)


def inject_context(carrier: MutableMapping[str, str]) -> None:
    """Put the current trace context into *carrier* (``traceparent``, ``tracestate``).

    Example:
        >>> carrier = {}
        >>> inject_context(carrier)
        >>> carrier
        {}
    """
    carrier.update(asynctrace.current_trace_carrier())


def extract_context(carrier: Mapping[str, str]) -> otel_context.Context:
    """The OpenTelemetry ``Context`` carried by *carrier* (empty when it has none).

    Read by :func:`asynctrace.remote_trace_context`, as every asynctrace
    carrier is: the span context and, with ``propagate_scopes`` on, the
    sender's OpenTelemetry baggage (lens's W3C Trace Context + Baggage). Like
    lens's, the context is built from an empty one, not the current one.
    asynctrace's own scopes (iteration, per-prompt, task, session) live
    outside the OpenTelemetry context: to have them too, run the block under
    ``with asynctrace.remote_trace_context(carrier):`` instead of attaching
    this context.

    Example:
        >>> from opentelemetry import trace
        >>> ctx = extract_context({})
        >>> trace.get_current_span(ctx).get_span_context().is_valid
        False
    """
    token = otel_context.attach(otel_context.Context())
    try:
        with asynctrace.remote_trace_context(carrier):
            return otel_context.get_current()
    finally:
        otel_context.detach(token)


def is_span_group_enabled(group: str) -> bool:
    """Whether *group* is enabled now.

    Example:
        >>> is_span_group_enabled("no_such_group")
        False
    """
    return asynctrace.is_span_group_enabled(group)


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
    _register_names(names, "set_enabled_span_groups")
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
    _warn_once(
        ("set_enabled_span_groups", "unconfigured"),
        "set_enabled_span_groups: telemetry is not configured and no OpenTelemetry SDK "
        "TracerProvider is set, so no span is recorded; call setup_telemetry (or "
        "asynctrace.configure), or set an SDK TracerProvider first",
    )
    asynctrace.set_span_groups(spec)


def get_tracer(name: str = "nemo.lens") -> trace.Tracer:
    """OpenTelemetry's global tracer (asynctrace's pipeline once configured).

    Example:
        >>> get_tracer() is not None
        True
    """
    return trace.get_tracer(name)


def get_meter(name: str = "nemo.lens") -> metrics.Meter:
    """OpenTelemetry's global meter.

    Example:
        >>> get_meter() is not None
        True
    """
    return metrics.get_meter(name)


# --- nemo.lens.contrib.ray ---------------------------------------------------


def inject_ray_context() -> dict[str, str]:
    """A carrier dict with the current trace context, for a Ray call.

    Example:
        >>> inject_ray_context()
        {}
    """
    return asynctrace.current_trace_carrier()


def extract_ray_context(carrier: Mapping[str, str] | None = None) -> otel_context.Context:
    """The context *carrier* holds (the current one when *carrier* is ``None``).

    Example:
        >>> extract_ray_context(None) is not None
        True
    """
    if carrier is None:
        return otel_context.get_current()
    return extract_context(carrier)


def traced_remote_call(method: F, tracer: trace.Tracer | None = None) -> F:
    """lens's Ray wrapper: run *method* in a span named after it, under the caller's trace.

    It is :func:`asynctrace.accepts_trace_context` (so both ``_otel_carrier=``
    and ``trace_carrier=`` work) plus, as in lens, an ungated span named
    ``method.__qualname__``. On an ``async def`` the result is an ``async def``
    too (Ray runs it as an async actor method) and the span covers the awaited
    body, whose spans are its children.

    Raises:
        asynctrace.ConfigurationError: *method* is a generator or async
            generator function.

    Example:
        >>> @traced_remote_call
        ... def work(x):
        ...     return x * 2
        >>> work(2, _otel_carrier={})
        4
    """
    span_name = method.__qualname__
    if inspect.isgeneratorfunction(method) or inspect.isasyncgenfunction(method):
        raise asynctrace.ConfigurationError(
            f"traced_remote_call({span_name}): generator functions are not supported (the "
            "span would end before the first item); accepted: a function or an async def"
        )
    spanned: Callable[..., Any]
    if inspect.iscoroutinefunction(method):  # an async actor method: Ray checks for this

        @functools.wraps(method)
        async def spanned_async(*args: Any, **kwargs: Any) -> Any:
            chosen = tracer if tracer is not None else asynctrace.get_tracer()
            with _redacting_span(chosen, span_name):
                return await method(*args, **kwargs)

        spanned = spanned_async
    else:

        @functools.wraps(method)
        def spanned_sync(*args: Any, **kwargs: Any) -> Any:
            chosen = tracer if tracer is not None else asynctrace.get_tracer()
            with _redacting_span(chosen, span_name):
                return method(*args, **kwargs)

        spanned = spanned_sync
    return asynctrace.accepts_trace_context(spanned)  # type: ignore[return-value]


def create_linked_span(
    tracer: trace.Tracer,
    name: str,
    remote_context: otel_context.Context | None = None,
    remote_carrier: Mapping[str, str] | None = None,
    **attributes: Any,
) -> trace.Span:
    """A started span *linked* to a remote span, not its child (lens's); the caller ends it.

    The link is to the span in *remote_context*, else in *remote_carrier*
    (read by :func:`extract_context`). *attributes* are filtered and
    redacted as by :func:`safe_set_span_attributes`.

    Example:
        >>> span = create_linked_span(get_tracer(), "rl.pp.stage", remote_carrier={}, stage=1)
        >>> span.end()
    """
    if remote_carrier is not None and remote_context is None:
        remote_context = extract_context(remote_carrier)
    links = []
    if remote_context is not None:
        remote = trace.get_current_span(remote_context).get_span_context()
        if remote.is_valid:
            links.append(trace.Link(remote))
    span = tracer.start_span(name, links=links)
    if attributes:
        safe_set_span_attributes(span, attributes)
    return span


def ray_dispatch_with_context(
    remote_fn: Any, *args: Any, _carrier: Mapping[str, str] | None = None, **kwargs: Any
) -> Any:
    """``remote_fn.remote(*args, _otel_carrier=carrier, **kwargs)``, as lens's does.

    Example:
        >>> class Remote:
        ...     def remote(self, x, _otel_carrier):
        ...         return x, _otel_carrier
        >>> ray_dispatch_with_context(Remote(), 1)
        (1, {})
    """
    carrier = dict(_carrier) if _carrier is not None else inject_ray_context()
    return remote_fn.remote(*args, _otel_carrier=carrier, **kwargs)
