"""A bounded queue and a daemon thread between ``span.end()`` and an exporter.

Like OpenTelemetry's ``BatchSpanProcessor``, but with the guarantees asynctrace
needs: ``on_end`` only appends to a deque (it never waits, never raises, never
calls the exporter); a full queue drops the span and counts it; ``flush`` and
``shutdown`` wait at most their timeout even when the exporter is stuck; an
exporter that raises (anything, ``SystemExit`` included) or returns
``FAILURE`` is counted and logged once; a worker thread that dies anyway is
restarted by the next flush and reported. Every span is accounted for:
exported, failed, dropped, queued or in flight, and ``flush``/``shutdown``
report a loss since the previous one by returning ``False``.

What it hands batches to is a :class:`~._sinks.Sink`; its counters are an
:class:`~._stats.ExportStats`; the primitives its threads signal each other
with are in :mod:`._sync`, the checks of its limits in :mod:`._checks`. What
its worker thread does (drain the queue into the sink) is
:class:`~._queue_worker.QueueWorker`; this module holds the producer's hot
path, flushes, shutdown and the counters.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections import deque
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .._config_checks import MAX_WAIT_S as _MAX_WAIT_S  # a longer wait raises OverflowError
from .._errors import report_internal_error
from .._forksafe import call_in_child, reinit_at_fork
from .._handoff import Handoff
from .._own_threads import leaving_signals
from ._checks import check_count, check_delay_millis
from ._queue_worker import QueueWorker
from ._sinks import Sink
from ._stats import ExportStats
from ._sync import Done, Moves, Wakeup, _Marker

__all__ = ["QueuedSpanProcessor"]

logger = logging.getLogger("asynctrace")


_CONTROL: tuple[type, ...] = (_Marker,)

_READ_TRIES = 50  # stats(): consistent reads attempted, the later ones after a short wait
_READ_WAIT_S = 0.0001


class QueuedSpanProcessor(QueueWorker, SpanProcessor):
    """Export ended spans from a bounded queue on a daemon thread.

    Args:
        sink: receives batches on the worker thread.
        name: shown in logs, thread names and :class:`ExportStats`.
        max_queue_size: items kept before new spans are dropped.
        max_export_batch_size: items handed to the sink at once; a full batch
            wakes the worker early. A sink that takes any size
            (``any_batch_size``) gets two batches at once while two or more
            wait: each export gives the interpreter lock up at its write and
            waits up to the switch interval to get it back, so one batch at a
            time falls behind a thread ending spans faster than a batch per
            10 ms.
        schedule_delay_millis: longest wait before queued items are exported.

    The limits take the ranges of the configuration keys of the same names:
    sizes are integers ``>= 1``; the delay is at least 1 ms.

    Raises:
        ConfigurationError: a limit out of its range, or not a number.

    Example:
        >>> from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        >>> from asynctrace.export import ExporterSink
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
        max_queue_size = check_count("max_queue_size", max_queue_size, 1)
        max_export_batch_size = check_count("max_export_batch_size", max_export_batch_size, 1)
        delay_ms = check_delay_millis("schedule_delay_millis", schedule_delay_millis)
        self.name = name
        self._sink = sink
        self._max_queue_size = max_queue_size
        self._batch_size = max_export_batch_size
        self._delay = min(delay_ms / 1000.0, _MAX_WAIT_S)
        self._queue: deque[Any] = deque()
        self._wake = Wakeup()  # set from span.end() and flush(), a signal handler's included
        self._closing = False
        self._room = max_queue_size  # items accepted: 0 once closing (one test on the hot path)
        self._abandoned = False
        self._exported = 0
        self._failed = 0
        self._dropped = 0
        self._markers = 0  # flush markers queued and not yet honoured
        self._in_flight = 0  # spans inside the sink's export() right now
        self._flush_failures = 0  # flushes the sink failed (the worker's own count)
        self._loss_seen = 0  # dropped + failed + failed sink flushes when last reported
        self._restarts = 0
        self._stopped = False  # the worker finished its last drain
        self._moves = Moves()  # odd while the worker moves spans between the counters
        self._control_set = frozenset(self._control_types)
        # Re-entrant: a signal handler that flushes, or ends a span into a full queue, on a
        # thread that it interrupted inside one of these takes it again instead of hanging.
        self._marker_lock = threading.RLock()
        self._drop_lock = threading.RLock()
        self._restart_lock = threading.Lock()  # only tried, never waited for
        reinit_at_fork(self._marker_lock, self._drop_lock, self._restart_lock)
        self._warned_failure = False
        self._warned_shutdown = False
        self._handoff = Handoff(self._delay / 2)  # half the durability bound
        self._thread = self._start_worker()
        call_in_child(self._after_fork_in_child)  # weakly held: gone with the processor

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
        if len(queue) >= self._batch_size:
            if not self._wake.is_set():
                self._wake.set()
            elif self._handoff._starved or not len(queue) % self._batch_size:
                # Once a batch; once starved, at every span (the hand-off keeps to one
                # sleep a millisecond): a worker that needs the lock several times a
                # batch (an OTLP request) would otherwise get it once a batch.
                self.behind()

    def _put_control(self, item: Any) -> None:
        """Queue bookkeeping that must not be dropped (it is tiny and rare).

        Not counted against ``max_queue_size``, so its callers keep it bounded:
        an item that announces something new (a track) is only queued while the
        queue has room, and one that ends it only for what was announced. While
        the worker is stuck, the queue then holds at most ``max_queue_size``
        items and one ending per thing announced (a live task, say).
        """
        if not self._closing:
            self._queue.append(item)

    def behind(self) -> None:
        """Whole batches wait and the worker has not come: give it the interpreter lock.

        Called by the thread ending spans (see :mod:`asynctrace._handoff`); at most one
        short sleep a millisecond.
        """
        if not self._closing:
            self._handoff.offer(self._thread, 2 * len(self._queue) >= self._max_queue_size)

    def _drop(self, count: int) -> None:
        self.behind()  # a full queue: urgent
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

    def _start_worker(self) -> threading.Thread:
        thread = threading.Thread(
            target=leaving_signals(self._run), name=f"asynctrace-export-{self.name}", daemon=True
        )
        thread.start()
        return thread

    def _ensure_worker(self) -> None:
        """Start the worker again if it died (it should not: everything is caught).

        One thread restarts it: two workers would drain one queue at once.
        """
        if self._thread.is_alive() or self._closing:
            return
        # Tried, not waited for: whoever holds it is restarting the worker (another
        # thread, or the code a signal handler that flushes interrupted).
        if not self._restart_lock.acquire(blocking=False):
            return
        try:
            if self._thread.is_alive() or self._closing:
                return  # another flush restarted it first
            self._restarts += 1
            self._thread = self._start_worker()
        finally:
            self._restart_lock.release()
        logger.warning(  # outside the lock: a handler may flush this very queue
            "asynctrace: the export thread of %r had stopped; it was restarted (%d spans "
            "lost so far are counted in stats())",
            self.name,
            self._dropped + self._failed,
        )

    def request_flush(self) -> Done | None:
        """Ask the worker to export everything queued so far; returns the done event.

        ``None`` after shutdown, when there is no worker to ask, and on the
        worker itself (an exporter that flushes from ``export``): it cannot
        wait for its own thread, which exports the rest once that call returns.
        """
        if self._closing or threading.current_thread() is self._thread:
            return None
        self._ensure_worker()
        queue = self._queue
        try:
            last = queue[-1]
        except IndexError:
            last = None
        if last.__class__ is _Marker:
            # Nothing was queued after that flush's marker, so it covers this flush too:
            # repeated flushes against a stuck exporter do not fill the queue with markers.
            self._wake.set()
            return last.done
        marker = _Marker()
        with self._marker_lock:  # flushes may be requested from any thread
            self._markers += 1  # before the append: _drain relies on this order
        self._queue.append(marker)
        self._wake.set()
        return marker.done

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything queued before this call; ``False`` on timeout or on a loss.

        A loss is a span dropped or failed since the previous flush or shutdown.
        Called on the worker itself (an exporter that flushes from ``export``),
        it returns at once, ``True`` unless spans were lost: waiting there would
        only wait out the timeout, since the worker is the one that would answer.
        """
        if threading.current_thread() is self._thread:
            return not self.lost_since_last_check()
        done = self.request_flush()
        if done is None:
            return self._stopped and not self.lost_since_last_check()
        finished = done.wait(min(max(0.0, timeout_millis / 1000.0), _MAX_WAIT_S))
        return finished and not self.lost_since_last_check()

    def lost_since_last_check(self) -> bool:
        """Whether spans were dropped or failed, or a flush of the sink failed, since this
        was last asked (then ``True`` once)."""
        stats = self.stats()
        loss = stats.dropped + stats.failed + self._flush_failures
        lost, self._loss_seen = loss > self._loss_seen, loss
        return lost

    def begin_shutdown(self) -> None:
        """Stop accepting spans and let the worker drain the queue and exit."""
        self._ensure_worker()  # a dead worker is started again to drain and shut down
        self._closing = True
        self._room = 0
        self._wake.set()

    def wait_shutdown(self, timeout_s: float) -> bool:
        """Wait up to *timeout_s* for the worker; ``False`` if it is stuck or spans were lost.

        Called on the worker itself (an exporter that shuts telemetry down from
        ``export``), it cannot wait: ``False``, and the worker drains the queue
        once that call returns.
        """
        if threading.current_thread() is self._thread:
            return False
        self._thread.join(min(max(0.0, timeout_s), _MAX_WAIT_S))
        if self._thread.is_alive():
            if not self._abandoned:
                stats = self.stats()  # before: abandoned, they count as dropped
                self._abandoned = True
                logger.warning(
                    "asynctrace: exporter %r did not finish within the shutdown timeout; "
                    "%d queued, %d in-flight and %d buffered spans are abandoned",
                    self.name,
                    stats.queued,
                    stats.in_flight,
                    stats.buffered,
                )
            self.lost_since_last_check()
            return False
        self._stopped = True
        return not self.lost_since_last_check()

    def shutdown_within(self, timeout_s: float) -> bool:
        """Drain, shut the exporter down and stop the worker, waiting at most *timeout_s*."""
        self.begin_shutdown()
        return self.wait_shutdown(timeout_s)

    def shutdown(self) -> None:
        """SpanProcessor API: shut down, waiting at most 30 s (no wait if already closing)."""
        if not self._closing:
            self.shutdown_within(30.0)

    def stats(self) -> ExportStats:
        """Current counters: spans only (flush markers and track notices are not counted).

        Spans abandoned with a stuck exporter at shutdown, and spans left in
        the queue after the worker's last drain, count as dropped (and not
        as queued or in flight). The counters are read together, never in the
        middle of the worker moving a batch, so every span ended before the
        call is counted exactly once.
        """
        return self._stats(*self._snapshot())

    _counted = operator.attrgetter("_in_flight", "_dropped", "_exported", "_failed")
    """The counters :meth:`_snapshot` reads (a subclass adds its own after these)."""

    def _snapshot(self) -> tuple[list[Any], tuple[int, ...]]:
        """The queue's items and the :attr:`_counted` counters, read between two moves.

        Each read is one C call, so no move can happen inside it, only
        between them: then it is read again, after a short wait when a move
        is under way (the interpreter lock goes to the worker meanwhile).
        Never blocks: after :data:`_READ_TRIES` tries the last read is taken.
        """
        moves, queue, counted = self._moves, self._queue, self._counted
        for attempt in range(_READ_TRIES):
            before = moves.value
            if not before & 1:
                items = list(queue)
                values = counted(self)
                if moves.value == before:
                    return items, values
            if attempt:
                time.sleep(_READ_WAIT_S)
        return list(queue), counted(self)  # pragma: no cover - a worker moving for 5 ms

    def _stats(self, items: list[Any], values: tuple[int, ...]) -> ExportStats:
        """:meth:`stats` from a snapshot."""
        in_flight, dropped, exported, failed = values[:4]
        control = self._control_types
        queued = sum(1 for item in items if item.__class__ not in control)
        if self._abandoned:  # never exported now; one that returns late moves to exported
            dropped += queued + in_flight
            queued = in_flight = 0
        elif self._stopped or (self._closing and not self._thread.is_alive()):
            dropped += queued  # ended in the instant the worker finished: never exported
            queued = 0
        sink = self._sink
        lost, shortened = getattr(sink, "lost", 0), getattr(sink, "shortened", 0)
        return ExportStats(
            self.name, exported, dropped, failed, queued, in_flight, lost, shortened=shortened
        )

    def counts(self) -> tuple[int, int, int]:
        """``(exported, dropped, failed)`` as :meth:`stats` gives them (any thread).

        Without counting the queue's spans while the worker runs: the live
        goodput's lines read this at every batch, and :meth:`stats` copies
        the queue, as long as the backlog is.
        """
        if self._abandoned or self._stopped or self._closing:
            stats = self.stats()
            return stats.exported, stats.dropped, stats.failed
        return self._exported, self._dropped, self._failed

    _control_types: tuple[type, ...] = _CONTROL
    """Queue items that are not spans (a subclass adds its own)."""

    # -- in a forked child ---------------------------------------------------

    def _after_fork_in_child(self) -> None:
        """A forked child does not inherit the worker: this processor goes inert there."""
        self._closing = True
        self._room = 0
        self._wake = Wakeup()  # the parent's worker may have been inside its get()
        self._queue = deque()
        self._markers = 0  # (the locks are made new by _forksafe)
        self._in_flight = 0
        self._moves = Moves()  # a fork in the middle of a move leaves it odd
        self._stopped = True
