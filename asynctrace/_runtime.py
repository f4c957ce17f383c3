"""The runtime: configure once per process, flush before a kill, shut down at exit.

:func:`configure` validates everything (settings, extras, exporters, output
directory) before it changes anything; then it shuts down the previous
:class:`Telemetry`, starts the SDK pipeline, turns the span groups on and
registers the exit hooks. The OpenTelemetry SDK is imported here lazily, and
only when telemetry is enabled.
"""

from __future__ import annotations

import atexit
import logging
import numbers
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union, cast

from opentelemetry import trace

from . import _group_audit, _otel_global, _session_tracer, _stalls, _state
from ._config import TelemetryConfig
from ._errors import ConfigurationError, MissingExtraError, report_internal_error
from ._forksafe import call_in_child, reinit_at_fork
from ._goodput import release_for_shutdown
from ._profiling import Profiler, active_profiler, install_profiler
from ._session_tracer import SessionTracer
from ._sigterm import SigtermHandler, release_closed
from ._state import GATE, disable_telemetry, enable_telemetry

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ._goodput import GoodputStats
    from ._profiling import ProfilerSettings
    from ._settings import Settings
    from .export._pipeline import Pipeline
    from .export._stats import ExportStats

__all__ = [
    "Telemetry",
    "configure",
    "current_telemetry",
    "flush",
    "init_driver",
    "init_worker",
    "shutdown",
]

logger = logging.getLogger("asynctrace")

_MAX_WAIT_S = threading.TIMEOUT_MAX / 2  # waits longer than this raise OverflowError


def _wait_s(value: Any) -> float:
    """A ``timeout_s`` argument as the seconds to wait: a negative one waits not at all, one
    past what a wait takes (``inf``) as long as a wait can.

    Raises:
        ConfigurationError: not a real number (``None``, a string, a bool) or NaN, which
            would otherwise be read as "do not wait" and abandon a healthy exporter.
    """
    if value.__class__ is float and 0.0 <= value <= _MAX_WAIT_S:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
        raise ConfigurationError(
            f"timeout_s: {value!r} is not accepted; accepted: a number of seconds "
            "(0 or less: do not wait; inf: as long as it takes)"
        )
    seconds = cast("float", value)  # a Real: compared as it is (an int past a float's range too)
    if seconds <= 0:
        return 0.0
    return _MAX_WAIT_S if seconds >= _MAX_WAIT_S else float(seconds)


ConfigLike = Union[TelemetryConfig, Mapping[str, Any], None]  # noqa: UP007

_lock = threading.RLock()  # one configure() at a time
# _current itself: held only to read or swap it, never while waiting, so that a
# shutdown running on another thread (on SIGTERM, at exit) can forget its handle
# while a configure() holding _lock waits for that shutdown to end.
_current_lock = threading.RLock()  # (a signal handler's shutdown may come in while held)
reinit_at_fork(_lock, _current_lock, _state._lock)  # held at fork(): new in the child
_current: Telemetry | None = None
# The handle forgotten last, while its shutdown finishes, and then its result: what the
# module-level shutdown() and flush() answer once nothing runs (True before any shutdown).
_stopping: Telemetry | None = None
_last_result = True


