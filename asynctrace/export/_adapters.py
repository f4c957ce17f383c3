"""SDK exporters and processors behind the fast provider's export queues.

Every adapter runs on its queue's thread and turns the fast provider's
spans into SDK ``ReadableSpan`` objects there (:mod:`._convert`):

- :class:`ConvertingSink`: an SDK ``SpanExporter`` (OTLP, console, a user's);
- :class:`ProcessorSink`: an SDK ``SpanProcessor`` added to the provider;
  both its ``on_start`` and ``on_end`` see the ended span, ``on_start`` as a
  writable copy (:class:`StartingSpan`) whose changes ``on_end`` sees;
- :class:`LazyMemoryExporter`: the in-memory exporter of tests, which
  converts when it is read, so spans are there as soon as they end.
"""

from __future__ import annotations

import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util import types

from .._errors import report_internal_error
from .._exception_text import redact_exception_text, secrets_of
from .._fast import FastSpan, FastTracerProvider, SpanLimits
from .._fast._span import good_keys
from .._fast._span_events import exception_attributes
from .._forksafe import reinit_at_fork
from ._checks import unique_name
from ._convert import Converter, uncut_stamps
from ._queue import QueuedSpanProcessor
from ._sinks import ExporterSink
from ._stats import ExportStats

__all__ = [
    "ConvertingSink",
    "LazyMemoryExporter",
    "ProcessorSink",
    "StartingSpan",
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


class StartingSpan(trace.Span, ReadableSpan):
    """What an SDK processor's ``on_start`` gets on the fast provider: the ended span, writable.

    A ``ReadableSpan`` (every field of the finished span, the end time
    included) that also takes the OpenTelemetry API's ``Span`` calls while
    ``on_start`` runs: ``set_attribute(s)``, ``add_event``,
    ``record_exception``, ``add_link``, ``set_status`` (``OK`` final,
    ``UNSET`` and anything not a status ignored), ``update_name``;
    ``is_recording()`` is true then. The changes go, with the span limits
    applied as the SDK applies them, into this object, which is what the same
    processor's ``on_end`` receives; no other exporter or processor sees them
    (each converts its own copy). ``end()`` does nothing: the span has ended.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recording = False
        self._limits = SpanLimits()

    def _open(self, limits: SpanLimits) -> None:
        """Take changes (under *limits*) until :meth:`_close`."""
        self._limits = limits
        old = self._attributes
        attributes = BoundedAttributes(
            limits.max_attributes, old, False, limits.max_attribute_length
        )
        if limits.max_attribute_length is not None:
            uncut_stamps(attributes, old or {})
        attributes.dropped = getattr(old, "dropped", 0)
        self._attributes = attributes
        self._recording = True

    def _close(self) -> None:
        self._recording = False

    def is_recording(self) -> bool:
        """True while the processor's ``on_start`` runs."""
        return self._recording

    def get_span_context(self) -> SpanContext:
        """The span's context."""
        return self._context  # type: ignore[return-value]

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        """Set one attribute (checked and limited as the SDK does)."""
        if self._recording:
            self._attributes[key] = value  # type: ignore[index]

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        """Set several attributes; keys taken as the SDK takes a mapping's (see ``good_keys``)."""
        if self._recording:
            kept, bad = good_keys(attributes)
            for key, value in kept.items():
                self._attributes[key] = value  # type: ignore[index]
            if bad:
                self._attributes.dropped += bad  # type: ignore[union-attr]

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        """Add an event (the oldest is dropped past ``max_events``)."""
        if self._recording:
            limits = self._limits
            cleaned = BoundedAttributes(
                limits.max_event_attributes, attributes, True, limits.max_event_attribute_length
            )
            when = time.time_ns() if timestamp is None else timestamp
            self._events.append(Event(name, cleaned, when))  # type: ignore[attr-defined]

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        """Add a link (the oldest is dropped past ``max_links``); as in the SDK, an invalid
        context is ignored unless the link has attributes or a trace state."""
        if self._recording and context is not None:
            if not context.is_valid and not attributes and not context.trace_state:
                return
            limits = self._limits
            cleaned = BoundedAttributes(
                limits.max_link_attributes, attributes, True, limits.max_event_attribute_length
            )
            self._links.append(Link(context, cleaned))  # type: ignore[attr-defined]

    def update_name(self, name: str) -> None:
        """Rename the span."""
        if self._recording:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """Set the status as the SDK does (``OK`` is final, ``UNSET`` is ignored)."""
        if not self._recording or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self._status = status
        elif isinstance(status, StatusCode) and status is not StatusCode.UNSET:
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Record *exception* as an ``exception`` event, its message and stack trace redacted."""
        if not self._recording:
            return
        secrets = secrets_of(exception)
        try:
            text = redact_exception_text(
                "".join(traceback.format_exception(exception)), secrets, tail=True
            )
        except Exception as exc:
            text = f"<stack trace unavailable: {type(exc).__name__}>"
        attrs = exception_attributes(exception, text, escaped, secrets)  # as a span's own
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        """Nothing: the span has ended."""


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
