"""AReaL's ``perf_tracer`` API on asynctrace (``from asynctrace_contrib import areal``).

A drop-in for ``areal.utils.perf_tracer`` (AReaL 1.0.4): the same functions,
configured from the same ``perf_tracer:`` block, writing the same directory
layout (``<fileroot>/logs/<user>/<experiment>/<trial>/perf_tracer/traces-r{rank}.jsonl``
and ``.../session_tracer/sessions-r{rank}.jsonl``) with AReaL's field names,
and recording through asynctrace: scopes are asynctrace spans (so OTLP export,
``asynctrace goodput`` and ``report`` work on them), sessions are asynctrace
sessions (with AReaL's numeric ids).

Categories become span groups and goodput buckets by :data:`DEFAULT_CATEGORY_MAP`
(``compute`` is productive, ``sync`` idle, ``comm``/``io``/``scheduler``/``instr``
overhead, ``misc`` and unknown categories unbucketed umbrellas); pass
``category_map=`` to :func:`configure` to change it. A scope whose ``args``
hold ``global_step`` runs inside :func:`asynctrace.iteration_scope`, so its
span and everything under it carry ``rl.iteration``, and an unbucketed one is
the step ``asynctrace goodput`` reports.

Example:
    >>> from asynctrace_contrib import areal as perf_tracer
    >>> with perf_tracer.trace_scope("train.step", args={"global_step": 3}):
    ...     pass
"""

from __future__ import annotations

import contextvars
import enum
import functools
import getpass
import importlib.util
import inspect
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar, Union

import asynctrace

__all__ = [
    "DEFAULT_CATEGORY_MAP",
    "Category",
    "CategoryLike",
    "PerfTraceCategory",
    "PerfTracer",
    "PerfTracerConfig",
    "SessionTraceEvent",
    "SessionTracerConfig",
    "atrace_scope",
    "atrace_session_phase",
    "configure",
    "get_session_id",
    "get_session_tracer",
    "get_task_id",
    "get_tracer",
    "instant",
    "is_configured",
    "register_session",
    "register_task",
    "reset",
    "save",
    "session_context",
    "set_session_id",
    "set_task_id",
    "trace_perf",
    "trace_scope",
    "trace_session",
    "trace_session_event",
    "trace_session_phase",
]

F = TypeVar("F", bound=Callable[..., Any])
NAMESPACE: Final = "areal"
"""The namespace AReaL's category groups are registered under."""


class PerfTraceCategory(str, enum.Enum):
    """AReaL's trace categories.

    Example:
        >>> PerfTraceCategory.COMPUTE.value
        'compute'
    """

    COMPUTE = "compute"
    COMM = "comm"
    IO = "io"
    SYNC = "sync"
    SCHEDULER = "scheduler"
    INSTR = "instr"
    MISC = "misc"


Category = PerfTraceCategory
CategoryLike = Union[PerfTraceCategory, str, None]  # noqa: UP007

_ALIASES: Final = {
    "communication": "comm",
    "synchronization": "sync",
    "scheduling": "scheduler",
    "instrumentation": "instr",
}

DEFAULT_CATEGORY_MAP: Final[Mapping[str, asynctrace.Bucket | None]] = {
    "compute": asynctrace.Bucket.PRODUCTIVE,
    "comm": asynctrace.Bucket.OVERHEAD,
    "io": asynctrace.Bucket.OVERHEAD,
    "sync": asynctrace.Bucket.IDLE,
    "scheduler": asynctrace.Bucket.OVERHEAD,
    "instr": asynctrace.Bucket.OVERHEAD,
    "misc": None,
}
"""AReaL category -> goodput bucket (``None``: an unbucketed umbrella).

Each category is the span group ``areal.<category>``; a category not in the
table (AReaL accepts any string) is treated as ``misc``. The same table is
``asynctrace goodput``'s default for AReaL's own trace files.
"""

