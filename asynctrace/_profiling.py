"""Profiling chosen steps: the schedule, the trigger, and one capture at a time.

A span asks to be profiled (``profile=True`` on :func:`managed_span`,
:func:`umbrella_span`, :func:`trace_fn`); it is profiled only when the
``profiler`` block is configured **and** its ``rl.iteration`` (its own
attribute, else the scope's) is in ``profiler.steps``, or a request is
pending. That is the seed's rule: a request without a schedule is ignored, a
scheduled step whose span does not ask stays dormant. A request is the file
``DIR/profile-next-step`` (``DIR`` is the output directory) appearing or
changing: every process that sees it profiles the next span that asks, once
per request.

The capture starts after the span starts and stops before it ends, so it
covers the span and nothing after it. It is saved by a background thread
next to the trace as ``profile-r{rank}-step{N}.{backend}.json``
(``profile-{role}-r{rank}-...`` for a role other than ``worker``, as the trace
files; ``step{N}_2``, ``_3``, ... for a name taken already, by an earlier
capture of the step or by another process: a name is claimed by creating its
file, so no two captures share one), with the clock offset between the
backend's timeline and the spans' (measured around marker events, see
:mod:`asynctrace._profiler_backends`) under ``otherData.asynctrace``, which
``asynctrace convert`` uses to merge it.
"""

from __future__ import annotations

import logging
import numbers
import os
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from ._cm import SyncAndAsync
from ._config_checks import check_bool, unknown_keys_message
from ._errors import ConfigurationError
from ._forksafe import reinit_at_fork
from ._own_threads import leaving_signals
from ._profiler_backends import (
    BACKENDS,
    THREAD_HOOK,
    Backend,
    TracersBusy,
    check_backend,
    finish_capture,
    import_backend,
)

__all__ = [
    "ProfiledSpan",
    "ProfilerSettings",
    "active_profiler",
    "install_profiler",
]

logger = logging.getLogger("asynctrace")

REQUEST_FILE = "profile-next-step"
RL_ITERATION = "rl.iteration"
PROFILE_FILE = "asynctrace.profile.file"
_POLL_S = 0.5
_KEYS = ("steps", "backend", "output", "record_shapes", "with_stack", "entries")
_ENTRIES = (1_000, 100_000_000)  # viztracer's buffer: accepted bounds, in entries
_FORK_WAIT_S = 2.0  # longest a fork waits for a tracer being built (about 0.1 s)
_MAX_CLAIMS = 10_000  # names tried for one capture before giving up on it
_PLACEHOLDER = b'{"traceEvents":[]}'  # a claimed name, until the capture is saved
_MAX_STEPS = 100_000  # scheduled steps: each is held in a set, looked up per span


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