class Telemetry:
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
        timeout_s = _wait_s(timeout_s)
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
        timeout = _wait_s(self.settings.shutdown_timeout_s if timeout_s is None else timeout_s)
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
            self._ended()
        return self._result

    def _shut_down(self, timeout: float) -> bool:
        try:
            return self._stop_everything(timeout)
        finally:  # whatever raised on the way: no hook left behind, the handle forgotten
            self._remove_hooks()
            self._forget()

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

    def _forget(self) -> None:
        global _current, _stopping
        with _current_lock:
            if _current is self:
                _current = None
                _stopping = self

    def _ended(self) -> None:
        """Its shutdown is over: the module-level functions answer its result from now on."""
        global _stopping, _last_result
        with _current_lock:
            if _stopping is self:
                _stopping, _last_result = None, self._result

    # -- installation ------------------------------------------------------------

    def _install(self) -> None:
        """Install everything, or (on any error) nothing: what was installed is undone.

        The SIGTERM handler comes first, as the one part that can fail for
        want of resources (descriptors, a thread); its shutdown, should the
        signal come meanwhile, waits on ``_lock`` until the rest is in place.

        Raises:
            ConfigurationError: the SIGTERM handler could not be set up.
        """
        try:
            with self._lock:
                if self.settings.handle_sigterm:
                    self._install_sigterm()
                self._install_the_rest()
        except BaseException:
            self.shutdown()  # the pipeline's threads, the hooks, the gate: all undone
            raise

    def _install_the_rest(self) -> None:
        pipeline = self._pipeline
        if pipeline is not None:
            _stalls.set_threshold(self.settings.loop_stall_threshold_ms)
            enable_telemetry(
                pipeline.provider,
                span_groups=self.settings.span_groups,
                propagate_scopes=self.settings.propagate_scopes,
            )
            if GATE.loop_stall:  # loops watched under the configuration before: still watched
                _stalls.rearm()
            self._owns_global = _otel_global.claim(pipeline.provider, self._shutdown_global)
            if self._profiler is not None:
                install_profiler(self._profiler)
        if self._sessions is not None:
            _session_tracer.install(self._sessions)
        atexit.register(self._at_exit)
        self._atexit_registered = True

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            logger.warning(
                "asynctrace: handle_sigterm needs configure() on the main thread; "
                "SIGTERM is not handled"
            )
            return
        try:
            self._sigterm = SigtermHandler(self.shutdown)
        except (OSError, RuntimeError) as exc:  # no descriptor or no thread to spare
            raise ConfigurationError(
                f"handle_sigterm: True: the SIGTERM handler could not be set up "
                f"({type(exc).__name__}: {exc}); telemetry is off; accepted: false, or true "
                "when the process can open a pipe and start a thread"
            ) from exc

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


# ---------------------------------------------------------------------------
# Module-level API.


def configure(
    config: ConfigLike = None,
    *,
    rank: int = 0,
    world_size: int = 1,
    role: str | None = None,
) -> Telemetry:
    """Validate *config* and start telemetry for this process.

    Everything is checked first: keys and values, the span-group spec, the
    exporters and their extras, the output directory (created if missing).
    On any error a :class:`ConfigurationError` (or :class:`MissingExtraError`)
    is raised and nothing changes: the previous configuration keeps running,
    OpenTelemetry's global provider and the span-group gate are untouched.
    Then the previous :class:`Telemetry` is shut down and the new one starts.

    Args:
        config: a :class:`TelemetryConfig`, a mapping of its fields (a YAML
            ``telemetry:`` block), or ``None`` to read ``ASYNCTRACE_*``
            environment variables. Never mutated.
        rank: this process's rank (names the trace file ``traces-r{rank}.jsonl``).
        world_size: number of ranks.
        role: e.g. ``"driver"``; ``None`` or ``"worker"`` keep the plain file name.

    Returns:
        The :class:`Telemetry` handle (inert when the config is disabled).

    Example:
        >>> telemetry = configure({"enabled": True, "exporters": ["memory"],
        ...                        "span_groups": "all"})  # doctest: +SKIP
        >>> telemetry.shutdown()  # doctest: +SKIP
        True
    """
    global _current, _last_result
    if config is None:
        config = TelemetryConfig.from_env()
    elif isinstance(config, Mapping):
        config = TelemetryConfig.from_mapping(config)
    from ._settings import resolve  # hostname, secrets: only when configuring

    settings = resolve(config, rank=rank, world_size=world_size, role=role)
    session_path = _session_path(settings)  # validated before anything changes
    if not settings.enabled:
        with _lock:
            previous = _current
            if previous is not None:
                previous.shutdown()
            _release_closed_sigterm()
            if session_path is None:
                return Telemetry(settings, None)
            telemetry = _start(settings, session_path, None)
            telemetry._install()
            with _current_lock:
                _current = telemetry
                _last_result = True
        return telemetry
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("sdk", "opentelemetry.sdk") from exc
    from .export import _pipeline

    plan = _pipeline.prepare(settings)
    profile_dir = _profile_dir(settings)  # checked before anything changes
    with _lock:
        previous = _current
        if previous is not None:  # waits for a shutdown running on another thread, if any
            previous._keep_exporters(settings.exporters)  # listed again: they stay open
            previous.shutdown()
        _release_closed_sigterm()
        telemetry = _start(settings, session_path, lambda: _pipeline.build(plan))
        if profile_dir is not None and settings.profiler is not None:  # its threads start now
            telemetry._profiler = _new_profiler(telemetry, settings.profiler, profile_dir)
        telemetry._install()
        with _current_lock:
            _current = telemetry
            _last_result = True  # a new run: the last one's shutdown is no longer asked
    return telemetry


