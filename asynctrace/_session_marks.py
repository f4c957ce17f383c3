"""Phase executions and counters recorded into live sessions, under the tracer's lock.

Each call changes a record only while it is in the tracer's live map: once
its session was finalized (or evicted, or in a forked child), the call is
dropped and counted in ``dropped_events``. The phase timers
(:mod:`asynctrace._session_phase`) inline :meth:`SessionMarks.phase_start`
and :meth:`SessionMarks.phase_end`; the events and counters call these.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ._phases import _phases
from ._session_pending import PendingSessions, task_session_ids
from ._session_record import merge_payload

__all__ = ["SessionMarks"]


class SessionMarks(PendingSessions):
    """How a session tracer records phase executions and counters."""

    def phase_start(
        self, session_id: str, phase: str, payload: dict[str, Any] | None = None
    ) -> int:
        """Open an execution of *phase*; returns its handle (-1: dropped and counted)."""
        now = time.time_ns()
        with self._lock:
            record = self._live.get(session_id)
            if record is not None:
                runs = record.runs
                if _phases[phase] or phase not in runs[::3]:
                    runs += (phase, now, None)
                    handle = len(runs) - 3
                    if payload:
                        merge_payload(record, handle, payload)
                    return handle
            self.dropped_events += 1
        return -1

    def phase_end(
        self, session_id: str, handle: int, payload: dict[str, Any] | None = None
    ) -> None:
        """Close an execution, unless its session was finalized meanwhile (then drop it)."""
        now = time.time_ns()
        with self._lock:
            record = self._live.get(session_id)
            if record is None or handle < 0:
                self.dropped_events += 1
                return
            record.runs[handle + 2] = now
            if payload:
                merge_payload(record, handle, payload)

    def mark(
        self,
        session_id: str | None,
        phase: str,
        start: bool,
        payload: dict[str, Any] | None = None,
    ) -> None:
        """``<phase>_start`` / ``<phase>_end`` sent as events."""
        if session_id is None:  # no session to apply it to
            with self._lock:
                self.dropped_events += 1
            return
        if start:
            self.phase_start(session_id, phase, payload)
            return
        now = time.time_ns()
        with self._lock:
            record = self._live.get(session_id)
            runs = record.runs if record is not None else []
            for handle in range(len(runs) - 3, -1, -3):  # the latest open one
                if runs[handle] == phase and runs[handle + 2] is None:
                    runs[handle + 2] = now
                    if payload and record is not None:
                        merge_payload(record, handle, payload)
                    return
            self.dropped_events += 1

    def mark_task(
        self,
        task_id: int | str,
        phase: str,
        start: bool,
        payload: dict[str, Any] | None = None,
    ) -> None:
        """A phase event for every pending session of *task_id*."""
        with self._lock:
            session_ids = task_session_ids(self._tasks.get(task_id))
            if not session_ids:
                self.dropped_events += 1
                return
        for session_id in session_ids:
            self.mark(session_id, phase, start, payload)

    def count(self, session_id: str, name: str, value: float) -> None:
        """Add *value* to the session's counter *name*."""
        with self._lock:
            record = self._live.get(session_id)
            if record is None:
                self.dropped_events += 1
                return
            counters = record.counters
            if counters is None:
                fresh: dict[str, float] = {}  # may run a finalizer that counts too
                counters = record.counters
                if counters is None:
                    counters = record.counters = fresh
            total = counters.get(name, 0)
            try:
                counters[name] = total + value
            except OverflowError:  # an int sum past a float's range, then a float
                big = total if type(total) is int else value
                counters[name] = math.inf if big > 0 else -math.inf
