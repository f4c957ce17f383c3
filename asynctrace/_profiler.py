"""The profiler: the installed schedule and the one capture in progress, started and saved.

A capture starts after its span starts and stops before it ends; it is saved
by a background thread (see :mod:`asynctrace._profiling` for the rules).
"""

from __future__ import annotations

import logging
import numbers
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._capture_backend import Backend
from ._capture_finish import finish_capture
from ._own_threads import leaving_signals
from ._profile_names import claim_capture
from ._profile_requests import REQUEST_FILE, REQUESTS, Request, poll_requests
from ._profiler_backends import import_backend
from ._profiler_forks import LIVE
from ._profiler_settings import ProfilerSettings
from ._profiler_spares import FORK_WAIT_S, SpareBackends
from ._profiling import tell_once, warn_once
from ._viztracer_backend import THREAD_HOOK

__all__ = ["Profiler"]

logger = logging.getLogger("asynctrace")


@dataclass
class Profiler(SpareBackends):
    """The installed schedule plus the capture in progress (at most one per process)."""

    settings: ProfilerSettings
    directory: Path
    rank: int
    role: str | None = None
    _request: Request = field(default_factory=Request)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _active: Backend | None = None
    _saving: list[threading.Thread] = field(default_factory=list)
    _watcher_pid: int = 0
    _closed: threading.Event = field(default_factory=threading.Event)
    _spare: Backend | None = None  # built ahead of the next capture
    _preparing: threading.Thread | None = None  # building it
    # Hands the spare over: a builder's store and a step's take are one step each, so a
    # spare is never overwritten (its tracer would be held by nothing and free to none).
    _spare_lock: threading.Lock = field(default_factory=threading.Lock)
    _steps: frozenset[int] = frozenset()
    _captures: dict[object, int] = field(default_factory=dict)  # step -> last name suffix
    _failed: int = 0  # captures not saved (no thread to save them, a write that failed)

    def __post_init__(self) -> None:
        self._steps = self.settings.steps  # read on the hot path: one attribute, no chain
        self._request = REQUESTS.setdefault(self.directory.absolute(), self._request)
        try:  # here, not on a thread: a fork meanwhile would inherit the import lock held
            import_backend(self.settings.backend)
        except Exception as exc:
            warn_once(f"the {self.settings.backend} profiler could not be imported", exc)
        self._prepare_spare()
        self._watch()
        LIVE[id(self)] = self  # the fork hooks reach it while it lives

    def _before_fork(self) -> None:
        """A tracer half-built must not be inherited: wait (briefly) for it."""
        thread = self._preparing
        if thread is not None and thread is not threading.current_thread():
            thread.join(FORK_WAIT_S)

    def _in_child(self) -> None:
        """The watcher thread is not inherited; nor is a capture."""
        self._lock = threading.Lock()  # whatever else holds: never inherited held
        self._spare_lock = threading.Lock()
        active, self._active = self._active, None
        self._preparing = None
        # torch's profiler is not stopped: Kineto's threads are not in the child,
        # and stopping it there may wait for them. viztracer's hook is this thread's.
        if active is not None and active.name == "python":
            try:
                active.abandon()  # the child would run traced its whole life
            except Exception as exc:
                warn_once(f"the {self.settings.backend} profiler did not stop", exc)
        if not self._closed.is_set():
            self._watch()

    def start(self, iteration: object, span: Any) -> Backend | None:
        """Start a capture of *span*; ``None`` when one is running, the iteration is no
        step (a bool, a float equal to a scheduled step) and no request is pending, or the
        backend fails to start."""
        with self._lock:
            if self._active is not None or self._closed.is_set():
                return None
            request = self._request.pending
            step: int | str = "na"
            if iteration.__class__ is not bool and isinstance(iteration, numbers.Integral):
                step = int(iteration)  # numpy's integers too
            elif request is None:  # True == 1, 2.0 == 2: a schedule holds them, no step is
                return None
            backend = self._take_spare()
            path: Path | None = None
            try:
                if backend is None:  # the one built ahead is not ready (or failed): build now
                    backend = self._build_now()
                path = backend.path = claim_capture(
                    self.directory, self.rank, self.role, self._captures, step, backend.name
                )
                context = span.get_span_context()
                backend.about = {
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "pid": os.getpid(),
                    "rank": self.rank,
                }
                backend.start()
                backend.thread = threading.get_ident()
            except Exception as exc:  # never decides whether the step runs
                if path is not None:
                    path.unlink(missing_ok=True)  # the name claimed, no capture to come
                warn_once(f"the {self.settings.backend} profiler did not start", exc)
                return None
            self._active = backend
            if request is not None:  # this capture answers the request (and no newer one)
                with self._request.lock:
                    self._request.honoured = request
                    if self._request.pending == request:
                        self._request.pending = None
        return backend

    def stop(self, backend: Backend) -> None:
        """Stop *backend*'s capture and save it in the background."""
        with self._lock:
            mine = self._active is backend
            if mine:
                self._active = None
        if not mine:  # stopped by close() at shutdown (or abandoned in a forked child)
            try:
                backend.release()
            except Exception as exc:
                warn_once(f"the {self.settings.backend} profiler did not stop cleanly", exc)
            return
        elsewhere = backend.thread != threading.get_ident()
        if elsewhere and THREAD_HOOK and backend.name == "python":
            tell_once(
                "thread",
                "asynctrace: a profiled span was ended on another thread than the one it "
                "started on: that thread keeps viztracer's idle profile hook for the rest "
                "of its life (its calls cost more; told once)",
            )
        if self._finish(backend) and not self._closed.is_set():
            self._prepare_spare()

    def _finish(self, backend: Backend, **extra: Any) -> bool:
        """Stop *backend* and start saving it; ``False`` if it did not stop or no thread
        could be started to save it (not saved, its claimed name given back)."""
        try:
            backend.stop()
        except Exception as exc:  # a capture that did not stop is not saved, half-written
            warn_once(f"the {self.settings.backend} profiler did not stop cleanly", exc)
            backend.path.unlink(missing_ok=True)  # its claimed name: no capture to come
            return False
        saver = threading.Thread(
            target=leaving_signals(self._save),
            args=(backend, {**backend.about, **extra}),
            name="asynctrace-profile-save",
        )
        saver.daemon = True
        try:
            saver.start()
        except RuntimeError as exc:  # the process's thread limit: the capture is dropped
            self._failed += 1
            backend.path.unlink(missing_ok=True)
            warn_once(
                f"a {self.settings.backend} profile could not be saved (no thread to save it)",
                exc,
                "the capture is lost",
            )
            return False
        with self._lock:  # only a thread started: close() joins each one
            self._saving = [t for t in self._saving if t.is_alive()]
            self._saving.append(saver)
        return True

    def _save(self, backend: Backend, about: dict[str, Any]) -> None:
        if not finish_capture(backend, about):
            with self._lock:
                self._failed += 1

    def halt(self) -> None:
        """Stop watching, and stop a capture still running (saved, marked ``truncated``)
        without waiting for it to be saved: done before the spans still open are ended."""
        self._closed.set()
        self._discard_spare()
        with self._lock:
            active, self._active = self._active, None
        if active is not None:  # its span is still open: cut, as the spans open at shutdown
            self._finish(active, truncated=True)

    def close(self, timeout_s: float) -> bool:
        """:meth:`halt`, then wait up to *timeout_s* for captures being saved. ``False``
        if one did not finish, or one was not saved (a failed write, no thread)."""
        deadline = time.monotonic() + timeout_s
        self.halt()
        with self._lock:
            saving = list(self._saving)
        for saver in saving:
            saver.join(max(0.0, deadline - time.monotonic()))
        unfinished = sum(saver.is_alive() for saver in saving)
        if unfinished:
            logger.warning(
                "asynctrace: %d profile capture(s) were still being saved at shutdown; they "
                "are incomplete or missing",
                unfinished,
            )
        return not unfinished and not self._failed

    def _watch(self) -> None:
        self._watcher_pid = os.getpid()
        self._lock = threading.Lock()  # a forked child must not inherit a held lock
        self._active = None
        self._saving = []
        thread = threading.Thread(
            target=leaving_signals(poll_requests),
            args=(self.directory / REQUEST_FILE, self._request, self._closed),
            name="asynctrace-profile-requests",
        )
        thread.daemon = True
        thread.start()
