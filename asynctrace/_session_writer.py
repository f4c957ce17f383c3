"""The background writer of session records: one JSON line per finished session.

Finalizing a session only appends it to a list (under a short lock); this
thread serializes and writes. It writes when ``flush_threshold`` sessions are
waiting, when :meth:`SessionWriter.flush` asks, and at shutdown. It yields the
GIL between small chunks, so a large flush never stalls an event loop for
long, and each chunk is one ``write`` of whole lines, so a killed process
leaves at most one torn last line.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Final

from ._session_record import Record, encode_records

__all__ = ["SessionWriter"]

logger = logging.getLogger("asynctrace")

_CHUNK: Final = 32  # records serialized between two GIL releases (about 0.1 ms)
_PAUSE_S: Final = 0.0001
_NS: Final = 1e9


class SessionWriter:
    """Appends finished sessions to a JSONL file from a daemon thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rank: int,
        role: str | None,
        run_id: str,
        flush_threshold: int,
    ) -> None:
        self.path = Path(path)
        self._meta = {"rank": rank, "role": role, "run_id": run_id}
        self._threshold = max(1, int(flush_threshold))
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed by the thread
        self._lock = threading.Lock()  # a plain lock: add() is hot
        self._cond = threading.Condition(self._lock)
        self._pending: list[Record] = []
        self._added = 0
        self.written = 0
        self.failed = 0
        self._flush_requested = False
        self._closing = False
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="asynctrace-sessions", daemon=True)
        self._thread.start()

    def add_one(self, record: Record, status: str, reason: str | None, finalized_ns: int) -> None:
        """Queue one finished session: :meth:`add` without the list."""
        record.status, record.reason, record.finalized_ns = status, reason, finalized_ns
        with self._lock:  # the condition's own lock, without its Python-level wrapper
            pending = self._pending
            pending.append(record)
            self._added += 1
            if len(pending) >= self._threshold:
                self._cond.notify()

    def add(
        self, records: list[Record], status: str, reason: str | None, finalized_ns: int
    ) -> None:
        """Queue finished sessions (never blocks on I/O)."""
        for record in records:
            record.status, record.reason, record.finalized_ns = status, reason, finalized_ns
        with self._cond:
            pending = self._pending
            pending += records
            self._added += len(records)
            if len(pending) >= self._threshold:
                self._cond.notify()

    def flush(self, timeout_s: float) -> bool:
        """Write everything queued so far; ``False`` after *timeout_s*."""
        with self._cond:
            target = self._added
            if self.written + self.failed >= target:
                return True
            self._flush_requested = True
            self._cond.notify_all()
            return self._cond.wait_for(
                lambda: self.written + self.failed >= target, max(0.0, timeout_s)
            )

    def shutdown(self, timeout_s: float) -> bool:
        """Write what is queued, stop the thread and close the file."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(max(0.0, timeout_s))
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: (
                        self._closing
                        or self._flush_requested
                        or len(self._pending) >= self._threshold
                    )
                )
                batch, self._pending = self._pending, []
                self._flush_requested = False
                closing = self._closing
            self._write(batch)  # empties the list
            if closing:
                with self._cond:
                    if not self._pending:
                        break
        try:
            self._file.close()
        except OSError:
            pass

    def _write(self, batch: list[Record]) -> None:
        meta = self._meta
        while batch:
            # Consume the batch: a record is released as soon as it is written,
            # before flush() can see it counted.
            chunk = batch[:_CHUNK]
            del batch[:_CHUNK]
            written = failed = 0
            try:
                encoded, failed = encode_records(chunk, meta)
                data = memoryview(encoded)
                while data:
                    data = data[self._file.write(data) or 0 :]
                written = len(chunk) - failed
            except Exception as exc:  # the writer thread never dies
                written, failed = 0, len(chunk)
                exc_info: BaseException | None = exc
            else:
                exc_info = ValueError(f"{failed} records could not be encoded") if failed else None
            if exc_info is not None and not self._warned:
                self._warned = True
                logger.warning(
                    "asynctrace: writing session records to %s failed (further failures "
                    "are counted, not logged)",
                    self.path,
                    exc_info=exc_info,
                )
            del chunk
            with self._cond:
                self.written += written
                self.failed += failed
                if not batch:  # wake flush() waiters once per batch, not per chunk
                    self._cond.notify_all()
            # A real pause, not sleep(0): a thread that releases the GIL and takes it
            # straight back would leave a waiting event loop waiting.
            time.sleep(_PAUSE_S)
