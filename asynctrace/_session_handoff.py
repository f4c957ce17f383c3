"""Finalizing sessions and handing their records to the writer; flush and shutdown.

Finalizing removes a record from the tracer's live map and hands it to the
writer under the same lock, so a record is always in exactly one place (live,
or queued for writing) and nothing can touch it after it was finalized: a
late phase end or event is dropped and counted instead.

The lock is reentrant: the cyclic garbage collector may run a finalizer (a
``__del__`` that finalizes its sample's session, a weakref callback) at an
allocation while this thread holds it, and that finalizer may use the session
API. Such a re-entered call sees and changes the tracer as any call does, but
a session it finalizes is only taken out of the live map then: the code it
interrupted may still be changing that record, so the record (and its
finalize payload) is handed to the writer by the next registration,
finalization or flush on any thread, or at shutdown.
"""

from __future__ import annotations

import time
from typing import Any

from ._session_pending import PendingSessions, task_session_ids
from ._session_record import Record, merge_payload

__all__ = ["SessionHandoff"]


class SessionHandoff(PendingSessions):
    """How a session tracer finalizes sessions and gives their records to its writer."""

    def finalize(
        self,
        session_id: str | None,
        task_id: int | str | None,
        status: str,
        reason: str | None,
        payload: dict[str, Any] | None = None,
    ) -> int:
        """Finalize one session, or every pending session of a task; returns how many."""
        now = time.time_ns()
        if self._owned():  # a finalizer the GC ran while this thread was inside the tracer
            return self._finalize_later(session_id, task_id, status, reason, payload, now)
        if session_id is not None:  # the common case: one session, no list
            with self._lock:
                if self._later:
                    self._hand_over_later()
                record = self._live.get(session_id)
                if record is None:
                    self.dropped_events += 1
                    return 0
                # Handed over under the same lock: a shutdown on another thread sees
                # the record either live or queued, never neither, never both. An
                # exception a signal handler raises before the writer counted it (a
                # KeyboardInterrupt) leaves the session live, not lost.
                added = self._writer.handed_over
                try:
                    if self._take(session_id) is None:
                        # A signal handler or GC finalizer on this thread finalized it
                        # first (at a call above): that finalization wins, as any other.
                        self.dropped_events += 1
                        return 0
                    if payload:
                        merge_payload(record, -1, payload)
                    behind = self._writer.add_one(record, status, reason, now)
                except BaseException:
                    self._undo_take([record], added)
                    raise
            if behind:  # outside the lock: the hand-off may sleep
                self._writer.behind()
            return 1
        with self._lock:
            if self._later:
                self._hand_over_later()
            if task_id is not None:
                live = self._live
                finished = [
                    record
                    for sid in task_session_ids(self._tasks.get(task_id))
                    if (record := live.get(sid)) is not None
                ]
            else:
                finished = []
            if not finished:
                self.dropped_events += 1
                return 0
            added = self._writer.handed_over  # as for one session
            try:
                # Only those taken here: a signal handler or GC finalizer on this
                # thread may have finalized some first (at a call above).
                finished = [r for r in finished if self._take(r.session_id) is not None]
                if not finished:
                    self.dropped_events += 1
                    return 0
                if payload:
                    for record in finished:
                        merge_payload(record, -1, payload)
                refused = self._writer.add(finished, status, reason, now)
            except BaseException:
                self._undo_take(finished, added)
                raise
        if refused:  # outside the lock: the writer warns once
            self._writer.behind()
        return len(finished)

    def _undo_take(self, records: list[Record], added: int) -> None:
        """Put *records* back live: an exception (a signal handler's) interrupted their
        finalization before the writer had them. Caller holds the lock.

        Not when the writer's count moved past *added* (it has them), nor those a
        re-entered finalization took meanwhile (queued in ``_later``, handed over
        from there): live too, they would be written twice.
        """
        if self._writer.handed_over != added:
            return
        later = {id(entry[0]) for entry in self._later}
        for record in records:
            if id(record) not in later:
                self._put_back(record)

    def _finalize_later(
        self,
        session_id: str | None,
        task_id: int | str | None,
        status: str,
        reason: str | None,
        payload: dict[str, Any] | None,
        now: int,
    ) -> int:
        """:meth:`finalize` re-entered: take the sessions now, hand them over later.

        The interrupted code may hold one of these records and go on changing it
        (its payloads too): the writer must not have it before that code is done.
        """
        with self._lock:
            if session_id is not None:
                ids = [session_id]
            else:
                ids = task_session_ids(self._tasks.get(task_id)) if task_id is not None else []
            taken = 0
            for sid in ids:
                record = self._take(sid)
                if record is not None:
                    self._later.append((record, status, reason, now, payload))
                    taken += 1
            if not taken:
                self.dropped_events += 1
            return taken

    def _hand_over_later(self) -> None:
        """Give the writer what re-entered finalizations took (the interrupted code is done)."""
        with self._lock:
            later, self._later = self._later, []
            for record, status, reason, now, payload in later:
                if payload:
                    merge_payload(record, -1, payload)
                self._writer.add([record], status, reason, now)

    def finalize_all_pending(self, reason: str) -> int:
        """At shutdown: write every still-pending session as ``pending``.

        Sessions registered after it are not kept (their events are dropped
        and counted): nothing would ever write them.
        """
        now = time.time_ns()
        outside = not self._owned()
        with self._lock:
            self._closed = True
            records = list(self._live.values())  # may run a finalizer that finalizes some
            self._live.clear()
            self._tasks.clear()
            if self._later and outside:
                self._hand_over_later()
            if records:  # at most max_pending: all are queued, for the shutdown to write
                self._writer.add(records, "pending", reason, now, bounded=False)
        return len(records)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Write every finalized session; ``False`` if that took longer than *timeout_s*."""
        if self._later and not self._owned():
            self._hand_over_later()
        return self._writer.flush(timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Write pending sessions as ``pending``, drain the writer and close the file.

        Waits at most *timeout_s* in all; what the writer has not written by
        then is counted in ``failed`` and logged (see :meth:`SessionWriter.shutdown`).
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        self.finalize_all_pending("unfinished at shutdown")
        if self._later:  # shut down from inside the lock: written now, or never
            self._hand_over_later()
        return self._writer.shutdown(max(0.0, deadline - time.monotonic()))
