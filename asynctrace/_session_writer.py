"""The background writer of session records: one JSON line per finished session.

Finalizing a session only appends it to a list (under a short lock); this
thread serializes and writes. It writes when ``flush_threshold`` sessions are
waiting, when :meth:`SessionWriter.flush` asks, and at shutdown. It yields the
GIL between small chunks, so a large flush never stalls an event loop for
long (at shutdown it writes in large chunks without pausing: then speed is
what counts), and each chunk is one ``write`` of whole lines, so a killed
process leaves at most one torn last line. The file itself (torn tails,
failed writes, a deleted directory) is :class:`asynctrace._files.AppendFile`.

What waits to be written is bounded: a write that never returns (a hung NFS
or Lustre mount) or a writer slower than sessions finish would otherwise keep
every finished record in memory. The bound is the largest of ``max_queued``
(the tracer's ``max_pending``: a task may finalize that many at once),
:data:`MIN_QUEUED` (a lowered ``max_pending`` catches leaks sooner, it does
not make the writer's queue smaller) and two flush thresholds (the writer
wakes at one). It bounds the records held: those waiting and what is left of
the batch being written, so room comes back as each chunk is written. Past it
a record is refused and counted in ``failed``; the first refusal is warned
about, and so is the first one after the writer has caught up (at most once
every :data:`_WARN_FULL_EVERY_S`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Final

from ._files import AppendFile
from ._forksafe import call_in_child, reinit_at_fork
from ._handoff import Handoff
from ._jsonl import MAX_LINE_BYTES
from ._own_threads import leaving_signals
from ._session_record import Record, encode_records

__all__ = ["MIN_QUEUED", "SessionWriter"]

logger = logging.getLogger("asynctrace")

_CHUNK: Final = 32  # records serialized between two GIL releases (about 0.1 ms)
_CLOSING_CHUNK: Final = 1024  # at shutdown: no pauses, few writes
_STARVED_CHUNK: Final = 128  # starved by a busy loop (see _handoff): no pauses
_PAUSE_S: Final = 0.0001
_MAX_WAIT_S: Final = threading.TIMEOUT_MAX / 2
_WARN_FULL_EVERY_S: Final = 60.0  # refusals warned about again at most this often

MIN_QUEUED: Final = 100_000
"""Records waiting to be written that a writer keeps at least (some 50 MB at most)."""


class SessionWriter:
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
            self._added += 1
            if self._stopped:  # after shutdown, or in a forked child: counted, not written
                self.failed += 1
                return False
            pending = self._pending
            pending.append(record)
            queued = len(pending)
            if queued >= self._limit:
                if queued > self._room:  # the writer is that far behind (a hung mount)
                    pending.pop()
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
        with self._cond:
            self._added += len(records)
            if self._stopped:
                self.failed += len(records)
                return len(records)
            pending = self._pending
            refused = 0
            if bounded:
                # The bound counts what held() does: the chunk being written too.
                free = (self._max_queued if room is None else room) - self.held()
                refused = max(0, min(len(records), len(records) - free))
                if refused:
                    records = records[: len(records) - refused]
            pending += records
            if refused:
                self._count_refused(refused, room)
            # Woken at the threshold, or sooner at a room below it: records refused
            # while a writer that could take them sleeps would be lost for nothing.
            if len(pending) >= self._threshold or (refused and room is not None):
                self._cond.notify()
            return refused

    def flush(self, timeout_s: float) -> bool:
        """Write everything queued so far and make it durable (``fdatasync``); ``False``
        after *timeout_s*, or if records were lost.

        A record that could not be written since the last flush (see
        ``failed``), or a file the disk would not make durable, makes this
        flush return ``False``, once.
        """
        with self._cond:
            target = self._added
            if self._synced < target and not self._stopped:
                self._flush_requested = True
                self._cond.notify_all()
                self._cond.wait_for(
                    lambda: self._synced >= target or self._stopped,
                    min(max(0.0, timeout_s), _MAX_WAIT_S),
                )
            # A stopped writer (shut down, crashed, inert in a forked child) syncs no more:
            # its counts are final, and what it could not write is counted failed.
            done = (self.written + self.failed if self._stopped else self._synced) >= target
            return not self._lost_now() and done

    def shutdown(self, timeout_s: float) -> bool:
        """Write what is queued, stop the thread and close the file.

        ``False`` if that took longer than *timeout_s*, or if any record
        could not be written since the last :meth:`flush`. Past *timeout_s*
        the writer is abandoned (see :meth:`_abandon`): what it has not
        started writing is counted in ``failed`` and a warning says how many.
        """
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(min(max(0.0, timeout_s), _MAX_WAIT_S))
        if self._thread.is_alive():
            self._abandon()
            return False
        with self._cond:
            return not self._lost_now()

    def _abandon(self) -> None:
        """Shutdown timed out: count what will not be written, and say so.

        The thread is a daemon: at exit the interpreter stops it wherever it
        is. Waiting longer would break the bound on shutdown, and writing on
        the calling thread would too, so the records the thread has not
        started on are taken from it, counted in ``failed`` and logged once;
        it finishes the chunk it is writing (1,024 records at most), then
        stops and closes the file (if the process lives on).
        """
        with self._cond:
            if self._abandoned:
                return
            self._abandoned = True
            self._stopped = True  # records handed over from now on are counted failed
            unwritten = len(self._pending) + len(self._batch)
            self._pending = []
            self._batch.clear()
            self.failed += unwritten
            self._failed_seen = self.failed  # reported: shutdown() returns False
            in_flight = self._added - self.written - self.failed
            self._cond.notify_all()
        if not unwritten and not in_flight:
            return
        logger.warning(
            "asynctrace: the session writer did not finish within the shutdown timeout: "
            "%d session records were not written to %s (counted in stats()['failed']; "
            "%d more were being written); raise shutdown_timeout_s, or pass a longer "
            "timeout_s to shutdown()",
            unwritten,
            self.path,
            in_flight,
        )

    def _lost_now(self) -> bool:
        """Whether a record failed, or the file could not be made durable, since the last
        :meth:`flush` or :meth:`shutdown` that said so (call holding the lock)."""
        lost = self.failed > self._failed_seen or self._sync_errors > self._sync_errors_seen
        self._failed_seen = self.failed
        self._sync_errors_seen = self._sync_errors
        return lost

    def _run(self) -> None:
        self._handoff.attach()
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(
                        lambda: (
                            self._closing
                            or self._flush_requested
                            or len(self._pending) >= self._threshold
                        )
                    )
                    self._handoff.ran()
                    self._batch, self._pending = self._pending, []
                    self._set_room(len(self._batch))  # until _next_chunk
                    durable = self._flush_requested or self._closing
                    self._flush_requested = False
                    closing = self._closing
                self._write(closing)  # empties the batch
                if durable:  # flush() returns once what it waits for is on disk
                    self._sync()
                if not self._pending:
                    self._handoff.caught_up()
                if closing:
                    with self._cond:
                        if not self._pending:
                            self._stopped = True
                            self._cond.notify_all()
                            break
        except BaseException as exc:  # never silently: what is left is counted as failed
            with self._cond:
                self._stopped = True
                self.failed += len(self._pending) + len(self._batch)
                self._pending = []
                self._batch = []
                self._cond.notify_all()
            logger.warning("asynctrace: the session writer stopped", exc_info=exc)
        self._file.close()

    def _write(self, closing: bool) -> None:
        """Write ``self._batch`` chunk by chunk, until it is empty or the writer abandoned.

        Each chunk is taken from the batch under the lock, where :meth:`_abandon`
        counts what is left: a record is written or counted failed, never both.
        """
        meta = self._meta
        with self._cond:
            chunk, starved = self._next_chunk(closing)
        while chunk:
            error: BaseException | None = None
            written = 0
            try:
                encoded, failed, overlong = encode_records(chunk, meta)
                if overlong:
                    self._warn_overlong(overlong)
                if failed > overlong:
                    error = ValueError(f"{failed - overlong} records could not be encoded")
                if encoded:
                    written, error = self._append(encoded, error, len(chunk) - failed)
            except Exception as exc:  # the writer thread never dies
                written, error = 0, exc
            failed = len(chunk) - written
            if error is not None and not self._warned:
                self._warned = True
                logger.warning(
                    "asynctrace: writing session records to %s failed (further failures "
                    "are counted, not logged; see stats())",
                    self.path,
                    exc_info=error,
                )
            # A record is released as soon as it is written, before flush() can see it
            # counted.
            del chunk
            self._handoff.ran()  # a chunk done: the hand-off sees progress within a batch
            with self._cond:
                self.written += written
                self.failed += failed
                paused = not closing and not starved
                chunk, starved = self._next_chunk(closing)
                if not chunk:  # wake flush() waiters once per batch, not per chunk
                    if self._full_warned_at is not None:  # caught up: a new episode
                        self._full_warning = 0  # (the first warning is never skipped)
                    self._cond.notify_all()
            if chunk and paused:
                # A real pause, not sleep(0): a thread that releases the GIL and takes it
                # straight back would leave a waiting event loop waiting.
                time.sleep(_PAUSE_S)

    def _warn_overlong(self, count: int) -> None:
        """Records too long for a line the readers read: counted failed, warned once."""
        if self._warned_overlong:
            return
        self._warned_overlong = True
        logger.warning(
            "asynctrace: %d session records were not written to %s: even without their "
            "payloads each is longer than the %d bytes asynctrace's readers read in a line "
            "(counted in stats()['failed']; further ones are not logged): give a session "
            "fewer executions or counters",
            count,
            self.path,
            MAX_LINE_BYTES,
        )

    def _next_chunk(self, closing: bool) -> tuple[list[Record], bool]:
        """The next chunk of the batch (none once abandoned), and whether the writer is
        starved (call holding the lock).

        The chunks written are released: ``_pending`` has room for what they held,
        the bound less what is left of the batch, this chunk included.
        """
        held = len(self._batch)
        self._set_room(held)
        if self._abandoned:
            return [], False
        # Starved by a busy loop, each pause would wait for another hand-off:
        # larger chunks without pauses (about 0.8 ms a chunk).
        starved = self._handoff.starved
        size = _CLOSING_CHUNK if closing else _STARVED_CHUNK if starved else _CHUNK
        batch = self._batch
        chunk = batch[:size]
        del batch[:size]
        return chunk, starved

    def _sync(self) -> None:
        """``fdatasync`` the file; wake flush() waiters with what it now covers."""
        error = self._file.sync()
        if error is not None and not self._warned:
            self._warned = True
            logger.warning(
                "asynctrace: %s could not be made durable (further failures are not logged)",
                self.path,
                exc_info=error,
            )
        with self._cond:
            self._synced = self.written + self.failed
            if error is not None:
                self._sync_errors += 1
            self._cond.notify_all()

    def _append(
        self, encoded: bytes, error: BaseException | None, lines: int
    ) -> tuple[int, BaseException | None]:
        """Write *encoded*, *lines* lines (reopening a moved file first); the lines written."""
        out = self._file
        if out.moved():
            if not out.rotated:  # renamed away intact (logrotate): its records are not lost
                with self._cond:
                    self.lost += self._in_file
            self._in_file = 0
            try:
                out.reopen()
            except OSError as exc:
                return 0, exc
        done, write_error = out.write(encoded, lines)
        self._in_file += done
        return done, write_error or error

    def _after_fork_in_child(self) -> None:
        """A forked child has no writer thread: this writer goes inert (counts, never writes).

        What the parent had queued, and its failures, are the parent's to report: a
        child's flush() answers for what the child hands over.
        """
        self._pending = []
        self._batch = []
        self._stopped = True
        self._closing = True
        self._added = self.written + self.failed
        self._failed_seen = self.failed
        self._sync_errors_seen = self._sync_errors