@dataclass(frozen=True)
class ProfilerSettings:
    """The validated ``profiler`` block.

    Attributes:
        steps: the scheduled steps (``rl.iteration`` values).
        backend: ``"python"`` (viztracer) or ``"torch"`` (``torch.profiler``).
        output: the directory of the captures; ``None``: the trace's directory.
        record_shapes: torch only: record operator input shapes.
        with_stack: torch only: record Python stacks of operators.
        entries: python only: viztracer's event buffer, in entries (a circular
            buffer: a step with more events loses its earliest ones).

    Example:
        >>> ProfilerSettings.parse("profiler", {"steps": [49, 99]}).steps
        frozenset({49, 99})
    """

    steps: frozenset[int] = frozenset()
    backend: str = "python"
    output: str | None = None
    record_shapes: bool = False
    with_stack: bool = False
    entries: int = 1_000_000

    @classmethod
    def parse(cls, key: str, value: Any) -> ProfilerSettings:
        """Validate a ``profiler`` mapping; a missing backend extra fails here, not at step 49.

        Raises:
            ConfigurationError: an unknown key or a bad value (named, with what is accepted).
            MissingExtraError: the backend's package is not installed.
        """
        if isinstance(value, ProfilerSettings):
            return value
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"{key}: expected a mapping with keys {', '.join(_KEYS)}, got {value!r}"
            )
        unknown = [k for k in value if k not in _KEYS]
        if unknown:
            raise ConfigurationError(unknown_keys_message(key, unknown, _KEYS))
        steps = value.get("steps", ())
        accepted = f"accepted: a list of at most {_MAX_STEPS} integers >= 0"
        if isinstance(steps, (str, bytes, Mapping)) or not hasattr(steps, "__iter__"):
            raise ConfigurationError(f"{key}.steps: {steps!r} is not accepted; {accepted}")
        checked: set[int] = set()
        for step in steps:
            if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
                raise ConfigurationError(f"{key}.steps: {step!r} is not accepted; {accepted}")
            checked.add(int(step))  # numpy's integers too, as an rl.iteration is
            if len(checked) > _MAX_STEPS:  # a range(0, 10**15, 7) would never end
                raise ConfigurationError(
                    f"{key}.steps: {_shown(steps)} has more than {_MAX_STEPS} steps; {accepted}"
                )
        backend = value.get("backend", "python")
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ConfigurationError(
                f"{key}.backend: {backend!r} is not accepted; accepted: {', '.join(BACKENDS)}"
            )
        check_backend(backend)
        output = value.get("output")
        if output is not None and (not isinstance(output, (str, os.PathLike)) or not output):
            raise ConfigurationError(
                f"{key}.output: {output!r} is not accepted; accepted: a directory path, or null "
                "(the trace's directory)"
            )
        flags = {}
        for name in ("record_shapes", "with_stack"):  # "true" too, as every boolean key
            flags[name] = check_bool(f"{key}.{name}", value.get(name, False))
        entries = value.get("entries", 1_000_000)
        low, high = _ENTRIES
        if isinstance(entries, bool) or not isinstance(entries, int) or not low <= entries <= high:
            raise ConfigurationError(
                f"{key}.entries: {entries!r} is not accepted; accepted: an integer from "
                f"{low} to {high}"
            )
        return cls(
            frozenset(checked),
            backend,
            None if output is None else str(output),
            entries=entries,
            **flags,
        )


@dataclass
class _Request:
    """The request file: (inode, mtime) of the pending request and of the last one honoured.

    One per directory for the process's life: a profiler configured again on the same
    directory answers a request pending or answered before, as its first one did.
    """

    pending: tuple[int, int] | None = None
    honoured: tuple[int, int] | None = None
    watched: bool = False  # polled once: a file there before is no request
    lock: threading.Lock = field(default_factory=threading.Lock)  # compare and set as one

    def __post_init__(self) -> None:
        reinit_at_fork(self.lock)


_REQUESTS: dict[Path, _Request] = {}  # directory -> its request state
# The profilers alive, for the fork hooks: one pair of hooks for the process, not one
# per configure() (os.register_at_fork cannot take a hook back).
_LIVE: weakref.WeakValueDictionary[int, Profiler] = weakref.WeakValueDictionary()


def _before_fork() -> None:
    for profiler in list(_LIVE.values()):
        try:
            profiler._before_fork()
        except Exception as exc:  # the fork goes on
            _warn_once("a profiler could not get ready for a fork", exc)


def _in_child() -> None:
    for profiler in list(_LIVE.values()):
        try:
            profiler._in_child()
        except Exception as exc:  # the child goes on, unprofiled
            _warn_once("a profiler could not be reset in a forked child", exc)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_in_child)


