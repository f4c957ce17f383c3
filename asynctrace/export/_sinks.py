"""What an export queue's worker thread hands batches to: :class:`Sink`, and
:class:`ExporterSink`, which adapts an OpenTelemetry ``SpanExporter`` to it."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["ExporterSink", "Sink"]


class Sink(Protocol):
    """What the worker thread hands batches to.

    A sink that sets ``any_batch_size = True`` (it writes what it is
    given, in one piece or many) is handed two batches at once while the
    queue holds two or more, so its thread catches up (see
    :class:`~._queue.QueuedSpanProcessor`).
    """

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Export *batch*; return ``(spans exported, spans failed)``."""

    def flush(self) -> bool | None:
        """Make everything exported so far durable (called on the worker thread).

        ``False``: it could not (the flush that asked returns ``False``).
        """

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
        """Hand *batch* to the exporter; ``(exported, failed)``: all or none.

        Counted before the call: an exporter may empty the list it is given.
        """
        count = len(batch)
        result = self.exporter.export(batch)
        if getattr(result, "name", "SUCCESS") == "FAILURE":  # SpanExportResult.FAILURE
            return 0, count
        return count, 0

    def flush(self) -> bool:
        """Call the exporter's ``force_flush`` when it has one; ``False`` if it says so."""
        force_flush = getattr(self.exporter, "force_flush", None)
        if callable(force_flush):
            return force_flush() is not False
        return True

    def shutdown(self) -> None:
        """Shut the exporter down."""
        self.exporter.shutdown()
