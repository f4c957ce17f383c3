"""The ``python`` profiler backend: viztracer, every Python call and asyncio tasks' tracks.

Threads. Before Python 3.12, viztracer records a thread once Python's profile
hook is set on it: the span's thread at :meth:`PythonBackend.start`, and threads
started while the capture runs (``threading.setprofile`` is set only between
start and stop, so threads started at other times run without it). Python
sets a profile hook on the current thread or on threads yet to start only:
threads already running when a capture starts are not recorded. From 3.12,
viztracer traces through ``sys.monitoring``, which covers every thread.
"""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path
from typing import Any

from ._capture_backend import Backend
from ._viztracer_tracers import (
    BUDGET,
    BUILT,
    HOOKS,
    IDLE,
    SEEN,
    TASKS,
    TRACERS,
    TracersBusy,
    take,
)

__all__ = ["THREAD_HOOK", "PythonBackend"]

# Before 3.12 viztracer records a thread through its profile hook; from 3.12 through
# sys.monitoring, every thread, with no hook (as its own enable_thread_tracing).
_THREAD_HOOK = THREAD_HOOK = sys.version_info < (3, 12)


class PythonBackend(Backend):
    """viztracer: every Python call, and asyncio tasks as tracks of their own."""

    name = "python"
    _tracer: Any = None
    stale: frozenset[int] = frozenset()  # threads named by the tracer's earlier captures

    def prepare(self) -> None:
        """Take an idle tracer, or build one without hooking the threads started meanwhile."""
        viztracer: Any = importlib.import_module("viztracer")
        with HOOKS:
            self._previous_hook = threading.getprofile()
            tracer = take(self.settings.entries)
            if tracer is not None:
                self._tracer = tracer
                self.stale = SEEN.get(id(tracer), frozenset())
                return
            if BUILT[0] >= BUDGET:
                raise TracersBusy(
                    f"{BUILT[0]} viztracer tracers were built in this process (each keeps "
                    "a thread-local storage key for good), none of them is free"
                )
            previous, mine = self._previous_hook, sys.getprofile()
            # Its constructor hooks every thread started from then on, captured or not
            # (each of their calls pays for it), by calling threading.setprofile: that
            # call is skipped for this thread, so no thread started meanwhile elsewhere
            # is hooked either. Only a running capture sets the hook (start()).
            setprofile, builder = threading.setprofile, threading.get_ident()

            def others_only(func: Any) -> None:
                if threading.get_ident() != builder:
                    setprofile(func)

            threading.setprofile = others_only
            try:
                tracer = viztracer.VizTracer(  # allocates its event buffer: about 0.1 s
                    tracer_entries=self.settings.entries,
                    verbose=0,
                    log_async=True,
                    register_global=False,
                    output_file=str(self.path),
                    file_info=False,  # the source of every traced file: a script's secrets
                )
                BUILT[0] += 1
                # its plugin manager points back at it (no plugins here): a cycle the
                # cyclic GC would free at any moment, on any thread
                tracer._plugin_manager._tracer = None
                TRACERS.append(tracer)
                self._tracer = tracer
            finally:
                threading.setprofile = setprofile
                if threading.getprofile() is not previous:  # set some other way
                    threading.setprofile(previous)
        if mine is None and sys.getprofile() is self._tracer:  # and this thread, idle
            sys.setprofile(None)

    def start(self) -> None:
        """Start the tracer (and hook new threads), then mark the clock; abandoned on error."""
        if _THREAD_HOOK:  # threads started meanwhile are recorded too
            with HOOKS:
                self._previous_hook = threading.getprofile()
                threading.setprofile(self._tracer.threadtracefunc)
        TASKS.add(id(self._tracer))  # until its saved capture shows no task
        try:
            self._tracer.start()
            self.mark()
        except BaseException:
            self.abandon()  # a tracer left on would trace everything after, for good
            raise

    def stop(self) -> None:
        """Mark the clock, then stop the tracer and unhook new threads."""
        try:
            self.mark()
        finally:  # the tracer stops whatever the marker did: it would trace on for good
            self.abandon()

    def abandon(self) -> None:
        """Stop the tracer without a marker and give back the threads' earlier hook."""
        try:
            self._tracer.stop()
        finally:
            with HOOKS:
                if threading.getprofile() == self._tracer.threadtracefunc:
                    threading.setprofile(self._previous_hook)

    def release(self) -> None:
        """Unhook this thread from a tracer that another thread stopped."""
        if sys.getprofile() is self._tracer:  # stopped on another thread: still hooked here
            sys.setprofile(None)

    def discard(self) -> None:
        """Give back a tracer never started (a spare not needed): idle for a later capture."""
        tracer, self._tracer = self._tracer, None
        if tracer is not None and not tracer.enable:
            with HOOKS:
                if tracer in TRACERS and tracer not in IDLE:
                    IDLE.append(tracer)

    def save(self, path: Path) -> None:
        """Write the capture to *path*, then empty the tracer and keep it idle for reuse."""
        tracer = self._tracer
        try:
            tracer.save(str(path), file_info=False, verbose=0)
            events = tracer.data.get("traceEvents", [])
            threads = {e.get("tid") for e in events if e.get("name") == "thread_name"}
            SEEN[id(tracer)] = self.stale | frozenset(t for t in threads if isinstance(t, int))
            if not _on_tasks(events):
                TASKS.discard(id(tracer))
        finally:  # reused by a later capture: its buffer and parsed events emptied
            tracer.data = {}
            tracer.clear()
            with HOOKS:
                if tracer in TRACERS and tracer not in IDLE:
                    IDLE.append(tracer)

    def _marker(self, name: str) -> None:
        self._tracer.add_instant(name)


def _on_tasks(events: list[Any]) -> bool:
    """Whether any of viztracer's *events* is on a task's track, not a thread's.

    The threads' names come first, the tasks' after the events.
    """
    threads: set[Any] = set()
    for event in events:
        if event.get("ph") != "M":
            if event.get("tid") not in threads:
                return True
        elif event.get("name") == "thread_name":
            threads.add(event.get("tid"))
    return False
