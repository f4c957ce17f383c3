"""The export queue's worker: drain the queue into the sink, batch by batch, and count.

:class:`QueueWorker` is a base of :class:`~._queue.QueuedSpanProcessor`, whose
``__init__`` makes every attribute declared here (and says what each is); the
daemon thread it starts runs :meth:`QueueWorker._run`. Everything the sink
does, raising included, is caught and counted here: the worker never ends
on an exporter's error.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from .._fast import _deferred
from .._fast._pending import SEEN as _SEEN
from .._handoff import Handoff
from ._sinks import Sink
from ._sync import Moves, Wakeup, _Marker, take

__all__ = ["QueueWorker"]

logger = logging.getLogger("asynctrace")


class QueueWorker:
    """How the export thread drains the queue into the sink and counts each batch."""

    name: str
    _sink: Sink
    _queue: deque[Any]
    _wake: Wakeup
    _delay: float
    _batch_size: int
    _closing: bool
    _abandoned: bool
    _exported: int
    _failed: int
    _markers: int
    _in_flight: int
    _flush_failures: int
    _moves: Moves
    _control_set: frozenset[type]
    _control_types: tuple[type, ...]
    _marker_lock: threading.RLock
    _warned_failure: bool
    _warned_shutdown: bool
    _handoff: Handoff

    def _run(self) -> None:
        self._handoff.attach()
        try:
            while not self._closing:
                self._wake.wait(self._delay)
                self._wake.clear()
                self._drain()
            self._drain()
        except BaseException as exc:  # not expected: the next flush restarts the worker
            self._report(exc, "the export thread")
            self._count_in_flight_as_failed()
            if not self._closing:
                return
        try:
            self._sink.shutdown()
        except BaseException as exc:
            self._shutdown_failed(exc)

    def _drain(self) -> None:
        """Export what is queued, batch by batch, honouring flush markers in order.

        Each export gives the interpreter lock up at its ``write`` and must
        wait for it again (up to the switch interval, 5 ms, while the
        producing thread runs Python). A thread that takes one batch per two
        waits falls behind a producer that ends spans faster than one batch
        per 10 ms; so a sink that takes any size (``any_batch_size``) is
        handed two batches at once while two or more are waiting.
        """
        queue = self._queue
        while queue and not self._abandoned:
            self._handoff.ran()
            backlog, size = len(queue), self._batch_size
            # Asked of the sink it has now: the live rollup wraps the writer after start.
            if backlog >= 2 * size and getattr(self._sink, "any_batch_size", False) is True:
                size *= 2
            batch, marker = self._take(min(backlog, size))
            if batch:
                self._export(batch)
            if marker is not None:
                self._flush_sink()
                with self._marker_lock:
                    self._markers -= 1
                marker.done.set()
        self._handoff.caught_up()

    def _flush_sink(self) -> None:
        """The sink's flush, for a marker; one that fails or raises fails that flush."""
        try:
            if self._sink.flush() is False:
                self._flush_failures += 1
        except BaseException as exc:
            self._report(exc, "flush")
            self._flush_failures += 1

    def _count_in_flight_as_failed(self) -> None:
        """The worker is ending on an unexpected error: what it held in flight is lost."""
        with self._moves:
            self._failed += self._in_flight
            self._in_flight = 0

    def _take(self, count: int) -> tuple[list[Any], _Marker | None]:
        """Up to *count* items from the queue, ending at a flush marker (returned apart).

        The items' spans are counted in flight in the same move that takes them.
        The length *count* was read before :attr:`_markers`: a marker counted in
        it was counted there first.
        """
        queue = self._queue
        marker: _Marker | None = None
        with self._moves:
            if not self._markers:  # no flush waiting: take the items in bulk
                batch = take(queue, count)
            else:
                batch = []
                for _ in range(count):
                    item = queue.popleft()
                    if item.__class__ is _Marker:
                        marker = item
                        break  # export what precedes the marker before honouring it
                    batch.append(item)
            self._in_flight = self._spans_in(batch)
        return batch, marker

    def _spans_in(self, batch: list[Any]) -> int:
        """How many of *batch*'s items are spans (not flush markers or notices)."""
        if self._control_set.isdisjoint(map(type, batch)):  # in C: the common case
            return len(batch)
        control = self._control_types
        return sum(1 for item in batch if item.__class__ not in control)

    def _export(self, batch: list[Any]) -> None:
        """Hand *batch* (its spans counted in flight) to the sink and count the outcome."""
        try:
            if _SEEN.lazy or _SEEN.long:  # work their spans left to this thread
                _deferred.settle_batch(batch)
            exported, failed = self._sink.export(batch)
        except BaseException as exc:  # SystemExit from an exporter must not end the worker
            exported, failed = 0, self._in_flight
            self._report(exc, "export")
        with self._moves:
            self._failed += failed
            self._exported += exported
            self._in_flight = 0
        self._handoff.ran()  # a batch done: the sleeps given during it helped
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

    def _shutdown_failed(self, exc: BaseException) -> None:
        """The sink's (exporter's) shutdown raised: what it had not written may be lost.

        Counted as a failed flush, so the shutdown returns ``False``; logged
        once, apart from export errors (one of those may have been logged).
        """
        self._flush_failures += 1
        if not self._warned_shutdown:
            self._warned_shutdown = True
            logger.warning(
                "asynctrace: exporter %r raised in shutdown; what it had not written out "
                "may be lost, and the shutdown reports a failure",
                self.name,
                exc_info=exc,
            )
