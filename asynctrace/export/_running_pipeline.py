"""A running pipeline: flush, shutdown, exporters kept open, and its counters."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from .._config_checks import MAX_WAIT_S as _MAX_WAIT_S  # a longer wait raises OverflowError
from .._errors import report_internal_error
from .._fast import FastTracerProvider
from ._lazy_memory import LazyMemoryExporter
from ._queue import QueuedSpanProcessor
from ._sdk_processors import flush_sdk_provider, remove, shutdown_sdk_provider
from ._sinks import ExporterSink
from ._stats import ExportStats

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["Pipeline"]


class Pipeline:
    """A running provider and its export queues."""

    def __init__(
        self,
        provider: trace.TracerProvider,
        end_open_spans: Callable[[], int],
        queued: list[QueuedSpanProcessor],
        memory: InMemorySpanExporter | None,
        chrome_path: Path | None,
        *,
        owns_provider: bool = True,
        added: tuple[Any, ...] = (),
    ) -> None:
        self.provider = provider
        self.end_open_spans = end_open_spans
        self.queued = queued
        self.memory = memory
        self.chrome_path = chrome_path
        self.owns_provider = owns_provider
        self._added = added  # the processors asynctrace added to an SDK provider

    def flush(self, timeout_s: float) -> bool:
        """Export everything ended so far, waiting at most *timeout_s* in total.

        The user's span processors added to the provider are flushed too: on
        the fast provider each has an export queue, flushed like asynctrace's
        own (its ``force_flush`` runs on that queue's thread); on an SDK
        provider, their ``force_flush`` runs on a helper thread that is
        waited for until the deadline, since an SDK processor's flush may not
        honour its timeout. Called on an export queue's own thread (an
        exporter that flushes from ``export``), that queue is not waited for.
        """
        deadline = time.monotonic() + min(max(0.0, timeout_s), _MAX_WAIT_S)
        queues = list(self.queued)
        provider = self.provider
        if isinstance(provider, FastTracerProvider):
            for queue in provider.queues():
                if isinstance(queue, QueuedSpanProcessor) and queue not in queues:
                    queues.append(queue)
        waits = [processor.request_flush() for processor in queues]
        ok = True
        for done in waits:
            left = min(max(0.0, deadline - time.monotonic()), _MAX_WAIT_S)
            if done is not None and not done.wait(left):
                ok = False
        for processor in queues:  # anything dropped or failed since the last flush: False
            if processor.lost_since_last_check():
                ok = False
        if not isinstance(provider, FastTracerProvider):
            ok = flush_sdk_provider(provider, deadline, self._added) and ok
        return ok

    def shutdown(self, timeout_s: float) -> tuple[bool, int]:
        """End open spans (truncated), drain and stop every exporter within *timeout_s*.

        Returns ``(finished in time, number of truncated spans)``. An SDK
        provider's own ``shutdown`` (its processors', the user's included) runs
        on a helper thread that is waited for until the deadline: an SDK
        ``BatchSpanProcessor`` with a stuck exporter would hold it for 30 s.
        """
        deadline = time.monotonic() + min(max(0.0, timeout_s), _MAX_WAIT_S)
        truncated = self.end_open_spans()
        queues = list(self.queued)
        if isinstance(self.provider, FastTracerProvider):  # the user's processors' queues too
            queues += [q for q in self.provider.queues() if isinstance(q, QueuedSpanProcessor)]
            queues = list(dict.fromkeys(queues))
        for processor in queues:
            processor.begin_shutdown()
        ok = True
        for processor in queues:
            if not processor.wait_shutdown(deadline - time.monotonic()):
                ok = False
        try:
            if not self.owns_provider:  # the user's, left running: only the memory exporter stops
                remove(self.provider, self._added)
                if self.memory is not None:
                    self.memory.shutdown()
            elif isinstance(self.provider, FastTracerProvider):  # its queues are closing already
                self.provider.shutdown()
            elif not shutdown_sdk_provider(self.provider, deadline, self._added):
                ok = False  # the tracker, the memory exporter or a user's processor is stuck
        except Exception as exc:  # a user's span processor raised in its shutdown()
            report_internal_error(("shutdown", "provider"), exc)
            ok = False
        return ok, truncated

    def keep_open(self, exporters: Iterable[Any]) -> None:
        """Leave these exporter objects running when this pipeline shuts down.

        The next configuration lists them again and exports to them: at
        shutdown they are flushed instead of shut down. Called before
        :meth:`shutdown`.
        """
        keep = {id(exporter) for exporter in exporters}
        if not keep:
            return
        for processor in self.queued:
            sink = processor._sink
            if isinstance(sink, ExporterSink) and id(sink.exporter) in keep:
                processor._sink = _KeptOpen(sink)

    def stats(self) -> list[ExportStats]:
        """Counters of every queued exporter, the user's span processors on the fast
        provider included, and of the memory exporter once a span failed to convert."""
        queues = list(self.queued)
        if isinstance(self.provider, FastTracerProvider):
            queues += [q for q in self.provider.queues() if isinstance(q, QueuedSpanProcessor)]
        stats = [processor.stats() for processor in dict.fromkeys(queues)]
        if isinstance(self.memory, LazyMemoryExporter) and self.memory.failed:
            stats.append(self.memory.stats())
        return stats


class _KeptOpen:
    """An exporter's sink whose ``shutdown`` flushes it and leaves it running."""

    def __init__(self, sink: ExporterSink) -> None:
        self._inner = sink

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """The wrapped sink's export."""
        return self._inner.export(batch)

    def flush(self) -> bool:
        """The wrapped sink's flush."""
        return self._inner.flush()

    def shutdown(self) -> None:
        """Flush only: the exporter goes on serving the next configuration."""
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:  # lost, any_batch_size: the wrapped sink's
        return getattr(self._inner, name)
