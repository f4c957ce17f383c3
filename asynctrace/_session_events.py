"""Session lifecycle events: ``finalized``, and phase starts and ends sent as events."""

from __future__ import annotations

from typing import Any

from . import _session_tracer
from ._errors import ConfigurationError
from ._payloads import plain_payload
from ._phases import FINALIZED, STATUSES, _phases
from ._scopes import SCOPES
from ._session_reasons import reason_text
from ._sessions import check_task_id

__all__ = ["trace_session_event"]


def _check_session_id(session_id: object) -> None:
    if not isinstance(session_id, str):
        raise ConfigurationError(
            f"trace_session_event(session_id): expected a str (a session id), got {session_id!r}"
        )


def trace_session_event(
    event: str,
    session_id: str | None = None,
    task_id: int | str | None = None,
    *,
    status: str | None = None,
    reason: object = None,
    **payload: Any,
) -> None:
    """Record a lifecycle event for a session, or for every pending session of a task.

    Events: ``finalized`` (``status`` one of accepted, rejected, failed,
    dropped; optional ``reason``, a string or an exception, recorded redacted
    as exception text is: no URL userinfo, secret query value or credential),
    and ``<phase>_start`` / ``<phase>_end`` for every registered phase.
    Without *session_id* or *task_id* the current session (else the current
    task) is meant. Finalizing closes open phase executions at
    ``finalized_ts`` (flagged ``truncated``); events for a session that was
    already finalized are dropped and counted.

    Any other keyword is *payload*: on ``finalized`` it joins the record's
    ``payload``; on a phase event, the execution's ``payload``. It is copied
    now, as plain JSON values (NaN as ``"nan"``, other objects as their
    ``str()``).

    Raises:
        ConfigurationError: unknown event, bad status, ``status``/``reason``
            on a phase event, or a *session_id* that is not a str or a
            *task_id* that is not an int or str (checked even when the
            session tracer is off).

    Example:
        >>> trace_session_event("finalized", status="rejected", reason="stale_weight")
        >>> trace_session_event("finalized", status="accepted", reward=0.75)
    """
    if session_id is not None and type(session_id) is not str:
        _check_session_id(session_id)
    if task_id is not None and type(task_id) is not int and type(task_id) is not str:
        task_id = check_task_id(task_id, "trace_session_event(task_id)")
    if event == FINALIZED:
        if status not in STATUSES:
            raise ConfigurationError(
                f"trace_session_event('finalized', status=...): {status!r} is not accepted; "
                f"accepted: {', '.join(STATUSES)}"
            )
        tracer = _session_tracer._tracer
        if tracer is None:
            return
        text = None if reason is None else reason_text(reason)
        if session_id is None and task_id is None:
            session_id = SCOPES.get().session_id
            if session_id is None:
                task_id = SCOPES.get().task_id
        tracer.finalize(
            session_id, task_id, status, text, plain_payload(payload) if payload else None
        )
        return
    phase, _, edge = event.rpartition("_") if isinstance(event, str) else ("", "", "")
    if edge not in ("start", "end") or phase not in _phases:
        accepted = ", ".join([FINALIZED, *(f"{p}_start, {p}_end" for p in sorted(_phases))])
        raise ConfigurationError(
            f"trace_session_event(event): {event!r} is not accepted; accepted: {accepted}"
        )
    if status is not None or reason is not None:
        named = (("status", status), ("reason", reason))
        given = sorted(key for key, value in named if value is not None)
        raise ConfigurationError(
            f"trace_session_event({event!r}): {', '.join(given)} only apply to 'finalized'"
        )
    tracer = _session_tracer._tracer
    if tracer is None:
        return
    if session_id is None and task_id is not None:  # every pending session of the task
        tracer.mark_task(task_id, phase, edge == "start", plain_payload(payload) or None)
        return
    plain = plain_payload(payload) if payload else None
    if session_id is None:  # an explicit "" names no session, as for "finalized"
        session_id = SCOPES.get().session_id
    tracer.mark(session_id, phase, edge == "start", plain)
