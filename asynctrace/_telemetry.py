"""The handle :func:`asynctrace.configure` returns: what runs, and its counters.

Flushing and shutting down are :mod:`asynctrace._telemetry_shutdown`;
installing the hooks is :mod:`asynctrace._telemetry_install`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from ._forksafe import call_in_child, reinit_at_fork
from ._telemetry_install import TelemetryInstall

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ._goodput_stats import GoodputStats
    from ._profiler import Profiler
    from ._resolved_settings import Settings
    from ._session_tracer import SessionTracer
    from ._sigterm import SigtermHandler
    from .export._running_pipeline import Pipeline
    from .export._stats import ExportStats

__all__ = ["Telemetry"]


class Telemetry(TelemetryInstall):
    """The handle returned by :func:`configure`: flush, shut down, inspect.

    A disabled configuration returns a handle too; its methods do nothing.

    Example:
        >>> telemetry = configure({"enabled": False})
        >>> telemetry.enabled, telemetry.flush(1.0)
        (False, True)
    """

    def __init__(
        self,
        settings: Settings,
        pipeline: Pipeline | None,
        sessions: SessionTracer | None = None,
    ) -> None:
        self.settings = settings
        self._pipeline = pipeline
        self._sessions = sessions
        self._lock = threading.Lock()
        self._running = pipeline is not None or sessions is not None
        self._result = True
        self._stopped = threading.Event()  # set once shutdown() has finished
        # Threads inside shutdown() (running it or waiting for it): a signal handler that
        # interrupts one of them and calls flush() or shutdown() answers at once, as the
        # shutdown cannot go on under it (and may hold the event's lock).
        self._in_shutdown: set[int] = set()
        # The event's condition lock too: a thread inside set() or wait() at fork().
        reinit_at_fork(self._lock, self._stopped)
        call_in_child(self._forget_threads)  # not in a forked child
        if not self._running:
            self._stopped.set()  # nothing to shut down: shutdown() returns at once
        self._owns_global = False
        self._sigterm: SigtermHandler | None = None
        self._atexit_registered = False
        self._profiler: Profiler | None = None  # set by configure() when profiling
        self._pid = os.getpid()  # a forked child inherits the handle, not what it runs

    def _forget_threads(self) -> None:
        """In a forked child: the threads that were inside ``shutdown()`` are not there."""
        self._in_shutdown.clear()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped" if self._pipeline else "disabled"
        return f"<Telemetry {state} run_id={self.run_id!r} rank={self.settings.rank}>"

    @property
    def enabled(self) -> bool:
        """Whether this handle records spans (configured enabled and not shut down)."""
        return self._running and self._pipeline is not None

    @property
    def sessions(self) -> SessionTracer | None:
        """The session lifecycle tracer, when ``session_tracer.enabled``."""
        return self._sessions

    @property
    def run_id(self) -> str:
        """The run id shared by all processes of the run."""
        return self.settings.run_id

    @property
    def provider(self) -> trace.TracerProvider | None:
        """The tracer provider spans are recorded by (``None`` when disabled).

        A :class:`~asynctrace.FastTracerProvider` (``provider="fast"``) or an
        SDK ``TracerProvider``; both take SDK span processors through
        ``add_span_processor``.
        """
        return self._pipeline.provider if self._pipeline is not None else None

    @property
    def memory_exporter(self) -> InMemorySpanExporter | None:
        """The in-memory exporter when ``"memory"`` is among the exporters.

        Spans appear in it as soon as they end.
        """
        return self._pipeline.memory if self._pipeline is not None else None

    @property
    def trace_file(self) -> Path | None:
        """The chrome trace file of this process, if the chrome exporter is on."""
        return self._pipeline.chrome_path if self._pipeline is not None else None

    @property
    def owns_global_provider(self) -> bool:
        """Whether OpenTelemetry's global tracer provider forwards to this pipeline."""
        return self._owns_global

    @property
    def goodput(self) -> GoodputStats | None:
        """Counters of the live goodput rollup (``None``: it is off).

        Example:
            >>> configure({"enabled": False}).goodput is None
            True
        """
        if self._pipeline is None:
            return None
        for processor in self._pipeline.queued:
            sink: Any = processor._sink
            if processor.name == "chrome":  # the rollup may ride on the chrome writer's thread
                sink = getattr(sink, "goodput", None)
            elif processor.name != "goodput":
                continue
            if sink is not None:
                stats: GoodputStats = sink.stats()
                return stats
        return None

    def stats(self) -> dict[str, ExportStats]:
        """Per-exporter counters: exported, dropped, failed, queued.

        Example:
            >>> configure({"enabled": False}).stats()
            {}
        """
        if self._pipeline is None:
            return {}
        return {item.name: item for item in self._pipeline.stats()}

    @property
    def dropped_spans(self) -> int:
        """Spans dropped by all exporters so far (full queues, or ended after shutdown)."""
        return sum(item.dropped for item in self.stats().values())
