"""SDK exporters and processors behind the fast provider's export queues.

Every adapter runs on its queue's thread and turns the fast provider's
spans into SDK ``ReadableSpan`` objects there (:mod:`._convert`):

- :class:`ConvertingSink`: an SDK ``SpanExporter`` (OTLP, console, a user's);
- :class:`ProcessorSink`: an SDK ``SpanProcessor`` added to the provider;
  both its ``on_start`` and ``on_end`` see the ended span;
- :class:`LazyMemoryExporter`: the in-memory exporter of tests, which
  converts when it is read, so spans are there as soon as they end.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .._errors import report_internal_error
from .._fast import FastSpan, FastTracerProvider
from .._forksafe import reinit_at_fork
from ._convert import Converter
from ._queue import ExporterSink, ExportStats, QueuedSpanProcessor, unique_name

__all__ = [
    "ConvertingSink",
    "LazyMemoryExporter",
    "ProcessorSink",
    "converter_for",
    "processor_queue",
    "set_processor_limits",
]

# The queue limits of the configuration that built each fast provider: the queues
# of span processors added to it later take them (weak: a provider is not kept).
_processor_limits: weakref.WeakKeyDictionary[FastTracerProvider, dict[str, Any]] = (
    weakref.WeakKeyDictionary()
)


def converter_for(provider: FastTracerProvider) -> Converter:
    """A converter with *provider*'s resource (an SDK ``Resource``, else built) and limits."""
    resource = provider.resource
    if not isinstance(resource, Resource):
        attributes = getattr(resource, "attributes", None) or {}
        resource = Resource.create(dict(attributes))
    return Converter(resource, provider.limits)


class ConvertingSink(ExporterSink):
    """Converts each batch, then hands it to an SDK ``SpanExporter``."""

    def __init__(self, exporter: Any, converter: Converter) -> None:
        super().__init__(exporter)
        self._readable = converter.readable

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Convert and export; ``(exported, failed)``; a span that fails to convert fails alone."""
        readable = self._readable
        converted = []
        failed = 0
        for span in batch:
            try:
                converted.append(readable(span))
            except Exception as exc:
                failed += 1
                report_internal_error(("convert", type(span).__name__), exc)
        if not converted:
            return 0, failed
        exported, lost = super().export(converted)
        return exported, lost + failed


class ProcessorSink:
    """Runs an SDK ``SpanProcessor``: ``on_start`` then ``on_end``, per ended span."""

    def __init__(self, processor: Any, converter: Converter) -> None:
        self.processor = processor
        self._converter = converter

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Hand each span to the processor; ``(handed, failed)``.

        A span the processor raises on fails alone, whatever it raises: the
        queue's worker never stops for an exporter's ``SystemExit`` either,
        and the spans handed before it stay counted as handed.
        """
        readable, parent_context = self._converter.readable, self._converter.parent_context
        done = failed = 0
        for span in batch:
            try:
                view = readable(span)
                self.processor.on_start(view, parent_context(view))
                self.processor.on_end(view)
                done += 1
            except BaseException:
                failed += 1
        return done, failed

    def flush(self) -> bool:
        """The processor's ``force_flush``; ``False`` if it says so."""
        return self.processor.force_flush() is not False

    def shutdown(self) -> None:
        """The processor's ``shutdown``."""
        self.processor.shutdown()


def set_processor_limits(provider: FastTracerProvider, limits: Mapping[str, Any]) -> None:
    """Give the queues of span processors added to *provider* later these limits.

    *limits*: ``max_queue_size``, ``max_export_batch_size`` and
    ``schedule_delay_millis``, as the configuration gives them.
    """
    _processor_limits[provider] = dict(limits)


def processor_queue(processor: Any, provider: FastTracerProvider) -> QueuedSpanProcessor:
    """A started export queue that feeds *processor* with *provider*'s spans.

    It has the queue limits of the configuration that built *provider*, and
    the processor's class name, made unique among *provider*'s queues (a second
    ``BatchSpanProcessor`` is ``BatchSpanProcessor-2``) so that each has its
    own counters in ``Telemetry.stats()``.
    """
    taken = {getattr(queue, "name", None) for queue in provider.queues()}
    limits = _processor_limits.get(provider, {})
    return QueuedSpanProcessor(
        ProcessorSink(processor, converter_for(provider)),
        name=unique_name(type(processor).__name__, taken),
        **limits,
    )


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