asynctrace.register_span_groups(
    NAMESPACE,
    [
        asynctrace.SpanGroup(
            f"areal.{name}",
            bucket if bucket is not None else asynctrace.Bucket.OVERHEAD,
            description=f"AReaL category {name!r}",
        )
        for name, bucket in DEFAULT_CATEGORY_MAP.items()
    ],
    presets={NAMESPACE: [f"areal.{name}" for name in DEFAULT_CATEGORY_MAP]},
)


def _category(category: CategoryLike) -> str:
    """AReaL's normalisation: enum value, alias, lower-cased name; ``misc`` for none."""
    if isinstance(category, PerfTraceCategory):
        return category.value
    if isinstance(category, str) and category.strip():
        lowered = category.strip().lower()
        return _ALIASES.get(lowered, lowered)
    return "misc"


@dataclass
class SessionTracerConfig:
    """AReaL 1.0.4's ``SessionTracerConfig`` (fields and defaults).

    Example:
        >>> SessionTracerConfig(enabled=True).flush_threshold
        256
    """

    enabled: bool = False
    flush_threshold: int = 256


@dataclass
class PerfTracerConfig:
    """AReaL 1.0.4's ``PerfTracerConfig`` (fields and defaults), the ``perf_tracer:`` block.

    AReaL's own config object (``areal.api.cli_args.PerfTracerConfig``) or a
    mapping with these keys is accepted by :func:`configure` as well.

    Example:
        >>> PerfTracerConfig(enabled=True, fileroot="/tmp/x").save_interval
        1
    """

    experiment_name: str = "???"
    trial_name: str = "???"
    fileroot: str = "???"
    enabled: bool = False
    save_interval: int = 1
    profile_steps: list[int] | None = None
    session_tracer: SessionTracerConfig | None = field(default=None)


class SessionTraceEvent(str, enum.Enum):
    """AReaL's session lifecycle events (``trace_session_event("mark_<value>", ...)``).

    Example:
        >>> SessionTraceEvent.FINALIZED.value
        'finalized'
    """

    FINALIZED = "finalized"
    GENERATE_START = "generate_start"
    GENERATE_END = "generate_end"
    REWARD_START = "reward_start"
    REWARD_END = "reward_end"
    TOOLCALL_START = "toolcall_start"
    TOOLCALL_END = "toolcall_end"


