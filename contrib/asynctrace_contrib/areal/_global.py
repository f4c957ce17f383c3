"""The module's tracer (AReaL's ``GLOBAL_TRACER``) and the functions that record through it."""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import asynctrace

from ._categories import CategoryLike
from ._perf_tracer import PerfTracer
from ._scope import _NULL, _NullContext, _Scope
from ._session_tracer import SessionTracer

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()  # configure() and reset(), one at a time


def _new_lock_in_child() -> None:
    """A lock another thread held at ``fork()`` would stay held in the child: a new one."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)

GLOBAL_TRACER: PerfTracer | None = None
"""The configured tracer (AReaL's name), ``None`` until :func:`configure`."""


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
    ``profile_steps`` schedules asynctrace's profiler (the ``profiler`` configuration)
    for those steps: a scope with ``enable_profiler=True`` whose ``global_step``
    (its own, else the enclosing scope's) is scheduled is profiled, as in AReaL,
    with ``torch.profiler`` when torch is installed (AReaL's profiler), else
    the ``python`` backend; a ``profiler`` block in *telemetry* wins.
    ``save_interval`` is accepted; asynctrace writes continuously, so it
    changes nothing. With ``enabled: false`` and no session tracer,
    asynctrace is left as it is (an application's own configuration keeps
    running) until ``get_tracer().set_enabled(True)``. *telemetry* is merged
    key by key into nested blocks; a bad ``flush_threshold``, ``WORLD_SIZE``
    or ``profile_steps`` entry is warned about, as AReaL does, not raised.

    Raises:
        RuntimeError: already configured (call :func:`reset` first), as in AReaL.
        ValueError: a negative *rank*.
        asynctrace.ConfigurationError: a bad *telemetry* key or *category_map*; a
            *config* mapping with a key AReaL's ``PerfTracerConfig`` does not have
            (its ``session_tracer`` block too), or an ``enabled`` that is not a
            boolean (the strings asynctrace reads as one, ``"false"``, are); a
            ``fileroot`` under which the directories cannot be made.

    Example:
        >>> tracer = configure({"enabled": True, "fileroot": "/tmp/run"}, rank=0)  # doctest: +SKIP
    """
    global GLOBAL_TRACER
    with _lock:
        if GLOBAL_TRACER is not None:
            raise RuntimeError(
                "PerfTracer has already been configured. Call perf_tracer.reset() "
                "before configuring again."
            )
        tracer = PerfTracer(
            config, rank=rank, role=role, telemetry=telemetry, category_map=category_map
        )
        tracer._activate()
        GLOBAL_TRACER = tracer
        return tracer


def is_configured() -> bool:
    """Whether :func:`configure` ran (and :func:`reset` did not since).

    Example:
        >>> isinstance(is_configured(), bool)
        True
    """
    return GLOBAL_TRACER is not None


def reset() -> None:
    """Flush, stop, and forget the tracer, so :func:`configure` may run again.

    Example:
        >>> reset()
    """
    global GLOBAL_TRACER
    with _lock:
        tracer, GLOBAL_TRACER = GLOBAL_TRACER, None
    if tracer is not None:
        tracer.reset()


def get_tracer() -> PerfTracer:
    """The configured :class:`PerfTracer`.

    Raises:
        RuntimeError: not configured, as in AReaL.

    Example:
        >>> get_tracer()  # doctest: +SKIP
    """
    tracer = GLOBAL_TRACER
    if tracer is None:
        raise RuntimeError("PerfTracer is not configured. Call perf_tracer.configure(...) first.")
    return tracer


def get_session_tracer() -> SessionTracer | None:
    """AReaL's session tracer API (:class:`SessionTracer`), or ``None`` when sessions are off
    or nothing is configured.

    Example:
        >>> get_session_tracer() is None or True
        True
    """
    tracer = GLOBAL_TRACER
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
    tracer = GLOBAL_TRACER
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
    tracer = GLOBAL_TRACER
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
    tracer = GLOBAL_TRACER
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