def _new_profiler(telemetry: Telemetry, profiler: ProfilerSettings, directory: Path) -> Profiler:
    """The profiler of *telemetry* (started, not installed); on any error the new
    pipeline is shut down again, and the error raised (a :class:`ConfigurationError`
    naming the key when the process had no thread or descriptor to spare)."""
    settings = telemetry.settings
    try:
        return Profiler(profiler, directory, settings.rank, settings.role)
    except BaseException as exc:
        telemetry.shutdown()  # its export threads and files: nothing is left running
        if not isinstance(exc, (OSError, RuntimeError)):
            raise
        raise ConfigurationError(
            f"profiler: {profiler!r}: the profiler could not be started "
            f"({type(exc).__name__}: {exc}); telemetry is off; accepted: a profiler "
            "configuration the process can start (a thread and files to spare), or none"
        ) from exc


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


def _release_closed_sigterm() -> None:
    """Remove a SIGTERM handler left installed by a shutdown off the main thread.

    Only the main thread can; it puts back the handler it replaced and
    closes its pipes, so that handlers do not pile up over reconfigurations.
    """
    if threading.current_thread() is threading.main_thread():
        release_closed()


def _start(
    settings: Settings, session_path: Path | None, build: Callable[[], Pipeline] | None
) -> Telemetry:
    """The new handle's session tracer and pipeline, started (not installed yet).

    Every file was checked before the previous handle was shut down; an
    ``OSError`` that still comes (a directory replaced in between, a full
    disk) is a :class:`ConfigurationError` naming the file, and whatever had
    started is stopped again.
    """
    sessions: SessionTracer | None = None
    try:
        if session_path is not None:
            sessions = _new_session_tracer(settings, session_path)
        return Telemetry(settings, build() if build is not None else None, sessions)
    except BaseException as exc:
        if sessions is not None:
            sessions.shutdown(1.0)
        if not isinstance(exc, OSError):
            raise
        where = f" {exc.filename!r}" if exc.filename else ""
        raise ConfigurationError(
            f"output_dir: {settings.output_dir!r}: could not open{where} "
            f"({type(exc).__name__}: {exc.strerror or exc}); telemetry is off; accepted: a "
            "directory path this process can create and write to"
        ) from exc


def _profile_dir(settings: Settings) -> Path | None:
    """Where profiler captures go, if profiling is configured (created and checked)."""
    if settings.profiler is None or settings.profiler.output is None:
        return None
    from ._files import writable_dir

    return writable_dir(settings.profiler.output, "profiler.output")


def _session_path(settings: Settings) -> Path | None:
    """Where session records go, if the session tracer is on (directory checked)."""
    if not settings.session_tracer.enabled or settings.output_dir is None:
        return None
    from ._files import writable_dir, writable_file

    name = (
        f"sessions-r{settings.rank}.jsonl"
        if settings.role in (None, "worker")
        else f"sessions-{settings.role}-r{settings.rank}.jsonl"
    )
    directory = Path(settings.output_dir)
    key = "output_dir"
    if settings.session_tracer.output_dir is not None:  # relative to output_dir, or absolute
        key = "session_tracer.output_dir"
        directory = directory / os.path.expanduser(
            settings.session_tracer.output_dir.replace("{run_id}", settings.run_id)
        )
    return writable_file(writable_dir(directory, key) / name, key, "session file")