def _field(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


_SCALARS: Final = frozenset({bool, int, float, str})


def _attributes(args: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """AReaL's ``args`` as span attributes: scalars as they are, anything else as text."""
    if not args:
        return None
    out: dict[str, Any] = {}
    for key, value in args.items():
        if value is None:
            continue
        if value.__class__ in _SCALARS and key.__class__ is str:
            out[key] = value
        elif isinstance(value, bool | int | float | str):
            out[str(key)] = value
        elif isinstance(value, list | tuple) and all(
            isinstance(v, bool | int | float | str) for v in value
        ):
            out[str(key)] = list(value)
        else:
            out[str(key)] = str(value)
    return out


class PerfTracer:
    """The configured tracer, as ``perf_tracer.get_tracer()`` returns it.

    ``telemetry`` is the :class:`asynctrace.Telemetry` it runs;
    ``trace_path`` and ``session_path`` are AReaL's file locations.

    Example:
        >>> tracer = configure(PerfTracerConfig(), rank=0)  # doctest: +SKIP
    """

    def __init__(
        self,
        telemetry: asynctrace.Telemetry,
        *,
        rank: int,
        role: str | None,
        enabled: bool,
        trace_path: Path,
        session_path: Path | None,
        buckets: Mapping[str, asynctrace.Bucket | None],
    ) -> None:
        self.telemetry = telemetry
        self.rank = rank
        self.role = role
        self._enabled = enabled
        self.trace_path = trace_path
        self.session_path = session_path
        self._buckets = dict(buckets)
        self._groups = {name: (f"areal.{name}", b) for name, b in self._buckets.items()}

    @property
    def enabled(self) -> bool:
        """Whether scopes and instants are recorded."""
        return self._enabled

    def set_enabled(self, flag: bool) -> None:
        """Turn recording of scopes and instants on or off (AReaL's switch)."""
        self._enabled = bool(flag)

    @property
    def session_tracer(self) -> Any:
        """asynctrace's session tracer, when ``session_tracer.enabled``."""
        return self.telemetry.sessions

    def bucket_of(self, category: str) -> tuple[str, asynctrace.Bucket | None]:
        """The span group and bucket of a (normalised) category."""
        found = self._groups.get(category)
        return found if found is not None else self._groups["misc"]

    def trace_scope(
        self,
        name: str,
        *,
        category: CategoryLike = None,
        enable_profiler: bool = False,
        profiler_args: dict[str, Any] | None = None,
        args: dict[str, Any] | None = None,
    ) -> _Scope | _NullContext:
        """A span around the block (``with`` or ``async with``); see :func:`trace_scope`."""
        if not self._enabled:
            return _NULL
        return _Scope(self, name, _category(category), args, enable_profiler)

    atrace_scope = trace_scope

    def instant(
        self, name: str, *, category: CategoryLike = None, args: dict[str, Any] | None = None
    ) -> None:
        """A point in time; see :func:`instant`."""
        if self._enabled:
            group, _ = self.bucket_of(_category(category))
            asynctrace.instant(group, name, attributes=_attributes(args))

    def save(self, *, step: int | None = None, force: bool = False) -> None:
        """Write out what was recorded; see :func:`save`."""
        if force:
            self.telemetry.flush()

    def reset(self) -> None:
        """Flush and stop, as AReaL's ``reset`` does before a new ``configure``."""
        self.telemetry.shutdown()


class _NullContext:
    """The disabled scope: nothing, with and async with."""

    def __enter__(self) -> _NullContext:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> _NullContext:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


_NULL: Final = _NullContext()


class _Scope:
    """One ``trace_scope``: the iteration scope (for ``global_step``), then the span."""

    __slots__ = ("_args", "_category", "_name", "_profile", "_scope", "_span", "_tracer")

    def __init__(
        self,
        tracer: PerfTracer,
        name: str,
        category: str,
        args: dict[str, Any] | None,
        profile: bool = False,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._category = category
        self._args = args
        self._profile = profile
        self._scope: Any = None
        self._span: Any = None

    def __enter__(self) -> _Scope:
        args = self._args
        step = args.get("global_step") if args else None
        if step.__class__ is int:
            self._scope = scope = asynctrace.iteration_scope(step)
            scope.__enter__()
        group, bucket = self._tracer.bucket_of(self._category)
        attributes = _attributes(args) if args else None
        profile = self._profile
        if bucket is None:
            span = asynctrace.umbrella_span(
                group, self._name, attributes=attributes, profile=profile
            )
        else:
            span = asynctrace.managed_span(
                group, self._name, attributes=attributes, bucket=bucket, profile=profile
            )
        span.__enter__()
        self._span = span
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span, self._span = self._span, None
        scope, self._scope = self._scope, None
        try:
            if span is not None:
                span.__exit__(exc_type, exc, tb)
        finally:
            if scope is not None:
                scope.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> _Scope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


_lock = threading.Lock()
_tracer: PerfTracer | None = None
_task_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "asynctrace_contrib.areal.task_id", default=None
)
_session_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "asynctrace_contrib.areal.session_id", default=None
)


def _base_dir(config: Any) -> Path:
    """AReaL's ``<fileroot>/logs/<user>/<experiment>/<trial>``."""
    fileroot = os.path.expanduser(os.path.expandvars(str(_field(config, "fileroot", "???"))))
    return Path(
        fileroot,
        "logs",
        getpass.getuser(),
        str(_field(config, "experiment_name", "???")),
        str(_field(config, "trial_name", "???")),
    )


def _profile_steps(steps: Any) -> list[int]:
    """``profile_steps`` as a list of steps, or the configuration error naming the key."""
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
        steps = [steps]
    kept: list[int] = []
    for raw in steps:
        try:
            step = int(raw)
        except (TypeError, ValueError, OverflowError):
            step = -1
        if step < 0 or isinstance(raw, bool) or (isinstance(raw, float) and raw != step):
            raise asynctrace.ConfigurationError(
                f"perf_tracer.profile_steps: {raw!r} is not accepted; "
                "accepted: a list of non-negative integer steps"
            )
        kept.append(step)
    return kept


def _profiler_backend() -> str:
    """AReaL profiles with ``torch.profiler``: the torch backend where torch is installed."""
    return "torch" if importlib.util.find_spec("torch") is not None else "python"


def _category_map(
    overrides: Mapping[str, asynctrace.Bucket | str | None] | None,
) -> dict[str, asynctrace.Bucket | None]:
    table: dict[str, asynctrace.Bucket | None] = dict(DEFAULT_CATEGORY_MAP)
    for raw, value in (overrides or {}).items():
        name = _category(raw)
        if name not in table:
            raise asynctrace.ConfigurationError(
                f"category_map: {raw!r} is not a category; accepted: {', '.join(table)}"
            )
        if value is None or (isinstance(value, str) and value.lower() in ("none", "")):
            table[name] = None
            continue
        try:
            table[name] = asynctrace.Bucket(value)
        except ValueError:
            raise asynctrace.ConfigurationError(
                f"category_map[{raw!r}]: {value!r} is not accepted; accepted: "
                f"{', '.join(b.value for b in asynctrace.Bucket)} or none"
            ) from None
    return table


def configure(
    config: Any,
    *,
    rank: int,
    role: str | None = None,
    telemetry: Mapping[str, Any] | None = None,
    category_map: Mapping[str, asynctrace.Bucket | str | None] | None = None,
) -> PerfTracer:
    """Start tracing for this rank from a ``perf_tracer:`` block, as AReaL's ``configure``.

    *config* is AReaL's ``PerfTracerConfig``, this module's, or a mapping with
    its keys. Traces go to ``perf_tracer/traces-r{rank}.jsonl`` and, with
    ``session_tracer.enabled``, sessions to ``session_tracer/sessions-r{rank}.jsonl``
    under ``<fileroot>/logs/<user>/<experiment>/<trial>`` (a *role* adds a
    subdirectory, as in AReaL, and asynctrace names the files
    ``traces-{role}-r{rank}.jsonl``). *telemetry* is merged into the
    :class:`asynctrace.TelemetryConfig` (e.g. ``{"exporters": ["chrome",
    "otlp"]}``, more ``span_groups``); *category_map* overrides
    :data:`DEFAULT_CATEGORY_MAP` (``{"io": "idle", "misc": "overhead"}``).
    ``profile_steps`` schedules asynctrace's profiler (:mod:`asynctrace._profiling`)
    for those steps: a scope with ``enable_profiler=True`` whose ``global_step``
    (its own, else the enclosing scope's) is scheduled is profiled, as in AReaL,
    with ``torch.profiler`` when torch is installed (AReaL's profiler), else
    the ``python`` backend; a ``profiler`` block in *telemetry* wins.
    ``save_interval`` is accepted; asynctrace writes continuously, so it
    changes nothing.

    Raises:
        RuntimeError: already configured (call :func:`reset` first), as in AReaL.
        ValueError: a negative *rank*.
        asynctrace.ConfigurationError: a bad *telemetry* key or *category_map*.

    Example:
        >>> tracer = configure({"enabled": True, "fileroot": "/tmp/run"}, rank=0)  # doctest: +SKIP
    """
    global _tracer
    if rank < 0:
        raise ValueError("rank must be a non-negative integer")
    buckets = _category_map(category_map)
    base = _base_dir(config).absolute()
    trace_dir = base / "perf_tracer"
    session_dir = base / "session_tracer"
    if role:
        trace_dir, session_dir = trace_dir / role, session_dir / role
    sessions = _field(config, "session_tracer")
    sessions_on = bool(sessions is not None and _field(sessions, "enabled", False))
    enabled = bool(_field(config, "enabled", False))
    extra = dict(telemetry or {})
    groups = ",".join(filter(None, [NAMESPACE, extra.pop("span_groups", "")]))
    settings: dict[str, Any] = {
        "enabled": enabled,
        "span_groups": groups,
        "exporters": ["chrome"],
        "output_dir": str(trace_dir),
        "session_tracer": {
            "enabled": sessions_on,
            "flush_threshold": max(1, int(_field(sessions, "flush_threshold", 256) or 1))
            if sessions_on
            else 100,
            "output_dir": str(session_dir),
            "ids": "sequential",
        },
        **extra,
    }
    steps = _field(config, "profile_steps")
    if steps and "profiler" not in extra:
        settings["profiler"] = {"steps": _profile_steps(steps), "backend": _profiler_backend()}
    with _lock:
        if _tracer is not None:
            raise RuntimeError(
                "PerfTracer has already been configured. Call perf_tracer.reset() "
                "before configuring again."
            )
        world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        handle = asynctrace.configure(
            settings, rank=rank, world_size=max(world_size, rank + 1), role=role
        )
        name = (
            f"traces-r{rank}.jsonl" if role in (None, "worker") else f"traces-{role}-r{rank}.jsonl"
        )
        session_path = handle.sessions.path if handle.sessions is not None else None
        _tracer = PerfTracer(
            handle,
            rank=rank,
            role=role,
            enabled=enabled,
            trace_path=trace_dir / name,
            session_path=Path(session_path) if session_path is not None else None,
            buckets=buckets,
        )
        return _tracer


def is_configured() -> bool:
    """Whether :func:`configure` ran (and :func:`reset` did not since).

    Example:
        >>> isinstance(is_configured(), bool)
        True
    """
    return _tracer is not None


def reset() -> None:
    """Flush, stop, and forget the tracer, so :func:`configure` may run again.

    Example:
        >>> reset()
    """
    global _tracer
    with _lock:
        tracer, _tracer = _tracer, None
    if tracer is not None:
        tracer.reset()


def get_tracer() -> PerfTracer:
    """The configured :class:`PerfTracer`.

    Raises:
        RuntimeError: not configured, as in AReaL.

    Example:
        >>> get_tracer()  # doctest: +SKIP
    """
    tracer = _tracer
    if tracer is None:
        raise RuntimeError("PerfTracer is not configured. Call perf_tracer.configure(...) first.")
    return tracer


def get_session_tracer() -> Any:
    """asynctrace's session tracer, or ``None`` when sessions are off or nothing is configured.

    Example:
        >>> get_session_tracer() is None or True
        True
    """
    tracer = _tracer
    return None if tracer is None else tracer.session_tracer


def trace_scope(
    name: str,
    *,
    category: CategoryLike = None,
    enable_profiler: bool = False,
    profiler_args: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
) -> _Scope | _NullContext:
    """A span around the block: ``with trace_scope(name, category=..., args=...)``.

    The category picks the group and bucket (:data:`DEFAULT_CATEGORY_MAP`);
    *args* become attributes; ``args["global_step"]`` stamps ``rl.iteration``
    on the span and everything inside it. Works with ``async with`` too.
    *enable_profiler* asks for a profile of the block, taken when its step is
    in ``profile_steps`` (see :func:`configure`). *profiler_args* is accepted;
    asynctrace sets ``record_shapes`` and ``with_stack`` once, in the
    ``profiler`` block of ``configure(..., telemetry=...)``.

    Example:
        >>> with trace_scope("train.ppo_update", category="compute", args={"global_step": 1}):
        ...     pass
    """
    tracer = _tracer
    if tracer is None or not tracer.enabled:
        return _NULL
    return tracer.trace_scope(name, category=category, enable_profiler=enable_profiler, args=args)


def atrace_scope(
    name: str,
    *,
    category: CategoryLike = None,
    enable_profiler: bool = False,
    profiler_args: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
) -> _Scope | _NullContext:
    """:func:`trace_scope` for ``async with``.

    Example:
        >>> async def rollout():
        ...     async with atrace_scope("rollout.batch", category="scheduler"):
        ...         pass
    """
    return trace_scope(name, category=category, enable_profiler=enable_profiler, args=args)


def instant(
    name: str, *, category: CategoryLike = None, args: dict[str, Any] | None = None
) -> None:
    """Mark a point in time (an event on the current span, or a zero-length span).

    Example:
        >>> instant("workflow_executor.wait", category="scheduler", args={"queue_size": 3})
    """
    tracer = _tracer
    if tracer is not None:
        tracer.instant(name, category=category, args=args)


def save(*, step: int | None = None, force: bool = False) -> None:
    """``force=True`` writes out every ended span and finished session (``asynctrace.flush``).

    Without *force* it does nothing: asynctrace's writers run in the
    background, and the session tracer writes every ``flush_threshold``
    sessions. Sessions still pending are written at shutdown, as ``pending``.

    Example:
        >>> save(force=True)
    """
    tracer = _tracer
    if tracer is not None:
        tracer.save(step=step, force=force)


def trace_perf(name: str, *, category: CategoryLike = None) -> Callable[[F], F]:
    """Decorate a function (sync or async) so each call runs in :func:`trace_scope`.

    Example:
        >>> @trace_perf("fsdp_engine.train_batch", category="compute")
        ... def train_batch():
        ...     return 1
        >>> train_batch()
        1
    """

    def decorator(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with trace_scope(name, category=category):
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with trace_scope(name, category=category):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


# --- sessions ----------------------------------------------------------------


def set_session_id(session_id: int | None) -> None:
    """Set the session id of the current context (AReaL's contextvar; no reset).

    Example:
        >>> set_session_id(None)
    """
    _session_id.set(session_id)


def get_session_id() -> int | None:
    """The session id of the current context.

    Example:
        >>> get_session_id() is None or True
        True
    """
    return _session_id.get()


def set_task_id(task_id: int | None) -> None:
    """Set the task id of the current context (AReaL's ``WorkflowExecutor`` does this).

    Example:
        >>> set_task_id(None)
    """
    _task_id.set(task_id)


def get_task_id() -> int | None:
    """The task id of the current context.

    Example:
        >>> get_task_id() is None or True
        True
    """
    return _task_id.get()


def register_task(task_id: int) -> None:
    """Declare a task (nothing to do: asynctrace tasks exist through their sessions).

    Example:
        >>> register_task(7)
    """


def register_session(task_id: int) -> int | None:
    """Register a session under *task_id* and return its (numeric) id; ``None`` when off.

    Example:
        >>> register_session(7) is None or True
        True
    """
    if get_session_tracer() is None:
        return None
    with asynctrace.task_scope(task_id), asynctrace.session_scope() as session_id:
        pass
    return int(session_id) if session_id.isdigit() else None


def session_context() -> Callable[[F], F]:
    """Each call registers a session for the current task and makes it current.

    As in AReaL: with no task in the context the session is ``None``, and
    the session is not finalized when the call returns (the orchestrator
    finalizes it with ``trace_session_event("mark_finalized", ...)``).

    Example:
        >>> @session_context()
        ... async def collect(engine, request): ...
    """

    def activate() -> None:
        task_id = get_task_id()
        set_session_id(register_session(task_id) if task_id is not None else None)

    def decorator(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                activate()
                return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            activate()
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


_known_phases: set[str] = set()


def _ensure_phase(phase: str) -> None:
    """A phase AReaL users add by editing its enum is registered with asynctrace on first use."""
    if phase in _known_phases:
        return
    if phase not in asynctrace.registered_phases():
        asynctrace.register_phase(phase)
    _known_phases.add(phase)


def trace_session_event(
    method: str,
    session_id: int | None = None,
    task_id: int | None = None,
    **payload: Any,
) -> None:
    """AReaL's ``trace_session_event``: ``mark_finalized``, ``mark_<phase>_start``/``_end``,
    ``increment_counter``, for one session (*session_id*) or every pending session of a task.

    Unknown methods are ignored, as in AReaL. ``increment_counter`` applies
    to the current session only (asynctrace's counters are per current
    session).

    Example:
        >>> trace_session_event("mark_finalized", session_id=3, status="accepted")
    """
    if get_session_tracer() is None or (session_id is None and task_id is None):
        return
    target = str(session_id) if session_id is not None else None
    if method == "increment_counter":
        name = payload.get("name")
        if name:
            asynctrace.increment_counter(str(name), payload.get("value", 1))
        return
    if not method.startswith("mark_"):
        return
    event = method[len("mark_") :]
    if event == "finalized":
        status = payload.pop("status", "accepted")
        reason = payload.pop("reason", None)
        asynctrace.trace_session_event(
            "finalized", target, task_id, status=status, reason=reason, **payload
        )
        return
    phase, _, edge = event.rpartition("_")
    if edge not in ("start", "end") or not phase.isidentifier():
        return
    _ensure_phase(phase)
    asynctrace.trace_session_event(event, target, task_id, **payload)


class _PhaseScope:
    """``mark_<phase>_start`` on entry and ``mark_<phase>_end`` on exit, sync or async."""

    __slots__ = ("_end", "_phase", "_session_id", "_start")

    def __init__(
        self,
        session_id: int,
        phase: str,
        start_payload: dict[str, Any] | None,
        end_payload: dict[str, Any] | None,
    ) -> None:
        self._session_id = session_id
        self._phase = phase
        self._start = start_payload or {}
        self._end = end_payload or {}

    def __enter__(self) -> _PhaseScope:
        trace_session_event(
            f"mark_{self._phase}_start", session_id=self._session_id, **self._start
        )
        return self

    def __exit__(self, *exc: object) -> None:
        trace_session_event(f"mark_{self._phase}_end", session_id=self._session_id, **self._end)

    async def __aenter__(self) -> _PhaseScope:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


def trace_session_phase(
    phase: str,
    *,
    start_payload: dict[str, Any] | None = None,
    end_payload: dict[str, Any] | None = None,
) -> _PhaseScope | _NullContext:
    """Time one execution of *phase* for the current session (``with`` or ``async with``).

    Example:
        >>> with trace_session_phase("reward"):
        ...     pass
    """
    session_id = get_session_id()
    if session_id is None:
        return _NULL
    return _PhaseScope(session_id, phase, start_payload, end_payload)


def atrace_session_phase(
    phase: str,
    *,
    start_payload: dict[str, Any] | None = None,
    end_payload: dict[str, Any] | None = None,
) -> _PhaseScope | _NullContext:
    """:func:`trace_session_phase` for ``async with``.

    Example:
        >>> async def generate(engine, request):
        ...     async with atrace_session_phase("generate"):
        ...         return await engine.agenerate(request)
    """
    return trace_session_phase(phase, start_payload=start_payload, end_payload=end_payload)


def trace_session(phase: str) -> Callable[[F], F]:
    """Each call of the decorated function (sync or async) is one execution of *phase*.

    Example:
        >>> @trace_session("reward")
        ... async def compute_rewards(response): ...
    """

    def decorator(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with atrace_session_phase(phase):
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with trace_session_phase(phase):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator
