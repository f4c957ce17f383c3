"""Event-loop stalls: a heartbeat on the loop, a watchdog thread, one span per stall.

The watchdog thread posts a heartbeat to the loop (``call_soon_threadsafe``)
every half threshold, unless the loop thread is waiting in its selector then
(an idle loop is not woken for nothing). A heartbeat still waiting when the
watchdog wakes means the loop is blocked: the watchdog samples the loop thread's stack
(``sys._current_frames()``) every ``period``, the task that is running and
the span current in it. When the heartbeat runs, it knows how long the loop
did not run: past the threshold, it records one span from when the block
began (between the last heartbeat that ran and the first that did not) to
now, under the innermost span known to hold it all (else the span it ended
in, clipped to it), folded from every sample, as the blocked task (so the
span lands on that task's track), unbucketed. The loop's thread is read each
round: a loop may run in one thread, then in another.

This module keeps the registry: one monitor per loop, started by the loop's
first umbrella span, stopped, re-armed and forgotten across a fork. The
monitor is :mod:`asynctrace._stall_watchdog`'s, the span
:mod:`asynctrace._stall_span`'s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Final

from ._backend import asyncio_loop, in_trio_task
from ._builtin_groups import LOOP_STALL
from ._errors import report_internal_error
from ._stall_span import SPAN_NAME
from ._stall_watchdog import Watchdog

__all__ = ["DEFAULT_THRESHOLD_MS", "LOOP_STALL", "SPAN_NAME", "notice_loop", "rearm", "stop_all"]

logger = logging.getLogger("asynctrace")

DEFAULT_THRESHOLD_MS: Final = 50.0

_get_running_loop = asyncio._get_running_loop
_monotonic = time.monotonic
_UNSET: Final = object()

_lock = threading.Lock()
_monitors: dict[int, _Monitor] = {}  # id(loop) -> its monitor
_last: object = _UNSET  # the loop notice_loop saw last (its fast path)
_threshold_s = DEFAULT_THRESHOLD_MS / 1000
_said: set[object] = set()
# The loops (weakly) and loop threads stop_all() last stopped watching, for rearm().
_stopped_loops: list[tuple[Callable[[], asyncio.AbstractEventLoop | None], int]] = []


def set_threshold(milliseconds: float) -> None:
    """The threshold of monitors started from now on (validated by the configuration)."""
    global _threshold_s
    _threshold_s = milliseconds / 1000


def notice_loop() -> None:
    """Watch the event loop running in this thread, if it is not watched yet.

    Called when an umbrella span starts while ``loop_stall`` is enabled; one
    identity test when the loop is the one seen last.
    """
    loop = _get_running_loop()
    if loop is not _last:
        try:
            _notice(asyncio_loop())  # None for a trio task, a guest of this loop included
        except Exception as exc:  # never raise into the program
            report_internal_error(("loop_stall", "notice"), exc)


def _notice(loop: asyncio.AbstractEventLoop | None) -> None:
    global _last
    if loop is None:
        if in_trio_task():
            _say_once(
                "trio", "trio is not watched for loop stalls; the loop_stall group stays off"
            )
        _last = None
        return
    with _lock:
        monitor = _monitors.get(id(loop))
        if monitor is None or monitor.loop is not loop or (monitor.stopped and not monitor.failed):
            if not callable(getattr(loop, "call_later", None)) or not hasattr(
                sys, "_current_frames"
            ):
                _say_once(type(loop), f"a {type(loop).__name__} loop cannot be watched for stalls")
                _last = loop
                return
            heir = _closed_loops_monitor()
            if heir is not None:  # its watchdog thread watches this loop from now on
                heir.adopt(loop, _threshold_s)
            else:
                _monitors[id(loop)] = _Monitor(loop, _threshold_s)
        else:  # the loop may have moved to this thread since it was last seen
            monitor.loop_thread = threading.get_ident()
        _last = loop


def _closed_loops_monitor() -> _Monitor | None:
    """A monitor (under ``_lock``) of a loop closed or collected in this thread, still
    watching: a program calling ``asyncio.run()`` per request keeps one watchdog thread."""
    me = threading.get_ident()
    for monitor in _monitors.values():
        if monitor.loop_thread == me and not monitor.stopped and not monitor.failed:
            old = monitor.loop
            if old is None or old.is_closed():
                return monitor
    return None


def _say_once(key: object, message: str) -> None:
    if key not in _said:
        _said.add(key)
        logger.warning("asynctrace: %s", message)


def record_open(tracer: object) -> None:
    """Record, truncated, every stall in progress sampled under *tracer*: the telemetry
    that tracer records for ends (a ``capture_spans`` block), the loops go on."""
    with _lock:
        monitors = list(_monitors.values())
    for monitor in monitors:
        try:
            monitor._record_open(tracer)
        except Exception as exc:  # never raise into the caller's exit
            report_internal_error(("loop_stall", "record_open"), exc)


def stop_all(timeout_s: float = 0.1) -> None:
    """Stop every monitor; their watchdog threads are gone when this returns (or *timeout_s*).

    The loops they watched are remembered (weakly) for :func:`rearm`.
    """
    global _last, _stopped_loops
    with _lock:
        monitors = list(_monitors.values())
        _monitors.clear()
        _last = _UNSET
        _stopped_loops = [
            (m._loop, m.loop_thread) for m in monitors if not m.stopped and not m.failed
        ]
    deadline = _monotonic() + timeout_s
    for monitor in monitors:
        monitor.stop()
    for monitor in monitors:
        if monitor.thread is not threading.current_thread():
            monitor.thread.join(max(0.0, deadline - _monotonic()))


def rearm() -> None:
    """Watch again the loops :func:`stop_all` stopped watching that still run.

    A configuration that turns ``loop_stall`` on calls it: a loop that was
    watched under the one before (a step still open in it, say) is watched
    from now on, not only once its next umbrella span starts.
    """
    global _stopped_loops
    with _lock:
        stopped, _stopped_loops = _stopped_loops, []
        for loop_ref, thread in stopped:
            loop = loop_ref()
            if loop is None or not loop.is_running() or id(loop) in _monitors:
                continue
            try:  # from the configuring thread, maybe not the loop's
                _monitors[id(loop)] = _Monitor(loop, _threshold_s, thread)
            except RuntimeError as exc:  # no thread to spare: its next umbrella span re-arms
                _say_once("rearm", f"a loop is not watched for stalls until its next step ({exc})")


def _after_fork_in_child() -> None:
    """The watchdogs did not survive the fork: forget them; the next umbrella span re-arms."""
    global _lock, _last
    _lock = threading.Lock()
    for monitor in _monitors.values():
        monitor.after_fork_in_child()
    _monitors.clear()
    _stopped_loops.clear()
    _last = _UNSET


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Monitor(Watchdog):
    """A loop's watchdog, in the registry: it leaves it, and the fast path, as it ends."""

    def adopt(self, loop: asyncio.AbstractEventLoop, threshold_s: float) -> None:
        """Watch *loop* (running in this thread) instead of the closed one (under ``_lock``).

        The watchdog sees it at its next look (within its poll), as it would
        have seen that its loop closed.
        """
        del _monitors[self.loop_id]
        with self.lock:
            self._arm(loop, threshold_s, None)
        _monitors[self.loop_id] = self

    def _let_go(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """The loop is not running (or no longer watched): the fast path no longer holds it,
        so a loop the program drops unclosed is collected even when it was the last one
        watched. Its next umbrella span looks it up again (a racing notice only costs that
        lookup)."""
        global _last
        if _last is loop:
            _last = _UNSET

    def _leave(self) -> None:
        with _lock:
            if _monitors.get(self.loop_id) is self and not self.failed:
                del _monitors[self.loop_id]

    def _end_unless_adopted(self, loop: asyncio.AbstractEventLoop | None) -> bool:
        with _lock:  # a loop started since in its thread may adopt this monitor
            if self._loop() is loop and not self.stopped:
                self.stopped = True  # no longer to adopt: ends
        return self.stopped

    def _warn_once(self, key: object, message: str) -> None:
        _say_once(key, message)
