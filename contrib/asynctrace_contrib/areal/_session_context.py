"""AReaL's ``session_context``: each call of the decorated function in a session of its own."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import asynctrace

from ._global import get_session_tracer
from ._session_tracer import _task_ok
from ._sessions import get_task_id, set_session_id
from ._values import _warn_once

__all__ = ["awaited", "session_context"]

F = TypeVar("F", bound=Callable[..., Any])


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


def awaited(fn: object, where: str) -> bool:
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
        if awaited(fn, "session_context()"):

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
