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
shutdown, up to :data:`MAX_RETRY_AFTER_S`. Spans a delivered batch's
backend rejected (OTLP partial success) are counted as failed, not exported.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import random
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from .._forksafe import reinit_at_fork
from .._redact import redact_text
from ._otlp import configured_header_secrets
from ._otlp_wire import EncodedSpan
from ._queue import QueuedSpanProcessor
from ._sinks import ExporterSink
from ._stats import ExportStats
from ._sync import _Marker

__all__ = ["RetryingSpanProcessor", "estimate_bytes"]

logger = logging.getLogger("asynctrace")

INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 5.0
PROBE_AFTER = 2  # a held batch that failed this often is tried against the next one
DEFAULT_BUFFER_SPANS = 65_536
DEFAULT_BUFFER_BYTES = 64 << 20
MAX_RETRY_AFTER_S = 60.0
"""The longest wait a backend's ``Retry-After`` (or gRPC ``RetryInfo``) is honoured for."""
_MESSAGE_CHARS = 200  # of a backend's partial-success message, in the log


_SCALARS = frozenset({int, float, bool, type(None)})  # encoded in at most about 10 bytes
_MAX_DEPTH = 8  # nested arrays and maps counted item by item down to here, then as a whole


def _value_bytes(value: Any, depth: int = 0) -> int:
    """About the encoded bytes of an attribute value: every byte of a large one counted.

    Strings, bytes, arrays and maps (``kvlist``) by their contents, to
    :data:`_MAX_DEPTH` levels; deeper, and anything else, by its size in
    memory, so that the retry buffer's byte bound holds whatever the value.
    """
    kind = value.__class__
    if kind is str:
        return len(value) + 4
    if kind in _SCALARS:
        return 10
    if (kind is tuple or kind is list) and depth < _MAX_DEPTH:
        return 4 + sum(_value_bytes(item, depth + 1) for item in value)
    return _other_bytes(value, depth)


def _other_bytes(value: Any, depth: int) -> int:
    if isinstance(value, str):
        return len(value) + 4
    if isinstance(value, (bytes, bytearray)):
        return len(value) + 4
    if isinstance(value, memoryview):
        return value.nbytes + 4
    if depth < _MAX_DEPTH:
        if isinstance(value, (tuple, list)):
            return 4 + sum(_value_bytes(item, depth + 1) for item in value)
        if isinstance(value, Mapping):
            return 4 + sum(
                _value_bytes(key, depth + 1) + _value_bytes(item, depth + 1) + 4
                for key, item in value.items()
            )
    try:
        return max(10, sys.getsizeof(value))  # deep: its own size in memory, at least
    except Exception:  # a __sizeof__ that raises
        return 10


def estimate_bytes(span: Any) -> int:
    """About how many bytes *span* takes encoded as OTLP protobuf (an SDK ``ReadableSpan``).

    Example:
        >>> from opentelemetry.sdk.trace import ReadableSpan
        >>> estimate_bytes(ReadableSpan("step", attributes={"rl.iteration": 3})) > 60
        True
    """
    name = span.name
    size = 60 + (len(name) if isinstance(name, str) else 10)
    size += _trace_state_bytes(span.context)
    description = getattr(span.status, "description", None)
    if isinstance(description, str):
        size += len(description) + 4
    size += _attributes_bytes(span.attributes)
    for event in span.events or ():
        size += 24 + len(event.name) + _attributes_bytes(event.attributes)
    for link in span.links or ():
        size += 40 + _trace_state_bytes(link.context) + _attributes_bytes(link.attributes)
    return size


def _attributes_bytes(attributes: Any) -> int:
    return sum(len(key) + 4 + _value_bytes(value) for key, value in (attributes or {}).items())


def _trace_state_bytes(context: Any) -> int:
    """The ``trace_state`` field: ``key=value`` pairs joined by commas."""
    trace_state = getattr(context, "trace_state", None)
    if not trace_state:
        return 0
    return 4 + sum(len(key) + len(value) + 2 for key, value in trace_state.items())


