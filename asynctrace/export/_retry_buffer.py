"""The retry buffer: failed batches held in order, bounded in spans and in bytes.

Flush markers wait in the same line, so that a flush is honoured only once
everything before it was delivered or given up. Past either bound, the
oldest held spans are dropped and counted.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from ._export_attempt import ExportAttempts
from ._sync import _Marker

__all__ = ["DEFAULT_BUFFER_BYTES", "DEFAULT_BUFFER_SPANS", "Held", "RetryBuffer"]

logger = logging.getLogger("asynctrace")

DEFAULT_BUFFER_SPANS = 65_536
DEFAULT_BUFFER_BYTES = 64 << 20


class Held:
    """A batch that failed, waiting for its next attempt."""

    __slots__ = ("attempts", "size", "spans")

    def __init__(self, spans: list[Any], size: int, attempts: int) -> None:
        self.spans = spans
        self.size = size
        self.attempts = attempts


class RetryBuffer(ExportAttempts):
    """How a retrying queue holds failed batches, drops the oldest and honours flushes.

    A base of :class:`~._retry.RetryingSpanProcessor`, whose ``__init__``
    makes every attribute declared here (and says what each is).
    """

    _buffer_spans: int
    _buffer_bytes: int
    _pending: deque[Held | _Marker]
    _pending_spans: int
    _pending_bytes: int
    _trimmed: int
    _warned_overflow: bool

    def _resolve(self, held: Held, delivered: bool) -> None:
        """A held batch leaves the buffer: exported (but what was left out), or failed."""
        left_out = self._left_out if delivered else 0
        with self._moves:
            self._release(held)
            if delivered:
                self._exported += len(held.spans) - left_out
                self._failed += left_out
            else:
                self._failed += len(held.spans)

    def _release(self, held: Held) -> None:  # inside a move
        self._pending.remove(held)
        self._pending_spans -= len(held.spans)
        self._pending_bytes -= held.size

    def _hold(self, held: Held) -> None:  # inside a move
        self._pending.append(held)
        self._pending_spans += len(held.spans)
        self._pending_bytes += held.size
        self._trim()

    def _trim(self) -> None:
        """Drop the oldest held spans until the buffer is within both limits."""
        while self._pending_spans > self._buffer_spans or self._pending_bytes > self._buffer_bytes:
            oldest = next(item for item in self._pending if isinstance(item, Held))
            per_span = max(1, oldest.size // max(1, len(oldest.spans)))
            over_bytes = self._pending_bytes - self._buffer_bytes
            count = max(self._pending_spans - self._buffer_spans, -(-over_bytes // per_span), 1)
            count = min(count, len(oldest.spans))
            size = oldest.size if count == len(oldest.spans) else per_span * count
            del oldest.spans[:count]
            oldest.size -= size
            self._pending_spans -= count
            self._pending_bytes -= size
            if not oldest.spans:
                self._pending.remove(oldest)
            self._trimmed += count  # inside a move: never wait for a lock a reader may hold
            if not self._warned_overflow:
                self._warned_overflow = True
                logger.warning(
                    "asynctrace: the retry buffer of %r is full (retry_buffer_spans=%d, "
                    "retry_buffer_bytes=%d); the oldest spans are dropped and counted",
                    self.name,
                    self._buffer_spans,
                    self._buffer_bytes,
                )

    def _honour(self, marker: _Marker) -> None:
        self._flush_sink()
        with self._marker_lock:
            self._markers -= 1
        marker.done.set()
