"""AReaL's task and session ids in the context, and the registration of tasks and sessions.

The session decorator is in :mod:`asynctrace_contrib.areal._session_context`,
the events and phase timers in :mod:`asynctrace_contrib.areal._session_phases`.
"""

from __future__ import annotations

import contextvars
import os

from ._global import get_session_tracer

__all__ = [
    "get_session_id",
    "get_task_id",
    "register_session",
    "register_task",
    "set_session_id",
    "set_task_id",
]

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
