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
next to the trace as ``profile-r{rank}-step{N}.{backend}.json`` (``step{N}_2``,
``_3``, ... for the step's later captures in this process), with the
clock offset between the backend's timeline and the spans' (measured around
marker events, see :mod:`asynctrace._profiler_backends`) under
``otherData.asynctrace``, which ``asynctrace convert`` uses to merge it.
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
from ._errors import ConfigurationError
from ._profiler_backends import BACKENDS, Backend, check_backend, finish_capture

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
_KEYS = ("steps", "backend", "output", "record_shapes", "with_stack")


@dataclass(frozen=True)
class ProfilerSettings:
    """The validated ``profiler`` block.

    Attributes:
        steps: the scheduled steps (``rl.iteration`` values).
        backend: ``"python"`` (viztracer) or ``"torch"`` (``torch.profiler``).
        output: the directory of the captures; ``None``: the trace's directory.
        record_shapes: torch only: record operator input shapes.
        with_stack: torch only: record Python stacks of operators.

    Example:
        >>> ProfilerSettings.parse("profiler", {"steps": [49, 99]}).steps
        frozenset({49, 99})
    """

    steps: frozenset[int] = frozenset()
    backend: str = "python"
    output: str | None = None
    record_shapes: bool = False
    with_stack: bool = False

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
        unknown = sorted(str(k) for k in value if k not in _KEYS)
        if unknown:
            raise ConfigurationError(
                f"{key}.{unknown[0]}: unknown key; accepted: {', '.join(_KEYS)}"
            )
        steps = value.get("steps", ())
        if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
            raise ConfigurationError(
                f"{key}.steps: {steps!r} is not accepted; accepted: a list of integers >= 0"
            )
        checked: set[int] = set()
        for step in steps:
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                raise ConfigurationError(
                    f"{key}.steps: {step!r} is not accepted; accepted: a list of integers >= 0"
                )
            checked.add(step)
        backend = value.get("backend", "python")
        if backend not in BACKENDS:
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
        for name in ("record_shapes", "with_stack"):
            flag = value.get(name, False)
            if not isinstance(flag, bool):
                raise ConfigurationError(
                    f"{key}.{name}: {flag!r} is not accepted; accepted: true or false"
                )
            flags[name] = flag
        return cls(frozenset(checked), backend, None if output is None else str(output), **flags)


@dataclass
class _Request:
    """The request file: (inode, mtime) of the pending request and of the last one honoured."""

    pending: tuple[int, int] | None = None
    honoured: tuple[int, int] | None = None


@dataclass
class Profiler:
    """The installed schedule plus the capture in progress (at most one per process)."""

    settings: ProfilerSettings
    directory: Path
    rank: int
    _request: _Request = field(default_factory=_Request)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _active: Backend | None = None
    _saving: list[threading.Thread] = field(default_factory=list)
    _watcher_pid: int = 0
    _closed: threading.Event = field(default_factory=threading.Event)
    _spare: Backend | None = None  # built ahead of the next capture
    _steps: frozenset[int] = frozenset()
    _captures: dict[object, int] = field(default_factory=dict)  # step -> captures started

    def __post_init__(self) -> None:
        self._steps = self.settings.steps  # read on the hot path: one attribute, no chain
        self._prepare_spare()
        self._watch()
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def restart_in_child() -> None:  # the watcher thread is not inherited
                profiler = ref()
                if profiler is not None and not profiler._closed.is_set():
                    profiler._watch()

            os.register_at_fork(after_in_child=restart_in_child)

    def _prepare_spare(self) -> None:
        """Build the next capture's backend on a thread, so a step does not wait for it."""

        def build() -> None:
            backend = BACKENDS[self.settings.backend](self.settings)
            try:
                backend.prepare()
            except Exception as exc:
                _warn_once(f"the {self.settings.backend} profiler could not be prepared", exc)
                return
            self._spare = backend

        thread = threading.Thread(target=build, name="asynctrace-profile-prepare", daemon=True)
        thread.start()

    def start(self, iteration: object) -> Backend | None:
        """Start a capture; ``None`` when one is running or the backend fails to start."""
        with self._lock:
            if self._active is not None:
                return None
            request = self._request.pending
            backend, self._spare = self._spare, None
            try:
                if backend is None:  # the one built ahead is not ready (or failed): build now
                    backend = BACKENDS[self.settings.backend](self.settings)
                    backend.prepare()
                backend.start()
            except Exception as exc:  # never decides whether the step runs
                _warn_once(f"the {self.settings.backend} profiler did not start", exc)
                return None
            self._active = backend
            if request is not None:  # this capture answers the request
                self._request.honoured, self._request.pending = request, None
            step: int | str = "na"
            if iteration.__class__ is not bool and isinstance(iteration, numbers.Integral):
                step = int(iteration)  # numpy's integers too
            # A step profiled again (a second span of it that asks) gets a file of its
            # own: the same name would be overwritten, or torn by two saves at once.
            count = self._captures[step] = self._captures.get(step, 0) + 1
        name = f"{step}" if count == 1 else f"{step}_{count}"
        backend.path = self.directory / f"profile-r{self.rank}-step{name}.{backend.name}.json"
        return backend

    def stop(self, backend: Backend, span: Any) -> None:
        """Stop *backend*'s capture and save it in the background."""
        try:
            backend.stop()
        except Exception as exc:  # a capture that did not stop is not saved, half-written
            _warn_once(f"the {self.settings.backend} profiler did not stop cleanly", exc)
            return
        finally:
            with self._lock:
                self._active = None
        context = span.get_span_context()
        about = {
            "trace_id": f"{context.trace_id:032x}",
            "span_id": f"{context.span_id:016x}",
            "pid": os.getpid(),
            "rank": self.rank,
        }
        self._prepare_spare()
        saver = threading.Thread(
            target=finish_capture, args=(backend, about), name="asynctrace-profile-save"
        )
        saver.daemon = True
        self._saving = [t for t in self._saving if t.is_alive()]
        self._saving.append(saver)
        saver.start()

    def close(self, timeout_s: float) -> bool:
        """Stop watching; wait up to *timeout_s* for captures being saved."""
        self._closed.set()
        deadline = time.monotonic() + timeout_s
        for saver in self._saving:
            saver.join(max(0.0, deadline - time.monotonic()))
        return not any(saver.is_alive() for saver in self._saving)

    def _watch(self) -> None:
        self._watcher_pid = os.getpid()
        self._lock = threading.Lock()  # a forked child must not inherit a held lock
        self._active = None
        self._saving = []
        thread = threading.Thread(target=self._poll, name="asynctrace-profile-requests")
        thread.daemon = True
        thread.start()

    def _poll(self) -> None:
        path = self.directory / REQUEST_FILE
        pid = os.getpid()
        first = True
        while not self._closed.wait(0.0 if first else _POLL_S) and os.getpid() == pid:
            try:
                stat = path.stat()
                seen: tuple[int, int] | None = (stat.st_ino, stat.st_mtime_ns)
            except OSError:
                seen = None
            if first:  # a request older than this process is not for it
                self._request.honoured = seen
                first = False
            elif seen is not None and seen != self._request.honoured:
                self._request.pending = seen


_PROFILER: list[Profiler | None] = [None]


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
            backend = self._backend = self._profiler.start(self._iteration)
            if backend is not None:
                span.set_attribute(PROFILE_FILE, backend.path.name)
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        backend = self._backend
        if backend is not None:
            self._backend = None
            self._profiler.stop(backend, self._span)
        self._inner.__exit__(exc_type, exc, tb)


_warned: set[str] = set()


def _warn_once(message: str, exc: BaseException) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning("asynctrace: %s; the step runs unprofiled", message, exc_info=exc)
