"""The in-memory exporter of tests on the fast provider: spans converted when read."""

from __future__ import annotations

import threading
from collections import deque

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .._errors import report_internal_error
from .._fast import FastSpan
from .._forksafe import reinit_at_fork
from ._convert import Converter
from ._stats import ExportStats

__all__ = ["LazyMemoryExporter"]


class LazyMemoryExporter(InMemorySpanExporter):
    """An ``InMemorySpanExporter`` fed by the fast provider without converting on ``end()``.

    Ended spans are kept as they are; the first read converts them, in end
    order, so a test sees every span that has ended. A span that cannot be
    converted is left out alone, counted in :attr:`failed` and reported once
    (the others are kept, in end order).
    """

    def __init__(self, converter: Converter) -> None:
        super().__init__()
        self._converter = converter
        self._pending: deque[FastSpan] = deque()
        self.converted = 0
        """Spans converted and kept so far."""
        self.failed = 0
        """Spans that could not be converted (left out)."""
        self._convert_lock = threading.Lock()
        reinit_at_fork(self._convert_lock)

    def put(self, span: FastSpan) -> None:
        """Keep an ended span (the hot path: one append); ignored after shutdown."""
        if not self._stopped:
            self._pending.append(span)

    def _drain(self) -> None:
        errors: list[tuple[FastSpan, Exception]] = []
        with self._convert_lock:
            pending = self._pending
            if not pending:
                return
            readable, popleft = self._converter.readable, pending.popleft
            converted = []
            for _ in range(len(pending)):
                span = popleft()
                try:
                    converted.append(readable(span))
                except Exception as exc:  # this span only: the others are kept
                    errors.append((span, exc))
            self.converted += len(converted)
            self.failed += len(errors)
            self.export(converted)
        for span, error in errors:  # after the lock, with the others kept (strict mode raises)
            report_internal_error(("convert", type(span).__name__), error)

    def stats(self) -> ExportStats:
        """Counters: converted spans as ``exported``, waiting ones as ``queued``."""
        return ExportStats(
            "memory",
            exported=self.converted,
            dropped=0,
            failed=self.failed,
            queued=len(self._pending),
        )

    def get_finished_spans(self) -> tuple[ReadableSpan, ...]:
        """Every span ended so far, converted, in end order."""
        self._drain()
        return super().get_finished_spans()

    def clear(self) -> None:
        """Forget every span ended so far."""
        with self._convert_lock:
            self._pending.clear()
        super().clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is queued elsewhere."""
        return True

    def shutdown(self) -> None:
        """Keep what has ended so far readable, then refuse new spans."""
        self._drain()
        super().shutdown()