class _Held:
    """A batch that failed, waiting for its next attempt."""

    __slots__ = ("attempts", "size", "spans")

    def __init__(self, spans: list[Any], size: int, attempts: int) -> None:
        self.spans = spans
        self.size = size
        self.attempts = attempts


class RetryingSpanProcessor(QueuedSpanProcessor):
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
        self._pending: deque[_Held | _Marker] = deque()
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
        ready = self._ready(batch)
        if not ready:
            return
        if self._pending:  # an outage: wait in line behind what is held
            waiting = _Held(ready, self._size(ready), 0)
            with self._moves:
                self._in_flight = 0
                self._hold(waiting)
            return
        count = len(ready)  # before the export, which is handed the list
        ok = self._send(ready)
        held = _Held(ready, self._size(ready), 1) if ok is False else None
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

    def _send(self, spans: list[Any]) -> bool | None:
        """One attempt: ``True`` delivered, ``False`` to retry, ``None`` given up.

        An exporter that can tell says more after its ``export``
        (:class:`~._otlp_http.HttpSpanExporter` does): ``refused``, why the
        batch failed for good (an HTTP status other than 429, 502, 503 and
        504, a redirect, a batch too large to send, a gRPC status OTLP says
        not to retry): given up, not retried; ``transient``, that the backend
        asked for a retry (429, 502, 503, 504, gRPC ``RetryInfo``);
        ``retry_after``, the seconds it asked to wait first; ``left_out``,
        how many spans of a delivered batch it could not encode, and
        ``rejected``, how many the backend rejected (OTLP partial success,
        with ``rejection``, its message): set aside in ``_left_out``,
        counted as failed. The caller counts the outcome, in one move with
        where the spans were.
        """
        self._transient = False
        self._left_out = 0
        count = len(spans)
        try:
            result = self._exporter.export(spans)
        except BaseException as exc:  # SystemExit from an exporter must not end the worker
            self._report(exc, "export")
            return None
        exporter = self._exporter
        if getattr(result, "name", "SUCCESS") != "FAILURE":
            left_out = getattr(exporter, "left_out", 0)
            if isinstance(left_out, int) and 0 < left_out <= count:
                self._left_out = left_out
                self._warn_refusal(f"{left_out} of its spans could not be encoded")
            rejected = getattr(exporter, "rejected", 0)
            if isinstance(rejected, int) and rejected > 0:
                rejected = min(rejected, count - self._left_out)
                self._left_out += rejected
                self._warn_rejection(rejected, count, getattr(exporter, "rejection", None))
            return True
        refused = getattr(exporter, "refused", None)
        if refused:
            self._warn_refusal(str(refused))
            return None
        self._transient = bool(getattr(exporter, "transient", None))
        retry_after = getattr(exporter, "retry_after", None)
        if isinstance(retry_after, (int, float)) and retry_after > 0:
            wait = min(float(retry_after), MAX_RETRY_AFTER_S)  # NaN compares False: not here
            self._not_before = max(self._not_before, time.monotonic() + wait)
        return False

    def _warn_rejection(self, rejected: int, count: int, message: Any) -> None:
        if not self._warned_rejection:
            self._warned_rejection = True
            reason = ""
            if isinstance(message, str):  # the configured header values may be quoted in it
                reason = redact_text(message, configured_header_secrets())[:_MESSAGE_CHARS]
            logger.warning(
                "asynctrace: the backend of exporter %r rejected %d of the %d spans of a batch "
                "(%s); rejected spans are counted as failed, not retried (further rejections "
                "are not logged)",
                self.name,
                rejected,
                count,
                reason or "no message",
            )

    def _warn_refusal(self, reason: str) -> None:
        if not self._warned_refusal:
            self._warned_refusal = True
            logger.warning(
                "asynctrace: the backend of exporter %r refused a batch (%s); refused "
                "batches and spans are counted as failed, not retried (further refusals are "
                "not logged)",
                self.name,
                reason,
            )

    def _resolve(self, held: _Held, delivered: bool) -> None:
        """A held batch leaves the buffer: exported (but what was left out), or failed."""
        left_out = self._left_out if delivered else 0
        with self._moves:
            self._release(held)
            if delivered:
                self._exported += len(held.spans) - left_out
                self._failed += left_out
            else:
                self._failed += len(held.spans)

    def _retry_one(self) -> bool:
        """Resolve the oldest held item if it is due; whether there may be more to do now."""
        pending = self._pending
        if not pending or self._abandoned:
            return False
        head = pending[0]
        if head.__class__ is _Marker:
            pending.popleft()
            self._honour(head)
            return True
        if time.monotonic() < self._next_attempt:
            return False
        assert isinstance(head, _Held)
        if head.attempts:  # not one that waited behind a failure and goes out the first time
            self._retried += len(head.spans)
        ok = self._send(head.spans)
        if ok is False:
            head.attempts += 1
            # A batch that keeps failing while the next goes through is refused by a backend
            # that is up, but only a failure that says nothing can mean that: a 503 is the
            # backend asking for a retry, whatever the next batch meets.
            if head.attempts > PROBE_AFTER and not self._transient and self._probe_next():
                self._resolve(head, False)
                self._warn_refusal(
                    f"a held batch failed {head.attempts} times while the next went through"
                )
                self._failures = 0
                self._warned_outage = False
                return True
            self._schedule_retry()
            return False
        self._resolve(head, ok is True)
        if self._failures:  # the backend answers again, or the exporter raised
            logger.info(
                "asynctrace: exporter %r %s after %d failed attempts",
                self.name,
                "delivers again" if ok else "gave up a held batch (refused, or it raised)",
                self._failures,
            )
        self._failures = 0
        self._warned_outage = False
        return True

    def _probe_next(self) -> bool:
        """Send the held batch after the head; ``True`` if it was delivered.

        The batch after the head given up (refused too, or the exporter
        raised) says nothing about the head: ``False``.
        """
        second = next((item for item in list(self._pending)[1:] if isinstance(item, _Held)), None)
        if second is None:
            return False
        if second.attempts:
            self._retried += len(second.spans)
        ok = self._send(second.spans)
        if ok is False:
            second.attempts += 1
            return False
        self._resolve(second, ok is True)
        return ok is True

    def _release(self, held: _Held) -> None:  # inside a move
        self._pending.remove(held)
        self._pending_spans -= len(held.spans)
        self._pending_bytes -= held.size

    def _hold(self, held: _Held) -> None:  # inside a move
        self._pending.append(held)
        self._pending_spans += len(held.spans)
        self._pending_bytes += held.size
        self._trim()

    def _trim(self) -> None:
        """Drop the oldest held spans until the buffer is within both limits."""
        while self._pending_spans > self._buffer_spans or self._pending_bytes > self._buffer_bytes:
            oldest = next(item for item in self._pending if isinstance(item, _Held))
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

    def _schedule_retry(self) -> None:
        self._failures += 1
        backoff = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2 ** min(self._failures - 1, 16))
        wait = backoff * random.uniform(0.5, 1.0)
        self._next_attempt = max(time.monotonic() + wait, self._not_before)
        # Once shutting down, what is held is retried until the deadline at most, and the
        # shutdown's own summary says what was left: no promise of retries after it.
        if not self._warned_outage and not (self._closing or self._abandoned):
            self._warned_outage = True
            logger.warning(
                "asynctrace: exporter %r could not deliver a batch; failed batches are held "
                "(up to %d spans) and retried with backoff, new ones wait behind them",
                self.name,
                self._buffer_spans,
            )

    def _honour(self, marker: _Marker) -> None:
        self._flush_sink()
        with self._marker_lock:
            self._markers -= 1
        marker.done.set()

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
