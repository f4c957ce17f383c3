"""A bounded queue and a daemon thread between ``span.end()`` and an exporter.

Like OpenTelemetry's ``BatchSpanProcessor``, but with the guarantees asynctrace
needs: ``on_end`` only appends to a deque (it never waits, never raises, never
calls the exporter); a full queue drops the span and counts it; ``flush`` and
``shutdown`` wait at most their timeout even when the exporter is stuck; an
exporter that raises or returns ``FAILURE`` is counted and logged once.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .._errors import report_internal_error

__all__ = ["ExportStats", "ExporterSink", "QueuedSpanProcessor", "Sink"]

logger = logging.getLogger("asynctrace")


class Sink(Protocol):
    """What the worker thread hands batches to."""

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Export *batch*; return ``(spans exported, spans failed)``."""

    def flush(self) -> None:
        """Make everything exported so far durable (called on the worker thread)."""

    def shutdown(self) -> None:
        """Release resources (called once, on the worker thread)."""


class ExporterSink:
    """Adapts an OpenTelemetry ``SpanExporter`` to :class:`Sink`.

    Example:
        >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        ...     InMemorySpanExporter)
        >>> ExporterSink(InMemorySpanExporter()).export([])
        (0, 0)
    """

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Hand *batch* to the exporter; ``(exported, failed)``: all or none."""
        result = self.exporter.export(batch)
        if getattr(result, "name", "SUCCESS") == "FAILURE":  # SpanExportResult.FAILURE
            return 0, len(batch)
        return len(batch), 0

    def flush(self) -> None:
        """Call the exporter's ``force_flush`` when it has one."""
        force_flush = getattr(self.exporter, "force_flush", None)
        if callable(force_flush):
            force_flush()

    def shutdown(self) -> None:
        """Shut the exporter down."""
        self.exporter.shutdown()


@dataclass(frozen=True)
class ExportStats:
    """Counters of one exporter's queue.

    Attributes:
        name: the exporter (``"chrome"``, ``"otlp"``, or a class name).
        exported: spans handed to the exporter without error.
        dropped: spans never handed to it (queue full, or ended after shutdown).
        failed: spans the exporter raised on or reported ``FAILURE`` for.
        queued: spans waiting right now.

    Example:
        >>> ExportStats("chrome", exported=10, dropped=0, failed=0, queued=2).dropped
        0
    """

    name: str
    exported: int
    dropped: int
    failed: int
    queued: int


