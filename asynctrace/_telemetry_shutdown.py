"""How a telemetry handle flushes, and shuts down once, whatever thread or signal asks.

The shutdown stops recording first (sessions and spans), then writes out
the backlog within the timeout, removes the exit hooks and logs what each
exporter dropped or failed. A shutdown asked while one runs waits for it.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import _group_audit, _otel_global, _session_tracer, _stalls
from ._errors import report_internal_error
from ._goodput import release_for_shutdown
from ._profiling import active_profiler, install_profiler
from ._running import ended, forget
from ._state import GATE, disable_telemetry
from ._timeouts import wait_s

if TYPE_CHECKING:
    from ._profiler import Profiler
    from ._resolved_settings import Settings
    from ._session_tracer import SessionTracer
    from ._sigterm import SigtermHandler
    from .export._running_pipeline import Pipeline

__all__ = ["TelemetryShutdown"]

logger = logging.getLogger("asynctrace")


class TelemetryShutdown:
    """How a :class:`~asynctrace.Telemetry` flushes and shuts down.

    The base of :class:`asynctrace._telemetry.Telemetry`, whose ``__init__``
    makes every attribute declared here (and says what each is).
    """

    settings: Settings
    _pipeline: Pipeline | None
    _sessions: SessionTracer | None
    _lock: threading.Lock
    _running: bool
    _result: bool
    _stopped: threading.Event
    _in_shutdown: set[int]
    _sigterm: SigtermHandler | None
    _atexit_registered: bool
    _profiler: Profiler | None
    _pid: int

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Write out every span ended so far, waiting at most *timeout_s*.

        For a process about to be killed (where no ``atexit`` runs). It blocks
        the calling thread: from async code, run it in a worker thread.
        Returns ``False`` if an exporter did not finish in time. Once
        :meth:`shutdown` has begun (on any thread), it waits for the shutdown
        within *timeout_s* and returns its result: ``False`` if it failed or
        has not finished.

        Example:
            >>> configure({"enabled": False}).flush(timeout_s=2.0)
            True
        """
        timeout_s = wait_s(timeout_s)
        if threading.get_ident() in self._in_shutdown:  # a signal handler on its thread
            return self._result if self._stopped.is_set() else False
        if not self._running:  # shut down, or shutting down: its flush is the last one
            return self._result if self._stopped.wait(timeout_s) else False
        deadline = time.monotonic() + timeout_s
        ok = True
        if self._pipeline is not None:
            ok = self._pipeline.flush(timeout_s)
        if self._sessions is not None:
            ok = self._sessions.flush(deadline - time.monotonic()) and ok
        return ok

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """End open spans (tagged truncated), flush and stop every exporter.

        Idempotent. Waits at most *timeout_s* (default: the configured
        ``shutdown_timeout_s``) even when an exporter is stuck; returns
        ``False`` in that case. Called while a shutdown runs on another thread,
        it waits for that one (within *timeout_s*) and returns its result, or
        ``False`` if it has not finished. Called (or :meth:`flush` called) from a
        signal handler that interrupted a shutdown on the same thread, it
        returns at once: the result if that shutdown has finished, else
        ``False`` (the shutdown goes on once the handler returns). Dropped and
        failed spans are logged.

        Example:
            >>> configure({"enabled": False}).shutdown()
            True
        """
        timeout = wait_s(self.settings.shutdown_timeout_s if timeout_s is None else timeout_s)
        me = threading.get_ident()
        if me in self._in_shutdown:  # a signal handler interrupting this thread's shutdown()
            return self._result if self._stopped.is_set() else False
        self._in_shutdown.add(me)
        try:
            return self._shutdown_once(timeout)
        finally:
            self._in_shutdown.discard(me)

    def _shutdown_once(self, timeout: float) -> bool:
        release_for_shutdown()  # called in a goodput callback: its close must not wait for it
        with self._lock:
            running, self._running = self._running, False
        if not running:  # done, or running on another thread (at exit, on SIGTERM): wait for it
            return self._result if self._stopped.wait(timeout) else False
        try:
            self._result = self._shut_down(timeout)
        except Exception as exc:  # a user's processor or exporter raised: still stopped
            report_internal_error(("shutdown",), exc)
            self._result = False
        finally:
            self._stopped.set()
            ended(self, self._result)
        return self._result

    def _shut_down(self, timeout: float) -> bool:
        try:
            return self._stop_everything(timeout)
        finally:  # whatever raised on the way: no hook left behind, the handle forgotten
            self._remove_hooks()
            forget(self)

    def _stop_everything(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        ok = True
        # Nothing new is recorded from here on, sessions nor spans, before any backlog is
        # written: code still running meanwhile (a loop the SIGTERM handler let run on)
        # must not grow the backlog the shutdown is writing.
        if self._sessions is not None and _session_tracer.current_tracer() is self._sessions:
            _session_tracer.install(None)
        pipeline = self._pipeline
        profiler = self._profiler
        if pipeline is not None:
            if profiler is not None:
                if active_profiler() is profiler:
                    install_profiler(None)  # no new capture; those saved are waited for below
                # A capture still running stops before the spans still open are ended (its
                # events stay inside its span), and is saved while the exporters shut down.
                profiler.halt()
            # Groups asked for and never registered are told before the end, however short
            # the run was (the audit window may not have closed), whatever holds the gate
            # now (a test's capture, say).
            _group_audit.report_unregistered()
            if GATE.provider is pipeline.provider:
                disable_telemetry()
                _stalls.stop_all()  # loop-stall watchdogs end now (within 100 ms)
                _stalls.set_threshold(_stalls.DEFAULT_THRESHOLD_MS)
        if self._sessions is not None:
            ok = self._sessions.shutdown(timeout)
        if pipeline is None:
            return ok
        _otel_global.release(pipeline.provider)
        pipeline_ok, truncated = pipeline.shutdown(max(0.0, deadline - time.monotonic()))
        ok = ok and pipeline_ok
        if profiler is not None:  # captures still being saved, in what time is left
            ok = profiler.close(max(0.0, deadline - time.monotonic())) and ok
        if os.getpid() != self._pid:  # a forked child: the counts below are the parent's
            return ok
        if truncated:
            logger.info(
                "asynctrace: %d spans were still open at shutdown; they were ended with "
                "asynctrace.truncated=true",
                truncated,
            )
        _summarize(pipeline)
        return ok

    def _shutdown_global(self) -> None:
        """The global provider's ``shutdown()``: this telemetry's, and the provider's own
        when it is the program's (which :meth:`shutdown` leaves running)."""
        self.shutdown()
        pipeline = self._pipeline
        if pipeline is not None and not pipeline.owns_provider:
            pipeline.provider.shutdown()  # type: ignore[attr-defined]

    def _keep_exporters(self, exporters: Iterable[object]) -> None:
        """At shutdown, flush the exporter objects among *exporters* instead of shutting
        them down: the next configuration, which lists them too, exports to them."""
        if self._pipeline is not None:
            self._pipeline.keep_open(e for e in exporters if not isinstance(e, str))

    def _remove_hooks(self) -> None:
        if self._atexit_registered:
            atexit.unregister(self._at_exit)
            self._atexit_registered = False
        if self._sigterm is not None:
            self._sigterm.close()  # on SIGTERM it stays, to hand the signal on

    def _at_exit(self) -> None:
        if os.getpid() != self._pid:
            # A forked child exiting: the handle and its exporters are the parent's (inert
            # here, they write nothing); shutting them down would only report the
            # parent's counts as the child's.
            return
        self.shutdown()


def _summarize(pipeline: Pipeline) -> None:
    """Log what each exporter dropped or failed, at the end of a shutdown.

    Spans an exporter abandoned past the timeout was still exporting are not
    dropped: its thread goes on and may still write them. They are told apart
    (counted as dropped only while they are not written).
    """
    import dataclasses

    from ._fast import FastTracerProvider
    from .export._queue import QueuedSpanProcessor
    from .export._stats import summarize

    stats = pipeline.stats()  # first: the in-flight spans read below are among its dropped
    queues = list(pipeline.queued)
    if isinstance(pipeline.provider, FastTracerProvider):
        queues += [q for q in pipeline.provider.queues() if isinstance(q, QueuedSpanProcessor)]
    flying = {q.name: q._in_flight for q in dict.fromkeys(queues) if q._abandoned}
    told = []
    for item in stats:
        in_flight = min(flying.get(item.name, 0), item.dropped)
        if in_flight:
            logger.warning(
                "asynctrace: exporter %r was abandoned with %d spans in flight; its thread "
                "may still write them",
                item.name,
                in_flight,
            )
            item = dataclasses.replace(item, dropped=item.dropped - in_flight)
        told.append(item)
    summarize(told)
