"""Waiting for the session writer: flush, shutdown (abandoned past its timeout), and the
inert writer of a forked child."""

from __future__ import annotations

import logging

from ._config_checks import MAX_WAIT_S as _MAX_WAIT_S  # a longer wait raises OverflowError
from ._session_writer_room import WriterRoom

__all__ = ["WriterStop"]

logger = logging.getLogger("asynctrace")


class WriterStop(WriterRoom):
    """How a session writer's records are made durable, and how the writer stops."""

    def flush(self, timeout_s: float) -> bool:
        """Write everything queued so far and make it durable (``fdatasync``); ``False``
        after *timeout_s*, or if records were lost.

        A record that could not be written since the last flush (see
        ``failed``), or a file the disk would not make durable, makes this
        flush return ``False``, once.

        Called on a thread that is inside the writer already (a signal handler
        that interrupted the hand-over of a record, a finalizer the garbage
        collector ran there), it does not wait: waiting would let the writer
        take the records from under the interrupted code. It asks the writer to
        write and sync, and returns at once whether everything handed over so far
        was durable already (``False`` otherwise), as it does once the writer
        has stopped.
        """
        reentered = self._lock._is_owned()  # type: ignore[attr-defined]
        with self._cond:
            target = self._added
            if self._synced < target and not self._stopped:
                self._flush_requested = True
                self._cond.notify_all()
                if not reentered:
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
            in_flight = max(0, self._added - self.written - self.failed)
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
