"""The bound on the session records a writer holds, and the warning when it refuses one.

What waits to be written is bounded: a write that never returns (a hung NFS
or Lustre mount) or a writer slower than sessions finish would otherwise keep
every finished record in memory. The bound is the largest of ``max_queued``
(the tracer's ``max_pending``: a task may finalize that many at once),
:data:`asynctrace._session_writer.MIN_QUEUED` (a lowered ``max_pending``
catches leaks sooner, it does not make the writer's queue smaller) and two
flush thresholds (the writer wakes at one). It bounds the records held: those
waiting and what is left of the batch being written, so room comes back as
each chunk is written. Past it a record is refused and counted in ``failed``;
the first refusal is warned about, and so is the first one after the writer
has caught up (at most once every :data:`_WARN_FULL_EVERY_S`).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Final

from ._files import AppendFile
from ._handoff import Handoff
from ._session_record import Record

__all__ = ["WriterRoom"]

logger = logging.getLogger("asynctrace")

_WARN_FULL_EVERY_S: Final = 60.0  # refusals warned about again at most this often


class WriterRoom:
    """The state a session writer keeps, and the room left for what it holds.

    The base of :class:`asynctrace._session_writer.SessionWriter`, whose
    ``__init__`` makes every attribute declared here (and says what each is).
    """

    path: Path
    _meta: dict[str, Any]
    _threshold: int
    _file: AppendFile
    _lock: threading.RLock
    _cond: threading.Condition
    _pending: list[Record]
    _batch: list[Record]
    _max_queued: int
    _room: int
    _limit: int
    _full_warning: int
    _refused: int
    _held_at_refusal: int
    _bound_at_refusal: int
    _full_warned_at: float | None
    _added: int
    written: int
    failed: int
    lost: int
    _in_file: int
    _failed_seen: int
    _synced: int
    _sync_errors: int
    _sync_errors_seen: int
    _flush_requested: bool
    _closing: bool
    _stopped: bool
    _abandoned: bool
    _warned: bool
    _warned_overlong: bool
    _handoff: Handoff
    _thread: threading.Thread

    def held(self) -> int:
        """The records held for the writer: waiting, and what is left of its batch."""
        return self._max_queued - self._room + len(self._pending)

    def _count_refused(self, count: int, bound: int | None = None) -> None:
        """*count* records refused for want of room (the lock held): failed, and warned.

        *bound*: the room they were refused past, if not the writer's own.
        """
        self.failed += count
        self._refused += count
        # Held: waiting, and what is left of the batch (see _set_room).
        self._held_at_refusal = self.held()
        self._bound_at_refusal = self._max_queued if bound is None else bound
        if not self._full_warning:
            self._full_warning = 1

    def _set_room(self, held: int) -> None:
        """The room left with *held* records taken to be written (the lock held)."""
        self._room = self._max_queued - held
        self._limit = min(self._threshold, self._room)

    def _warn_full(self) -> None:
        """Records refused: as many as the bound were held for the writer.

        Warned at the first refusal, then again at the first refusal after the
        writer has written all it held (a new episode), but at most once every
        :data:`_WARN_FULL_EVERY_S`: a refusal sooner than that is warned about
        at the first refusal past it. Each warning gives the records refused in all.
        """
        now = time.monotonic()
        with self._lock:
            if self._full_warning != 1:
                return
            last = self._full_warned_at
            if last is not None and now - last < _WARN_FULL_EVERY_S:
                return  # stays 1: a refusal past the interval warns
            self._full_warning = 2
            self._full_warned_at = now
            refused = self._refused
            held, bound = self._held_at_refusal, self._bound_at_refusal
        again = "" if last is None else "again "
        logger.warning(
            "asynctrace: %d session records are %sheld for the writer of %s (%d at most), "
            "and further finished sessions are not kept until it catches up (%d "
            "refused so far, counted in stats()['failed']; logged again, at most once a "
            "minute, only if it happens after the writer caught up): a write does not "
            "return (a hung file system?) or is slower than sessions finish; check the "
            "file system of output_dir, or raise session_tracer.max_pending",
            held,
            again,
            self.path,
            bound,
            refused,
        )
