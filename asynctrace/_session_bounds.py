"""Registering sessions within bounds: past ``max_pending``, the oldest are evicted.

A session nobody finalizes is a leak: the tracer keeps at most
``session_tracer.max_pending`` pending sessions, and past that writes the
oldest as ``pending`` with reason :data:`EVICTED`.
"""

from __future__ import annotations

import itertools
import logging
import time

from ._session_handoff import SessionHandoff
from ._session_record import Record

__all__ = ["DEFAULT_MAX_PENDING", "EVICTED", "SessionBounds"]

logger = logging.getLogger("asynctrace")

DEFAULT_MAX_PENDING = 100_000
"""Pending sessions a tracer keeps by default (``session_tracer.max_pending``)."""

EVICTED = "evicted"
"""The reason of a session written as ``pending`` to keep the pending ones within bounds."""

_EVICT_SHARE = 100  # past the bound, the oldest 1/100 of it goes at once (see _evict)


class SessionBounds(SessionHandoff):
    """How a session tracer registers sessions, and evicts the oldest past its bound."""

    def register(self, task_id: int | str | None) -> str:
        """Register a new pending session under *task_id*; returns its id.

        After :meth:`finalize_all_pending` (shutdown), or in a forked child,
        the session is not kept: the registration is counted as a dropped
        event, and so is each of its later events.
        """
        kind = type(task_id)
        if kind is not int and kind is not str and isinstance(task_id, str):  # numpy.str_
            task_id = str.__str__(task_id)  # hashed and redacted as the plain str it holds
        session_id = self._prefix + str(self._next())
        record = Record(session_id, task_id, time.time_ns())
        if self._later and not self._owned():
            self._hand_over_later()
        with self._lock:
            if self._closed:  # a caller that found this tracer just before its shutdown
                self.dropped_events += 1
                return session_id
            self._live[session_id] = record
            if task_id is not None:
                tasks = self._tasks
                while True:
                    pending = tasks.get(task_id)
                    if pending is None:
                        tasks[task_id] = session_id
                    elif isinstance(pending, str):
                        both = {pending, session_id}  # may run a finalizer that changes tasks
                        if tasks.get(task_id) is not pending:
                            continue
                        tasks[task_id] = both
                    else:
                        pending.add(session_id)
                    break
            over = len(self._live) > self._max_pending  # sessions nobody finalizes: a leak
        if over:
            self._evict()
        return session_id

    def _evict(self) -> None:
        """Write the oldest pending sessions as ``pending``, reason :data:`EVICTED`.

        Called past ``max_pending`` live sessions. The oldest hundredth of
        the bound goes at once: a dict's first key is found by skipping the
        slots its removed keys left, so taking them one at a time would cost
        a scan per registration. A registration by a finalizer the garbage
        collector ran inside the tracer leaves it to the next one (the code
        it interrupted may be changing one of these records). Warned once.
        """
        if self._owned():
            return
        with self._lock:
            count = len(self._live) - self._max_pending
            if count <= 0:
                return
            count += self._max_pending // _EVICT_SHARE
            oldest = list(itertools.islice(self._live, count))
            records = [record for sid in oldest if (record := self._take(sid)) is not None]
            self._writer.add(records, "pending", EVICTED, time.time_ns(), self._evict_room)
            first = not self.evicted
            self.evicted += len(records)
        # Outside the lock: a writer starved by this thread catches up.
        self._writer.behind(self._evict_room)
        if first:
            logger.warning(
                "asynctrace: more than %d sessions are pending (session_tracer.max_pending); "
                "the oldest are written as pending with reason %r and counted in "
                "stats()['evicted'] (those evicted while %d records wait to be written are "
                "not kept, and are counted in stats()['failed']; further evictions are "
                "not logged): finalize every session, or raise session_tracer.max_pending",
                self._max_pending,
                EVICTED,
                self._evict_room,
            )
