"""The background writer of session records: one JSON line per finished session.

Finalizing a session only appends it to a list (under a short lock), which
is bounded (see :mod:`asynctrace._session_writer_room`); a daemon thread
serializes and writes (see :mod:`asynctrace._session_writer_loop`), and
:meth:`SessionWriter.flush` and :meth:`SessionWriter.shutdown` wait for it
(see :mod:`asynctrace._session_writer_stop`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Final

from ._files import AppendFile
from ._forksafe import call_in_child, reinit_at_fork
from ._handoff import Handoff
from ._own_threads import leaving_signals
from ._session_record import Record
from ._session_writer_loop import WriterLoop
from ._session_writer_stop import WriterStop

__all__ = ["MIN_QUEUED", "SessionWriter"]

MIN_QUEUED: Final = 100_000
"""Records waiting to be written that a writer keeps at least (some 50 MB at most)."""


class SessionWriter(WriterStop, WriterLoop):
    """Appends finished sessions to a JSONL file from a daemon thread.

    ``written`` counts records that reached the file, ``failed`` those that
    did not (a failed write, a value that cannot be encoded, a record too
    long for a line the readers read even without its payloads, a record handed
    over after the writer stopped or left when its shutdown timed out, one
    with no room: as many as the bound already held), ``lost`` those written to a file that was
    later deleted or replaced.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rank: int,
        role: str | None,
        run_id: str,
        flush_threshold: int,
        max_queued: int = MIN_QUEUED,
    ) -> None:
        self.path = Path(path)
        self._meta: dict[str, Any] = {"rank": rank, "role": role, "run_id": run_id}
        self._threshold = max(1, int(flush_threshold))
        self._file = AppendFile(self.path)
        # Reentrant: a GC finalizer may finalize a session while this thread is inside the
        # writer (an RLock costs what a Lock does).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._pending: list[Record] = []
        self._batch: list[Record] = []  # taken from _pending, being written chunk by chunk
        self._max_queued = max(int(max_queued), MIN_QUEUED, 2 * self._threshold)
        # Room for _pending: max_queued less what is left of the batch (the chunk being
        # written included), updated as each chunk is taken (see _next_chunk). add_one
        # compares the queue with _limit, min(flush threshold, room): no more than it did
        # for the threshold alone.
        self._room = self._max_queued
        self._limit = min(self._threshold, self._room)
        # 0: no refusal to tell of, 1: records refused, not warned about yet, 2: warned.
        # Back to 0 once the writer has written all it held (a later refusal warns again),
        # after the first warning: refusals the interval kept from being warned about
        # are then counted, not logged.
        self._full_warning = 0
        self._refused = 0  # records refused for want of room, in all
        # At the last refusal: the records held for the writer, and the bound they met.
        self._held_at_refusal = 0
        self._bound_at_refusal = self._max_queued
        self._full_warned_at: float | None = None  # time.monotonic() of that warning
        self._added = 0
        self.written = 0
        self.failed = 0
        self.lost = 0
        self._in_file = 0  # records written to the file as it is now (lost if it goes)
        self._failed_seen = 0  # failures already reported by a flush() returning False
        self._synced = 0  # written + failed when the file was last made durable
        self._sync_errors = 0  # fdatasync refused (the records may not survive a power loss)
        self._sync_errors_seen = 0
        self._flush_requested = False
        self._closing = False
        self._stopped = False
        self._abandoned = False  # shutdown timed out: the thread writes no further chunk
        self._warned = False
        self._warned_overlong = False  # a record too long for a line (see _warn_overlong)
        reinit_at_fork(self._cond, self._lock)
        call_in_child(self._after_fork_in_child)
        self._handoff = Handoff(0.5)  # see asynctrace._handoff: a busy loop starves the writer
        self._thread = threading.Thread(
            target=leaving_signals(self._run), name="asynctrace-sessions", daemon=True
        )
        self._thread.start()

    @property
    def threshold(self) -> int:
        """The records waiting that wake the writer (``flush_threshold``)."""
        return self._threshold

    @property
    def handed_over(self) -> int:
        """The records handed over so far (queued, or counted in ``failed``).

        It changes exactly when a record is queued or counted, with no call
        between, where a signal handler could run: a caller that compares it
        before and after an interrupted :meth:`add_one` or :meth:`add` knows
        whether the writer has the records.
        """
        return self._added

    def set_style(self, style: str) -> None:
        """Write the records not written yet in *style* (see ``record_dict``)."""
        self._meta = {**self._meta, "style": style}  # one store: the writer reads it per batch

    def add_one(self, record: Record, status: str, reason: str | None, finalized_ns: int) -> bool:
        """Queue one finished session: :meth:`add` without the list.

        Returns whether a whole flush threshold more now waits (or, once the
        writer is found starved, whether a threshold waits at all), or whether
        the record was refused (as many as the bound wait already; counted in
        ``failed``): the caller then calls :meth:`behind` once it holds no lock
        of its own.
        """
        record.status, record.reason, record.finalized_ns = status, reason, finalized_ns
        with self._lock:  # the condition's own lock, without its Python-level wrapper
            if self._stopped:  # after shutdown, or in a forked child: counted, not written
                self.failed += 1
                self._added += 1
                return False
            # The hand-over: counted and appended with no call between, where a signal
            # handler could run (its exception lands before both or after both); an
            # exception at the append itself (a trace function's) undoes the count.
            self._added += 1
            try:
                self._pending.append(record)
            except BaseException:
                if not self._pending or self._pending[-1] is not record:
                    self._added -= 1
                raise
            queued = len(self._pending)
            if queued >= self._limit:
                if queued > self._room:  # the writer is that far behind (a hung mount)
                    try:
                        self._pending.pop()
                    finally:  # counted failed even if a signal's exception follows the pop
                        self._count_refused(1)
                    return True  # behind() warns, outside the lock
                if queued >= self._threshold:
                    self._cond.notify()
        # Once starved, offered at every record (the hand-off keeps to one sleep a
        # millisecond): once a threshold, it would get the lock a few times a second.
        return not queued % self._threshold or (
            self._handoff._starved and queued >= self._threshold
        )

    def behind(self, room: int | None = None) -> None:
        """Records wait: a writer starved by a busy loop gets the interpreter lock.

        It may sleep 0.2 ms (see :mod:`asynctrace._handoff`): call it holding
        no lock, so that no other thread waits through that sleep. With the
        *room* given to :meth:`add`, half of it held is urgent: the writer is
        given the lock at once, not only once found starved. It also logs
        that records were refused for want of room (see :meth:`_warn_full`; a
        logging handler may block: on the same hung mount, say).
        """
        if self._full_warning == 1:
            self._warn_full()
        # Read without the lock: a hint, as the hand-off's own are.
        urgent = room is not None and 2 * self.held() >= room
        self._handoff.offer(self._thread, urgent)

    def add(
        self,
        records: list[Record],
        status: str,
        reason: str | None,
        finalized_ns: int,
        room: int | None = None,
        *,
        bounded: bool = True,
    ) -> int:
        """Queue finished sessions (never blocks on I/O); returns how many were not queued.

        Only as many as leave at most the bound's records (or *room*, if
        given) waiting to be written are queued: the rest are counted in
        ``failed``, as :meth:`add_one` counts them (call :meth:`behind` after
        a refusal, holding no lock). Not *bounded*: all are queued (the
        pending sessions at shutdown, bounded by ``max_pending`` already).
        """
        for record in records:
            record.status, record.reason, record.finalized_ns = status, reason, finalized_ns
        count = len(records)
        with self._cond:
            if self._stopped:
                self.failed += count
                self._added += count
                return count
            refused = 0
            if bounded:
                # The bound counts what held() does: the chunk being written too.
                free = (self._max_queued if room is None else room) - self.held()
                refused = max(0, min(count, count - free))
                if refused:
                    records = records[: count - refused]
            # As in add_one: counted and queued with no call between.
            before = len(self._pending)
            self._added += count - refused
            try:
                self._pending += records
            except BaseException:
                if len(self._pending) == before:
                    self._added -= count - refused
                raise
            if refused:
                self._count_refused(refused, room)
                self._added += refused  # after: a signal's exception between stalls no flush
            # Woken at the threshold, or sooner at a room below it: records refused
            # while a writer that could take them sleeps would be lost for nothing.
            if len(self._pending) >= self._threshold or (refused and room is not None):
                self._cond.notify()
            return refused