class _Marker:
    """A flush request travelling through the queue behind the spans before it."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class QueuedSpanProcessor(SpanProcessor):
    """Export ended spans from a bounded queue on a daemon thread.

    Args:
        sink: receives batches on the worker thread.
        name: shown in logs, thread names and :class:`ExportStats`.
        max_queue_size: items kept before new spans are dropped.
        max_export_batch_size: items handed to the sink at once; a full batch
            wakes the worker early.
        schedule_delay_millis: longest wait before queued items are exported.

    Example:
        >>> from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        >>> processor = QueuedSpanProcessor(ExporterSink(ConsoleSpanExporter()), name="console")
        >>> processor.shutdown_within(1.0)
        True
    """

    def __init__(
        self,
        sink: Sink,
        *,
        name: str,
        max_queue_size: int = 8192,
        max_export_batch_size: int = 512,
        schedule_delay_millis: float = 1000.0,
    ) -> None:
        self.name = name
        self._sink = sink
        self._max_queue_size = max_queue_size
        self._batch_size = max_export_batch_size
        self._delay = schedule_delay_millis / 1000.0
        self._queue: deque[Any] = deque()
        self._wake = threading.Event()
        self._closing = False
        self._room = max_queue_size  # items accepted: 0 once closing (one test on the hot path)
        self._abandoned = False
        self._exported = 0
        self._failed = 0
        self._dropped = 0
        self._markers = 0  # flush markers queued and not yet honoured
        self._marker_lock = threading.Lock()
        self._drop_lock = threading.Lock()
        self._warned_failure = False
        self._thread = threading.Thread(
            target=self._run, name=f"asynctrace-export-{name}", daemon=True
        )
        self._thread.start()
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)

            def _after_fork() -> None:
                method = ref()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=_after_fork)

    # -- producer side (any thread, hot path) ---------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue *span* for export; drop and count it when the queue is full."""
        try:
            self._put(span)
        except Exception as exc:
            report_internal_error((self.name, "on_end"), exc)

    def _put(self, item: Any) -> None:
        queue = self._queue
        if len(queue) >= self._max_queue_size or self._closing:
            self._drop(1)
            return
        queue.append(item)
        if len(queue) >= self._batch_size and not self._wake.is_set():
            self._wake.set()

    def _put_control(self, item: Any) -> None:
        """Queue bookkeeping that must not be dropped (it is tiny and rare)."""
        if not self._closing:
            self._queue.append(item)

    def _drop(self, count: int) -> None:
        with self._drop_lock:
            first = self._dropped == 0
            self._dropped += count
        if first and not self._closing:
            logger.warning(
                "asynctrace: the export queue of %r is full (max_queue_size=%d); dropping "
                "spans, the total is reported at shutdown",
                self.name,
                self._max_queue_size,
            )

    # -- control side --------------------------------------------------------

    def request_flush(self) -> threading.Event | None:
        """Ask the worker to export everything queued so far; returns the done event.

        ``None`` when the worker is gone (after shutdown), i.e. nothing to wait for.
        """
        if self._closing or not self._thread.is_alive():
            return None
        marker = _Marker()
        with self._marker_lock:  # flushes may be requested from any thread
            self._markers += 1  # before the append: _drain relies on this order
        self._queue.append(marker)
        self._wake.set()
        return marker.done

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything queued before this call; ``False`` on timeout."""
        done = self.request_flush()
        return done is None or done.wait(timeout_millis / 1000.0)

    def begin_shutdown(self) -> None:
        """Stop accepting spans and let the worker drain the queue and exit."""
        self._closing = True
        self._room = 0
        self._wake.set()

    def wait_shutdown(self, timeout_s: float) -> bool:
        """Wait up to *timeout_s* for the worker; ``False`` if it is stuck."""
        self._thread.join(max(0.0, timeout_s))
        if self._thread.is_alive():
            if not self._abandoned:
                self._abandoned = True
                logger.warning(
                    "asynctrace: exporter %r did not finish within the shutdown timeout; "
                    "%d queued spans are abandoned",
                    self.name,
                    len(self._queue),
                )
            return False
        return True

    def shutdown_within(self, timeout_s: float) -> bool:
        """Drain, shut the exporter down and stop the worker, waiting at most *timeout_s*."""
        self.begin_shutdown()
        return self.wait_shutdown(timeout_s)

    def shutdown(self) -> None:
        """SpanProcessor API: shut down, waiting at most 30 s (no wait if already closing)."""
        if not self._closing:
            self.shutdown_within(30.0)

    def stats(self) -> ExportStats:
        """Current counters (abandoned items count as dropped)."""
        queued = len(self._queue)
        dropped = self._dropped + (queued if self._abandoned else 0)
        return ExportStats(self.name, self._exported, dropped, self._failed, queued)

    # -- worker side ---------------------------------------------------------

    def _run(self) -> None:
        while not self._closing:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._drain()
        self._drain()
        try:
            self._sink.shutdown()
        except Exception as exc:
            self._report(exc, "shutdown")

    def _drain(self) -> None:
        queue = self._queue
        while queue and not self._abandoned:
            count = min(len(queue), self._batch_size)
            # Read after the length: a marker counted in *count* was counted here first.
            if not self._markers:  # no flush waiting: take the items in bulk
                popleft = queue.popleft
                self._export([popleft() for _ in range(count)])
                continue
            batch: list[Any] = []
            markers: list[_Marker] = []
            for _ in range(count):
                item = queue.popleft()
                if item.__class__ is _Marker:
                    markers.append(item)
                    break  # export what precedes the marker before honouring it
                batch.append(item)
            if batch:
                self._export(batch)
            if markers:
                try:
                    self._sink.flush()
                except Exception as exc:
                    self._report(exc, "flush")
                for marker in markers:
                    with self._marker_lock:
                        self._markers -= 1
                    marker.done.set()

    def _export(self, batch: list[Any]) -> None:
        try:
            exported, failed = self._sink.export(batch)
        except Exception as exc:
            exported, failed = 0, len(batch)
            self._report(exc, "export")
        self._failed += failed
        self._exported += exported
        if failed and not self._warned_failure:
            self._warned_failure = True
            logger.warning(
                "asynctrace: exporter %r failed to export %d spans; failures are counted "
                "and reported at shutdown",
                self.name,
                failed,
            )

    def _report(self, exc: BaseException, what: str) -> None:
        if not self._warned_failure:
            self._warned_failure = True
            logger.warning(
                "asynctrace: exporter %r raised in %s; it keeps running, failures are "
                "counted (further errors are not logged)",
                self.name,
                what,
                exc_info=exc,
            )

    def _after_fork_in_child(self) -> None:
        """A forked child does not inherit the worker: this processor goes inert there."""
        self._closing = True
        self._room = 0
        self._queue = deque()
        self._drop_lock = threading.Lock()  # it may have been held by a thread that is gone
        self._marker_lock = threading.Lock()
        self._markers = 0


def summarize(stats: Sequence[ExportStats]) -> None:
    """Log one line per exporter that dropped or failed spans."""
    for item in stats:
        if item.dropped or item.failed:
            logger.warning(
                "asynctrace: exporter %r dropped %d spans and failed to export %d (%d exported)",
                item.name,
                item.dropped,
                item.failed,
                item.exported,
            )