def _new_session_tracer(settings: Settings, path: Path) -> SessionTracer:
    return SessionTracer(
        path,
        rank=settings.rank,
        role=settings.role,
        run_id=settings.run_id,
        flush_threshold=settings.session_tracer.flush_threshold,
        max_pending=settings.session_tracer.max_pending,
        sequential_ids=settings.session_tracer.ids == "sequential",
    )


def init_driver(config: ConfigLike = None) -> Telemetry:
    """Configure the driver process (rank 0, role ``driver``) and share its run id.

    The driver is rank 0 of a process group of its own: it exports whatever
    ``export_ranks`` says (that key chooses among the workers), so the
    workers' configuration block can be passed here unchanged.

    Exports ``ASYNCTRACE_RUN_ID`` into ``os.environ`` so that workers started
    afterwards (subprocesses, Ray actors with the driver's environment) put
    their traces under the same run.

    Example:
        >>> telemetry = init_driver({"enabled": True, "run_id": "run-1"})  # doctest: +SKIP
        >>> os.environ["ASYNCTRACE_RUN_ID"]  # doctest: +SKIP
        'run-1'
    """
    telemetry = configure(config, rank=0, world_size=1, role="driver")
    from ._settings import RUN_ID_ENV

    os.environ[RUN_ID_ENV] = telemetry.run_id
    return telemetry


def init_worker(
    config: ConfigLike = None, rank: int | None = None, world_size: int | None = None
) -> Telemetry:
    """Configure a worker process of a multi-rank job.

    *rank* and *world_size* default to the launcher's variables, read in
    this order (:data:`asynctrace._ranks.LAUNCHER_VARS`): ``RANK``/``WORLD_SIZE``
    (torchrun and most launchers), ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``
    (Open MPI), ``PMI_RANK``/``PMI_SIZE`` (MPICH), ``SLURM_PROCID``/``SLURM_NTASKS``
    (srun); with none set, 0 and 1. A world size above 1 with no rank to go
    with it raises :class:`ConfigurationError` (pass *rank*), and so does a
    *rank* above 0 with no world size given or set, or one a world size
    variable does not hold (pass *world_size* too, as an ``mp.spawn`` worker
    does: ``init_worker(config, rank=rank, world_size=nprocs)``). The run id
    comes from the config, else from ``ASYNCTRACE_RUN_ID``.

    Example:
        >>> init_worker({"enabled": False}, rank=3, world_size=8).settings.rank
        3
    """
    from ._ranks import env_rank

    rank, world_size = env_rank(os.environ, rank, world_size)
    return configure(config, rank=rank, world_size=world_size, role="worker")


def current_telemetry() -> Telemetry | None:
    """The running :class:`Telemetry` of this process, if any.

    Example:
        >>> current_telemetry() is None
        True
    """
    return _current


def flush(timeout_s: float = 5.0) -> bool:
    """Flush the running telemetry (see :meth:`Telemetry.flush`).

    With none running: the result of the last shutdown (``True`` if none ever
    ran), as a flush after shutdown answers on the handle.

    Example:
        >>> flush(1.0)
        True
    """
    _wait_s(timeout_s)  # a bad argument is refused whether or not telemetry runs
    telemetry = _current or _stopping
    return _last_result if telemetry is None else telemetry.flush(timeout_s)


def shutdown(timeout_s: float | None = None) -> bool:
    """Shut the running telemetry down (see :meth:`Telemetry.shutdown`).

    With none running: the result of the last shutdown (``True`` if none ever
    ran), as a second shutdown answers on the handle; a shutdown still
    finishing on another thread is waited for.

    Example:
        >>> shutdown()
        True
    """
    if timeout_s is not None:
        _wait_s(timeout_s)  # a bad argument is refused whether or not telemetry runs
    telemetry = _current or _stopping
    return _last_result if telemetry is None else telemetry.shutdown(timeout_s)
