"""Per-sample session lifecycle: tasks own sessions, sessions run phases, then finalize.

A *task* is a dataset item; each *session* is one sample generated for it.
A session is registered (``submit_ts``), runs registered phases (each a list
of executions with start and end), and is finalized with a status. This
module holds the scopes that set the current task and session; the phase
timers are in :mod:`asynctrace._session_phase`, the decorators in
:mod:`asynctrace._session_decorators`, the lifecycle events in
:mod:`asynctrace._session_events`, the counters in
:mod:`asynctrace._session_counters`. The tracer they report to lives in
:mod:`asynctrace._session_tracer`, the records in
:mod:`asynctrace._session_record`, the writer in
:mod:`asynctrace._session_writer`.
"""

from __future__ import annotations

import numbers
from typing import Any

from . import _session_tracer
from ._cm import DONE, Done, SyncAndAsync
from ._errors import ConfigurationError
from ._scopes import _INT64_MAX, _INT64_MIN, SCOPES, ScopeState, leave
from ._session_ids import untracked_id
from ._session_reasons import exception_text

__all__ = [
    "check_task_id",
    "current_session_id",
    "current_task_id",
    "session_scope",
    "task_scope",
]


def check_task_id(task_id: object, where: str = "task_scope(task_id)") -> int | str:
    """*task_id* as a plain str or a plain int that a 64-bit attribute holds, else a
    :class:`ConfigurationError` naming *where*.

    A str subclass (``numpy.str_``) becomes the plain str it holds (str's own
    ``__str__``, not an override): the record and the spans redact and bound
    the same plain value, and it hashes as a str does (the task map keys on
    it). numpy's integers and an ``IntEnum`` become the int they stand for.
    """
    if not isinstance(task_id, bool):
        if isinstance(task_id, str):
            return str.__str__(task_id)
        if isinstance(task_id, (int, numbers.Integral)):
            number = int(task_id)
            if _INT64_MIN <= number <= _INT64_MAX:
                return number
    raise ConfigurationError(
        f"{where}: expected an int or str (an int from -2**63 to 2**63 - 1), got {task_id!r}"
    )


class task_scope(SyncAndAsync["int | str"]):
    """Run a block as dataset item *task_id*; sessions opened inside belong to it.

    Stamps ``rl.task_id`` on every span started inside. ``with`` and
    ``async with``. Entered again while entered, it raises ``RuntimeError``.

    Example:
        >>> with task_scope(23):
        ...     assert current_task_id() == 23
    """

    __slots__ = ("_state", "_task_id", "_token")

    def __init__(self, task_id: int | str) -> None:
        cls = type(task_id)
        # A str, or an int within +-2**30 (one-digit ints: the cheapest compare), as is;
        # anything else (a larger int too) is checked against the 64-bit range.
        self._task_id = (
            task_id
            if (cls is int and -0x3FFFFFFF <= task_id <= 0x3FFFFFFF) or cls is str  # type: ignore[operator]
            else check_task_id(task_id)
        )
        self._token: Any = None
        self._state: Any = None

    def __enter__(self) -> int | str:
        if self._token is not None:
            raise RuntimeError("task_scope is already entered")
        under = SCOPES.get()  # ScopeState.replace, inline: this runs once per sample
        self._state = state = ScopeState(
            under.bucket, under.per_prompt, under.iteration, self._task_id, under.session_id
        )
        state._under_task_id = under  # for leave, if scopes exit out of order
        self._token = SCOPES.set(state)
        return self._task_id

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Done:
        token, self._token = self._token, None
        if token is not None:
            leave("task_id", token, self._state)
        return DONE

    __aexit__ = __exit__  # type: ignore[assignment]  # DONE: awaited, it finishes at once


class session_scope(SyncAndAsync[str]):
    """Register a new session under the current task and make it current.

    Stamps ``rl.session_id`` (and ``rl.task_id``) on every span started
    inside, so spans and session records can be joined. An exception escaping
    the block finalizes the session as ``failed``; otherwise the session stays
    pending until :func:`trace_session_event` finalizes it (by session or by
    task). With the session tracer off, a session id is still made, so spans
    are stamped the same way. Entered again while entered, it raises
    ``RuntimeError`` (make one object per session).

    Example:
        >>> with task_scope(1), session_scope() as session_id:
        ...     assert current_session_id() == session_id
    """

    __slots__ = ("_session_id", "_state", "_token")

    def __init__(self) -> None:
        self._session_id: str | None = None
        self._token: Any = None
        self._state: Any = None

    def __enter__(self) -> str:
        if self._token is not None:
            raise RuntimeError("session_scope is already entered")
        tracer = _session_tracer._tracer
        under = SCOPES.get()  # read once; ScopeState.replace below, inline (once per sample)
        session_id = tracer.register(under.task_id) if tracer is not None else untracked_id()
        self._session_id = session_id
        self._state = state = ScopeState(
            under.bucket, under.per_prompt, under.iteration, under.task_id, session_id
        )
        state._under_session_id = under  # for leave, if scopes exit out of order
        self._token = SCOPES.set(state)
        return session_id

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Done:
        token, self._token = self._token, None
        if token is not None:
            leave("session_id", token, self._state)
        if exc_type is not None:
            tracer = _session_tracer._tracer
            if tracer is not None and self._session_id is not None:
                status = "failed" if issubclass(exc_type, Exception) else "dropped"
                tracer.finalize(self._session_id, None, status, exception_text(exc_type, exc))
        return DONE

    __aexit__ = __exit__  # type: ignore[assignment]  # DONE: awaited, it finishes at once


def current_task_id() -> int | str | None:
    """The task set by the innermost :class:`task_scope`, if any.

    Example:
        >>> current_task_id() is None
        True
    """
    return SCOPES.get().task_id


def current_session_id() -> str | None:
    """The session set by the innermost :class:`session_scope`, if any.

    Example:
        >>> current_session_id() is None
        True
    """
    return SCOPES.get().session_id


# The name a phase object pickled by an earlier release looks its copy function up by
# (pickle finds it by module and name): kept here, so such a pickle still loads.
from ._session_phase import _fresh_phase  # noqa: E402, F401