@dataclass
class Profiler:
    """The installed schedule plus the capture in progress (at most one per process)."""

    settings: ProfilerSettings
    directory: Path
    rank: int
    role: str | None = None
    _request: _Request = field(default_factory=_Request)
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
        self._request = _REQUESTS.setdefault(self.directory.absolute(), self._request)
        try:  # here, not on a thread: a fork meanwhile would inherit the import lock held
            import_backend(self.settings.backend)
        except Exception as exc:
            _warn_once(f"the {self.settings.backend} profiler could not be imported", exc)
        self._prepare_spare()
        self._watch()
        _LIVE[id(self)] = self  # the fork hooks below reach it while it lives

    def _before_fork(self) -> None:
        """A tracer half-built must not be inherited: wait (briefly) for it."""
        thread = self._preparing
        if thread is not None and thread is not threading.current_thread():
            thread.join(_FORK_WAIT_S)

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
                _warn_once(f"the {self.settings.backend} profiler did not stop", exc)
        if not self._closed.is_set():
            self._watch()

    def _prepare_spare(self) -> None:
        """Build the next capture's backend on a thread, so a step does not wait for it.

        One builder at a time, and none while a spare waits: two would hold two tracers
        where the next step needs one, and once the process may build no more, a step
        could find none free.
        """
        building = self._preparing
        if self._spare is not None or (building is not None and building.is_alive()):
            return

        def build() -> None:
            backend = BACKENDS[self.settings.backend](self.settings)
            try:
                backend.prepare()
            except TracersBusy:  # the step builds or reuses one when it starts, if it can
                return
            except Exception as exc:
                _warn_once(f"the {self.settings.backend} profiler could not be prepared", exc)
                return
            with self._spare_lock:
                kept = self._spare is None
                if kept:
                    self._spare = backend
            if not kept:  # one waits already: this one goes back, idle
                backend.discard()
            if self._closed.is_set():  # shut down meanwhile: reused by a later profiler
                self._discard_spare()

        thread = threading.Thread(
            target=leaving_signals(build), name="asynctrace-profile-prepare", daemon=True
        )
        self._preparing = thread
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to be had: the step builds one as it starts
            self._preparing = None
            _warn_once(f"the {self.settings.backend} profiler could not be prepared", exc)

    def _take_spare(self) -> Backend | None:
        with self._spare_lock:
            spare, self._spare = self._spare, None
        return spare

    def _build_now(self) -> Backend:
        """A backend for a step that found no spare: built here, or, when every tracer
        is held and the builder on its thread holds one, the builder's (waited for).

        Raises:
            TracersBusy: no tracer is free and none is being handed over.
        """
        backend = BACKENDS[self.settings.backend](self.settings)
        try:
            backend.prepare()
        except TracersBusy:
            building = self._preparing
            if building is None or building is threading.current_thread():
                raise
            building.join(_FORK_WAIT_S)  # taking a free tracer: microseconds, not a build
            spare = self._take_spare()
            if spare is None:
                raise
            return spare
        return backend

    def _discard_spare(self) -> None:
        spare = self._take_spare()
        if spare is not None:
            try:
                spare.discard()
            except Exception as exc:
                _warn_once(f"the {self.settings.backend} profiler could not be given back", exc)

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
                path = backend.path = self._claim(step, backend.name)
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
                _warn_once(f"the {self.settings.backend} profiler did not start", exc)
                return None
            self._active = backend
            if request is not None:  # this capture answers the request (and no newer one)
                with self._request.lock:
                    self._request.honoured = request
                    if self._request.pending == request:
                        self._request.pending = None
        return backend

    def _claim(self, step: int | str, backend: str) -> Path:
        """The capture's file, created here so no other capture (another process with the
        same rank and role: a forked child, a second run in ``profiler.output``) takes it.

        Raises:
            OSError: the directory cannot be written, or every name tried is taken.
        """
        prefix = capture_prefix(self.rank, self.role)
        first = self._captures.get(step, 0) + 1
        for count in range(first, first + _MAX_CLAIMS):
            name = f"{step}" if count == 1 else f"{step}_{count}"
            path = self.directory / f"{prefix}-step{name}.{backend}.json"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            try:  # until saved, a capture ``convert`` reports as interrupted, not as bad JSON
                os.write(fd, _PLACEHOLDER)
            finally:
                os.close(fd)
            self._captures[step] = count
            return path
        raise FileExistsError(f"{_MAX_CLAIMS} capture names of step {step} are taken")

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
                _warn_once(f"the {self.settings.backend} profiler did not stop cleanly", exc)
            return
        elsewhere = backend.thread != threading.get_ident()
        if elsewhere and THREAD_HOOK and backend.name == "python" and "thread" not in _warned:
            _warned.add("thread")
            logger.warning(
                "asynctrace: a profiled span was ended on another thread than the one it "
                "started on: that thread keeps viztracer's idle profile hook for the rest "
                "of its life (its calls cost more; told once)"
            )
        if self._finish(backend) and not self._closed.is_set():
            self._prepare_spare()

    def _finish(self, backend: Backend, **extra: Any) -> bool:
        """Stop *backend* and start saving it; ``False`` if it did not stop or no thread
        could be started to save it (not saved, its claimed name given back)."""
        try:
            backend.stop()
        except Exception as exc:  # a capture that did not stop is not saved, half-written
            _warn_once(f"the {self.settings.backend} profiler did not stop cleanly", exc)
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
            _warn_once(
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
            target=leaving_signals(self._poll), name="asynctrace-profile-requests"
        )
        thread.daemon = True
        thread.start()

    def _poll(self) -> None:
        path = self.directory / REQUEST_FILE
        pid = os.getpid()
        request = self._request
        first = True
        while not self._closed.wait(0.0 if first else _POLL_S) and os.getpid() == pid:
            first = False
            try:
                stat = path.stat()
                seen: tuple[int, int] | None = (stat.st_ino, stat.st_mtime_ns)
            except OSError:
                seen = None
            with request.lock:  # not between a capture's answer and its being recorded
                if not request.watched:  # a request older than this process is not for it
                    request.honoured, request.watched = seen, True
                elif seen is not None and seen != request.honoured:
                    request.pending = seen


