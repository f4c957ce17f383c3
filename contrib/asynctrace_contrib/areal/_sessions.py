"""AReaL's session functions: task and session ids in the context, events, phases."""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
from collections.abc import Callable
from typing import Any, TypeVar

import asynctrace

from ._global import get_session_tracer
from ._scope import _NULL, _NullContext
from ._session_tracer import _task_ok
from ._values import _warn_once

F = TypeVar("F", bound=Callable[..., Any])
_task_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "asynctrace_contrib.areal.task_id", default=None
)
_session_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "asynctrace_contrib.areal.session_id", default=None
)


def _in_no_session_in_child() -> None:
    """A forked child is in none of its parent's sessions: a process-pool worker forked
    while a session was current would otherwise report every later call under it."""
    _task_id.set(None)
    _session_id.set(None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_no_session_in_child)


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
    """Declare a task (AReaL's ``register_task``).

    Example:
        >>> register_task(7)
    """
    tracer = get_session_tracer()
    if tracer is not None:
        tracer.register_task(task_id)


def register_session(task_id: int | None) -> int | None:
    """Register a session under *task_id* and return its (numeric) id; ``None`` when off.

    Example:
        >>> register_session(7) is None or True
        True
    """
    tracer = get_session_tracer()
    return None if tracer is None else tracer.register_session(task_id)


class _Activation:
    """The span scopes of one :func:`session_context` call: ``rl.task_id`` and
    ``rl.session_id`` on the spans inside, the session registered as AReaL does.

    The session is left pending whatever the call does (AReaL's orchestrator
    finalizes it), so the scopes are always left as if the block succeeded.
    """

    __slots__ = ("_scopes",)

    def __init__(self) -> None:
        self._scopes: list[Any] = []

    def __enter__(self) -> None:
        task_id = get_task_id()
        tracer = get_session_tracer()
        if task_id is None or tracer is None:  # AReaL: no task (or no tracer), no session
            set_session_id(None)
            return
        if not tracer._running():  # its sessions would go to another tracer: counted instead
            set_session_id(None)
            return
        if not _task_ok(task_id):  # no scope for it: registered, spans unstamped
            set_session_id(tracer.register_session(task_id))
            return
        try:
            task = asynctrace.task_scope(task_id)
            task.__enter__()
            self._scopes.append(task)
            session = asynctrace.session_scope()
            session_id = session.__enter__()
            self._scopes.append(session)
            set_session_id(tracer._track(task_id, session_id))
        except Exception as exc:  # never into the host
            self.__exit__()
            _warn_once("activate", "perf_tracer: session not registered: %r", exc)
            set_session_id(None)

    def __exit__(self, *exc: object) -> None:
        while self._scopes:
            self._scopes.pop().__exit__(None, None, None)


def _awaited(fn: object, where: str) -> bool:
    """Whether calls of *fn* are awaited, by asynctrace's own decorators' rule.

    A callable object is classified by its class's ``__call__``, a partial
    by what it wraps. An :class:`asynctrace.ConfigurationError` for what a
    wrapper cannot time: a generator or async generator function (its
    wrapper would cover the making of the generator, not its body), a
    class, or something not callable.
    """
    if not callable(fn):
        raise asynctrace.ConfigurationError(
            f"{where}: expected a function, a method or another callable to decorate, "
            f"got a {type(fn).__name__}"
        )
    if isinstance(fn, type):
        raise asynctrace.ConfigurationError(
            f"{where}: {fn.__qualname__!r} is a class; accepted: a function, a method or "
            "another callable (decorate the class's __init__, or a factory function)"
        )
    target: object = fn
    while isinstance(target, functools.partial):  # named and classified by what it wraps
        target = target.func
    kind: object = fn
    if not (
        inspect.iscoroutinefunction(fn)
        or inspect.isasyncgenfunction(fn)
        or inspect.isroutine(target)
        or isinstance(target, type)
    ):
        kind = type(target).__call__
    if inspect.isgeneratorfunction(kind) or inspect.isasyncgenfunction(kind):
        name = getattr(target, "__qualname__", None) or type(target).__qualname__
        raise asynctrace.ConfigurationError(
            f"{where}: {name!r} is a generator function; accepted: a function or a "
            "coroutine function, or an object whose __call__ is one (for a generator, "
            "open the session or phase inside its body)"
        )
    return inspect.iscoroutinefunction(kind)


def session_context() -> Callable[[F], F]:
    """Each call registers a session for the current task and makes it current.

    As in AReaL: with no task in the context the session is ``None``, and
    the session is not finalized when the call returns or raises (the
    orchestrator finalizes it with ``trace_session_event("mark_finalized", ...)``).
    Spans started inside carry ``rl.task_id`` and ``rl.session_id``. A
    callable object is wrapped as its class's ``__call__`` is (an ``async def
    __call__`` is awaited inside); above ``@staticmethod`` or ``@classmethod``
    the function inside is wrapped.

    Raises:
        asynctrace.ConfigurationError: when decorating a generator or async
            generator function (or an object whose ``__call__`` is one), a
            class, or something not callable.

    Example:
        >>> @session_context()
        ... async def collect(engine, request): ...
    """

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return type(fn)(decorator(fn.__func__))
        if _awaited(fn, "session_context()"):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with _Activation():
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _Activation():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def trace_session_event(
    method: str,
    session_id: int | None = None,
    task_id: int | None = None,
    **payload: Any,
) -> None:
    """AReaL's ``trace_session_event``: ``mark_finalized``, ``mark_<phase>_start``/``_end``,
    ``increment_counter``, for one session (*session_id*) or every pending session of a task.

    As in AReaL: unknown methods are ignored; ``mark_finalized`` takes
    ``status`` and ``reason`` (no status leaves the session pending); other
    payload keys are not recorded; counters count on the session(s) named.
    Nothing raises into the caller (a failure is logged once).

    Example:
        >>> trace_session_event("mark_finalized", session_id=3, status="accepted")
    """
    tracer = get_session_tracer()
    if tracer is None:
        return
    if session_id is not None:
        session_ids = [session_id]
    elif task_id is not None:
        session_ids = tracer.get_session_ids(task_id)
    else:
        return
    if method == "increment_counter":
        name = payload.get("name")
        if not name:
            return
        for target in session_ids:
            tracer.increment_counter(target, name, payload.get("value", 1))
        return
    if not isinstance(method, str) or not method.startswith("mark_"):
        return
    event = method[len("mark_") :]
    for target in session_ids:
        tracer.record_event(target, event, **payload)


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

    Callables are taken as :func:`session_context` takes them.

    Raises:
        asynctrace.ConfigurationError: as :func:`session_context` does.

    Example:
        >>> @trace_session("reward")
        ... async def compute_rewards(response): ...
    """

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return type(fn)(decorator(fn.__func__))
        if _awaited(fn, f"trace_session({phase!r})"):

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
