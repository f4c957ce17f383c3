"""Profiling chosen steps: the profiled span, the installed profiler, and their rules.

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
:mod:`asynctrace._capture_finish`) under ``otherData.asynctrace``, which
``asynctrace convert`` uses to merge it.

This module holds the profiled span, the installed profiler's slot and the
profiler's once-per-process warnings; the profiler is
:class:`asynctrace._profiler.Profiler`.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._cm import SyncAndAsync

if TYPE_CHECKING:
    from ._capture_backend import Backend
    from ._profiler import Profiler

__all__ = [
    "PROFILE_FILE",
    "ProfiledSpan",
    "active_profiler",
    "install_profiler",
    "tell_once",
    "warn_once",
]

logger = logging.getLogger("asynctrace")

PROFILE_FILE = "asynctrace.profile.file"

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
                warn_once(f"the {self._profiler.settings.backend} profiler did not stop", exc_stop)
        self._inner.__exit__(exc_type, exc, tb)


_warned: set[str] = set()


def warn_once(
    message: str, exc: BaseException, consequence: str = "the step runs unprofiled"
) -> None:
    """Log *message*, *consequence* and *exc* once per process (per message)."""
    if message not in _warned:
        _warned.add(message)
        logger.warning("asynctrace: %s; %s", message, consequence, exc_info=exc)


def tell_once(key: str, message: str) -> None:
    """Log *message* the first time *key* is told in the process."""
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)