_PROFILER: list[Profiler | None] = [None]


def capture_prefix(rank: int, role: str | None) -> str:
    """``profile-r{rank}``, or ``profile-{role}-r{rank}`` for roles other than ``worker``:
    the captures are named as the trace files (``traces-{role}-r{rank}.jsonl``).

    Example:
        >>> capture_prefix(0, "driver"), capture_prefix(3, "worker")
        ('profile-driver-r0', 'profile-r3')
    """
    if role in (None, "worker"):
        return f"profile-r{rank}"
    return f"profile-{role}-r{rank}"


def active_profiler() -> Profiler | None:
    """The installed profiler, or ``None``."""
    return _PROFILER[0]


def install_profiler(profiler: Profiler | None) -> Profiler | None:
    """Install *profiler* (``None``: none); returns the one it replaces."""
    previous, _PROFILER[0] = _PROFILER[0], profiler
    return previous


class ProfiledSpan(SyncAndAsync[Any]):
    """A span context manager that profiles its block (when the profiler still agrees)."""

    __slots__ = ("_backend", "_inner", "_iteration", "_profiler", "_span")

    def __init__(self, inner: Any, profiler: Profiler, iteration: object) -> None:
        self._inner = inner
        self._profiler = profiler
        self._iteration = iteration
        self._backend: Backend | None = None
        self._span: Any = None

    def __enter__(self) -> Any:
        span = self._span = self._inner.__enter__()
        if span.is_recording():
            backend = self._backend = self._profiler.start(self._iteration, span)
            if backend is not None:
                span.set_attribute(PROFILE_FILE, backend.path.name)
        elif "unsampled" not in _warned and self._scheduled():
            _warned.add("unsampled")
            logger.warning(
                "asynctrace: step %r is scheduled in profiler.steps, but its span is not "
                "recorded (its trace is not sampled, see sample_rate, or this rank's spans "
                "are not exported): it is not profiled, nor are other such steps (told once)",
                self._iteration,
            )
        return span

    def _scheduled(self) -> bool:
        try:
            return self._iteration in self._profiler._steps
        except TypeError:
            return False

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        backend = self._backend
        if backend is not None:
            self._backend = None
            try:
                self._profiler.stop(backend)
            except Exception as exc_stop:  # never the step's: its span ends all the same
                _warn_once(
                    f"the {self._profiler.settings.backend} profiler did not stop", exc_stop
                )
        self._inner.__exit__(exc_type, exc, tb)


_warned: set[str] = set()


def _warn_once(
    message: str, exc: BaseException, consequence: str = "the step runs unprofiled"
) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning("asynctrace: %s; %s", message, consequence, exc_info=exc)
