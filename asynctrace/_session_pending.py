"""The session tracer's pending sessions: the live map, the task map, and taking one out.

The record of a live session is only ever changed through the tracer's live
map, under its lock. A session leaves that map in one step (:meth:`_take`),
which also drops it from its task's entry; whoever takes it hands it to the
writer (see :mod:`asynctrace._session_handoff`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ._session_record import Record
from ._session_writer import SessionWriter

__all__ = ["PendingSessions", "task_session_ids"]


def task_session_ids(pending: str | set[str] | None) -> list[str]:
    """The session ids of a task entry."""
    if pending is None:
        return []
    return [pending] if isinstance(pending, str) else list(pending)


class PendingSessions:
    """The state a session tracer keeps, and its pending-session bookkeeping.

    The base of :class:`asynctrace._session_tracer.SessionTracer`, whose
    ``__init__`` makes every attribute declared here (and says what each is).
    """

    _lock: threading.RLock
    _owned: Callable[[], bool]
    _later: list[tuple[Record, str, str | None, int, dict[str, Any] | None]]
    _truncated_base: int
    _live: dict[str, Record]
    _tasks: dict[int | str, str | set[str]]
    _next: Callable[[], int]
    _prefix: str
    dropped_events: int
    _max_pending: int
    evicted: int
    _closed: bool
    _writer: SessionWriter
    _evict_room: int

    def _take(self, session_id: str) -> Record | None:
        """Remove a live session (and its task entry once empty); caller holds the lock.

        An exception a signal handler raises meanwhile (a ``KeyboardInterrupt``)
        never leaves a task entry behind: each change is one step with no call
        after it, and the task map is cleaned in a ``finally``. Whoever takes a
        record and is interrupted before handing it over puts it back (see
        :meth:`_put_back`).
        """
        record = self._live.get(session_id)
        if record is None:
            return None
        try:
            del self._live[session_id]  # one step: no call, where a handler could run
        finally:
            task_id = record.task_id
            if task_id is not None:
                pending = self._tasks.get(task_id)
                if isinstance(pending, str):
                    if pending == session_id:
                        del self._tasks[task_id]
                elif pending is not None:
                    if len(pending) <= 1:  # the last one: the entry goes in one step
                        if not pending or session_id in pending:
                            del self._tasks[task_id]
                    else:
                        pending.discard(session_id)
        return record

    def _put_back(self, record: Record) -> None:
        """Make a taken record live again: its finalization was interrupted (a signal
        handler's exception) before the writer had it. Caller holds the lock."""
        session_id = record.session_id
        self._live[session_id] = record
        task_id = record.task_id
        if task_id is not None:
            pending = self._tasks.get(task_id)
            if pending is None:
                self._tasks[task_id] = session_id
            elif isinstance(pending, str):
                if pending != session_id:
                    self._tasks[task_id] = {pending, session_id}
            else:
                pending.add(session_id)

    def is_pending(self, session_id: str) -> bool:
        """Whether *session_id* is registered here and not finalized, written or evicted yet.

        Example:
            >>> import tempfile
            >>> from asynctrace._session_tracer import SessionTracer
            >>> tracer = SessionTracer(f"{tempfile.mkdtemp()}/sessions-r0.jsonl")
            >>> tracer.is_pending(tracer.register(7))
            True
            >>> tracer.shutdown()
            True
        """
        return session_id in self._live  # one dict lookup: atomic, no lock needed
