"""The session writer's thread: it serializes the records handed over and writes them.

It writes when ``flush_threshold`` sessions are waiting, when a flush asks,
and at shutdown. It yields the GIL between small chunks, so a large flush
never stalls an event loop for long (at shutdown it writes in large chunks
without pausing: then speed is what counts), and each chunk is one ``write``
of whole lines, so a killed process leaves at most one torn last line. The
file itself (torn tails, failed writes, a deleted directory) is
:class:`asynctrace._files.AppendFile`.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from ._jsonl import MAX_LINE_BYTES
from ._session_lines import encode_records
from ._session_record import Record
from ._session_writer_room import WriterRoom

__all__ = ["WriterLoop"]

logger = logging.getLogger("asynctrace")

_CHUNK: Final = 32  # records serialized between two GIL releases (about 0.1 ms)
_CLOSING_CHUNK: Final = 1024  # at shutdown: no pauses, few writes
_STARVED_CHUNK: Final = 128  # starved by a busy loop (see _handoff): no pauses
_PAUSE_S: Final = 0.0001


class WriterLoop(WriterRoom):
    """The writer thread's loop: batches, chunks, the file's sync and reopening."""

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
