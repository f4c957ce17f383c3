"""An export queue whose failed batches wait in a bounded buffer and are retried.

Used for OTLP. On the producing thread nothing changes: ``end()`` appends to
the bounded queue of :class:`~._queue.QueuedSpanProcessor`. On the worker
thread a batch the exporter reports ``FAILURE`` for is *held*: kept, in
order, in a buffer bounded in spans and in (estimated encoded) bytes, and
sent again with exponential backoff and jitter. While anything is held, new
batches queue up behind it, so one attempt per backoff period goes out
during an outage, not one per batch. What does not fit is dropped oldest
first and counted. A flush waits until everything before it was delivered
(or dropped, which makes it return ``False``).

Two layers retry: inside one attempt, OpenTelemetry's exporter retries
transient errors with its own backoff, never longer than its timeout
(``OTEL_EXPORTER_OTLP_TIMEOUT``); across attempts, this buffer does, for as
long as it holds the batch. See ``docs/design.md``.

Not everything that fails is held. A batch the backend refuses for good
(the exporter says so: an HTTP status other than 429, 502, 503 and 504, a
redirect, a batch that cannot be encoded or is too large) is counted as
failed at once. A held batch that failed three times with nothing to say
why (gRPC, which does not hand the status on, or no response at all) is
given up when the batch after it goes through; one the backend asked to
retry (429, 502, 503, 504, a gRPC status with ``RetryInfo``) never is.

A backend that says when to come back (``Retry-After`` on a 429 or 503,
gRPC ``RetryInfo``) gets no request before then, not for a flush and not at
shutdown, up to :data:`~._export_attempt.MAX_RETRY_AFTER_S`. Spans a
delivered batch's backend rejected (OTLP partial success) are counted as
failed, not exported.

One concept per module: an attempt and the exporter's answer
(:mod:`._export_attempt`), the buffer (:mod:`._retry_buffer`), when a held
batch goes again (:mod:`._retry_schedule`), the size estimate
(:mod:`._span_bytes`); here, the worker's loop and the counters.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .._fast import _deferred
from .._fast._pending import SEEN as _SEEN
from .._forksafe import reinit_at_fork
from ._otlp_wire import EncodedSpan
from ._retry_buffer import DEFAULT_BUFFER_BYTES, DEFAULT_BUFFER_SPANS, Held
from ._retry_schedule import RetrySchedule
from ._sinks import ExporterSink
from ._span_bytes import estimate_bytes
from ._stats import ExportStats
from ._sync import _Marker

__all__ = ["RetryingSpanProcessor"]


class RetryingSpanProcessor(RetrySchedule):
    """Export from a bounded queue; hold failed batches in a bounded buffer and retry them.

    Args:
        exporter: an SDK ``SpanExporter`` (OpenTelemetry's OTLP exporter).
        name: shown in logs, thread names and :class:`~._stats.ExportStats`.
        convert: turns a queued span into what *exporter* takes (a fast
            provider's span into its OTLP bytes, an ``EncodedSpan``, or into a
            ``ReadableSpan``); ``None``: as they are.
        buffer_spans: spans held for retry at most.
        buffer_bytes: estimated encoded bytes held for retry at most.
        **limits: ``max_queue_size``, ``max_export_batch_size``,
            ``schedule_delay_millis``, as for the base class.

    Example:
        >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        ...     InMemorySpanExporter)
        >>> processor = RetryingSpanProcessor(InMemorySpanExporter(), name="otlp")
        >>> processor.shutdown_within(1.0), processor.stats().retried
        (True, 0)
    """

    def __init__(
        self,
        exporter: Any,
        *,
        name: str,
        convert: Callable[[Any], Any] | None = None,
        buffer_spans: int = DEFAULT_BUFFER_SPANS,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        **limits: Any,
    ) -> None:
        # Everything the worker reads is set before the base class starts it.
        self._exporter = exporter
        self._convert = convert
        self._buffer_spans = buffer_spans
        self._buffer_bytes = buffer_bytes
        self._pending: deque[Held | _Marker] = deque()
        self._pending_spans = 0
        self._trimmed = 0  # held spans the full buffer dropped (the worker's own count: no lock)
        self._pending_bytes = 0
        self._retried = 0
        self._failures = 0  # consecutive failed attempts
        self._next_attempt = 0.0
        self._not_before = 0.0  # no attempt before this (monotonic): the backend's Retry-After
        self._warned_outage = False
        self._warned_overflow = False
        self._warned_refusal = False
        self._warned_rejection = False
        self._transient = False  # the last failed attempt met a status the backend says to retry
        self._left_out = 0  # spans the exporter left out of the last batch it delivered
        self._exporter_closed = False
        self._close_lock = threading.Lock()
        reinit_at_fork(self._close_lock)  # held by another thread at fork(): new in the child
        super().__init__(ExporterSink(exporter), name=name, **limits)  # flush, shutdown

    # -- worker side ---------------------------------------------------------

    def _run(self) -> None:
        self._handoff.attach()
        try:
            while not self._closing:
                self._wake.wait(self._wait_s())
                self._wake.clear()
                self._drain()
            self._next_attempt = self._not_before  # shutting down: one more attempt, now
            self._drain()
            while self._pending and not self._abandoned:
                self._wake.wait(self._wait_s())
                self._wake.clear()
                self._drain()
        except BaseException as exc:  # not expected: the next flush restarts the worker
            self._report(exc, "the export thread")
            self._count_in_flight_as_failed()
            if not self._closing:
                return
        self._close_exporter()

    def _wait_s(self) -> float:
        if not self._pending:
            return self._delay
        return max(0.0, min(self._delay, self._next_attempt - time.monotonic()))

    def _drain(self) -> None:
        queue = self._queue
        handoff = self._handoff
        while not self._abandoned:
            while queue and not self._abandoned:
                handoff.ran()  # as the base class: the hand-off sees the worker take work
                batch, marker = self._take(min(len(queue), self._batch_size))
                if batch:
                    self._submit(batch)
                if marker is not None:
                    if self._pending:  # honoured once everything before it is resolved
                        self._pending.append(marker)
                        self._next_attempt = self._not_before  # a flush is waiting: try now
                    else:
                        self._honour(marker)
            if not queue:
                handoff.caught_up()
            if not self._retry_one():
                return

    def _submit(self, batch: list[Any]) -> None:
        """Send *batch* (counted in flight), or hold it behind what is held already."""
        if _SEEN.lazy or _SEEN.long:  # work their spans left to this thread
            _deferred.settle_batch(batch)
        ready = self._ready(batch)
        if not ready:
            return
        if self._pending:  # an outage: wait in line behind what is held
            waiting = Held(ready, self._size(ready), 0)
            with self._moves:
                self._in_flight = 0
                self._hold(waiting)
            return
        count = len(ready)  # before the export, which is handed the list
        ok = self._send(ready)
        held = Held(ready, self._size(ready), 1) if ok is False else None
        with self._moves:
            self._in_flight = 0
            if held is not None:
                self._hold(held)
            elif ok:
                self._exported += count - self._left_out
                self._failed += self._left_out
            else:  # refused, or it raised: given up
                self._failed += count
        if held is not None:
            self._schedule_retry()

    def _ready(self, batch: list[Any]) -> list[Any]:
        convert = self._convert
        if convert is None:
            return batch
        ready = []
        for span in batch:
            try:
                ready.append(convert(span))
            except BaseException as exc:  # a value's __str__ raising SystemExit, say
                with self._moves:
                    self._failed += 1
                    self._in_flight -= 1
                self._report(exc, "conversion")
        return ready

    def _size(self, spans: list[Any]) -> int:
        total = 0
        for span in spans:
            if span.__class__ is EncodedSpan:  # encoded already: its size is known
                total += len(span.data)
                continue
            try:
                total += estimate_bytes(span)
            except Exception:  # not an SDK span: a plain guess
                total += 200
        return total

    def _close_exporter(self) -> None:
        with self._close_lock:
            if self._exporter_closed:
                return
            self._exporter_closed = True
        try:
            self._exporter.shutdown()
        except BaseException as exc:
            self._shutdown_failed(exc)

    # -- control side --------------------------------------------------------

    def wait_shutdown(self, timeout_s: float) -> bool:
        """As the base class; a worker still retrying at the deadline is stopped too.

        The exporter is shut down from here, which ends OpenTelemetry's own
        retry wait inside an attempt, so the worker does not linger.
        """
        ok = super().wait_shutdown(timeout_s)
        if not ok and self._thread.is_alive():
            self._wake.set()
            self._close_exporter()
        return ok

    _counted = operator.attrgetter(
        "_in_flight", "_dropped", "_exported", "_failed", "_pending_spans", "_retried", "_trimmed"
    )

    def stats(self) -> ExportStats:
        """The base counters plus ``retried`` and ``buffered``, read together.

        Held spans that the worker gave up on at shutdown count as dropped.
        """
        items, values = self._snapshot()
        base = self._stats(items, values)
        buffered, retried, trimmed = values[4:]
        dropped = base.dropped + trimmed
        if self._abandoned or self._stopped or (self._closing and not self._thread.is_alive()):
            dropped += buffered
            buffered = 0
        return dataclasses.replace(base, dropped=dropped, retried=retried, buffered=buffered)

    def counts(self) -> tuple[int, int, int]:
        """As the base class, with the spans the full buffer dropped."""
        exported, dropped, failed = super().counts()
        if self._abandoned or self._stopped or self._closing:  # from stats(): counted there
            return exported, dropped, failed
        return exported, dropped + self._trimmed, failed

    def _after_fork_in_child(self) -> None:
        super()._after_fork_in_child()
        self._pending = deque()
        self._pending_spans = self._pending_bytes = 0
