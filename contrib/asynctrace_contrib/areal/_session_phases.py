"""AReaL's session events and phase timers: ``trace_session_event`` and what sends it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ._global import get_session_tracer
from ._scope import _NULL, _NullContext
from ._session_context import awaited
from ._sessions import get_session_id

__all__ = ["atrace_session_phase", "trace_session", "trace_session_event", "trace_session_phase"]

F = TypeVar("F", bound=Callable[..., Any])


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
        if awaited(fn, f"trace_session({phase!r})"):

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
