"""SDK exporters and processors behind the fast provider's export queues.

Every adapter runs on its queue's thread and turns the fast provider's
spans into SDK ``ReadableSpan`` objects there (:mod:`._convert`):

- :class:`ConvertingSink`: an SDK ``SpanExporter`` (OTLP, console, a user's);
- :class:`ProcessorSink`: an SDK ``SpanProcessor`` added to the provider;
  both its ``on_start`` and ``on_end`` see the ended span, ``on_start`` as a
  writable copy (:class:`~._starting_span.StartingSpan`) whose changes
  ``on_end`` sees.

The in-memory exporter of tests, which converts when it is read, is
:class:`~._lazy_memory.LazyMemoryExporter`.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource

from .._errors import report_internal_error
from .._fast import FastTracerProvider
from ._checks import unique_name
from ._convert import Converter
from ._queue import QueuedSpanProcessor
from ._sinks import ExporterSink
from ._starting_span import StartingSpan

__all__ = [
    "ConvertingSink",
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
    """Runs an SDK ``SpanProcessor``: ``on_start`` then ``on_end``, per ended span.

    ``on_start`` gets a :class:`StartingSpan` (its own copy, writable while
    ``on_start`` runs); ``on_end`` gets the same object, with what
    ``on_start`` changed.
    """

    def __init__(self, processor: Any, converter: Converter) -> None:
        self.processor = processor
        self._converter = converter

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Hand each span to the processor; ``(handed, failed)``.

        A span the processor raises on fails alone, whatever it raises: the
        queue's worker never stops for an exporter's ``SystemExit`` either,
        and the spans handed before it stay counted as handed.
        """
        converter = self._converter
        readable, parent_context, limits = (
            converter.readable,
            converter.parent_context,
            converter.limits,
        )
        done = failed = 0
        for span in batch:
            try:
                view: Any = readable(span, StartingSpan)
                view._open(limits)
                try:
                    self.processor.on_start(view, parent_context(view))
                finally:
                    view._close()
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
