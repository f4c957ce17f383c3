"""One loop's monitor: the heartbeat posted to the loop and the watchdog thread waiting on it.

The registry of monitors (:mod:`asynctrace._stalls`) subclasses
:class:`Watchdog` with its own part: what a monitor does to the registry as
it stops, lets go of its loop or is adopted by a new one.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Final

from ._builtin_groups import LOOP_STALL
from ._errors import report_internal_error
from ._own_threads import leaving_signals
from ._stall_samples import Stall, forget_stall, take_sample
from ._stall_selector import in_selector, waiting_codes
from ._stall_span import record_stall
from ._state import GATE

__all__ = ["Watchdog"]

logger = logging.getLogger("asynctrace")

# The longest a watchdog sleeps before it looks whether its loop still runs: one whose loop
# closed ends within it (an asyncio.run() per request leaves no thread behind for long).
_POLL_S: Final = 0.1
# The longest stop_all() waits, per monitor, for the lock its heartbeat and watchdog share
# to take a stall still in progress (held for a few bytecodes at a time, unless the loop
# thread was interrupted inside them: by the signal whose handler shuts down, say).
_TAKE_S: Final = 0.05

_monotonic = time.monotonic
_get_ident = threading.get_ident


def _loop_ref(loop: asyncio.AbstractEventLoop) -> Callable[[], asyncio.AbstractEventLoop | None]:
    """A weak reference to *loop*, or (a loop type without them) a strong one."""
    try:
        return weakref.ref(loop)
    except TypeError:  # not weak-referenceable: watched for as long as it is not closed
        return lambda: loop


class Watchdog(abc.ABC):
    """The watchdog thread of one loop and the heartbeat it posts to the loop.

    The watchdog posts the heartbeat (``call_soon_threadsafe``) every half
    threshold, unless the loop thread waits in its selector then (it is not
    blocked, and would only be woken), and sleeps; a heartbeat that has not
    run when it wakes means the loop is blocked: it samples the loop thread
    every ``period`` until it runs. No timer stays on the loop between
    heartbeats, so the loop's own iterations cost nothing more.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, threshold_s: float, loop_thread: int | None = None
    ) -> None:
        self.lock = threading.Lock()
        self.stopped = False
        self.failed = False  # the watchdog failed: this loop stays unwatched
        self._arm(loop, threshold_s, loop_thread)
        self.context = contextvars.Context()  # the heartbeat runs with no span and no scope
        # Held until the monitor stops: the watchdog sleeps in a timed acquire of it,
        # which costs a wake-up less CPU than Event.wait (no Condition, no waiter
        # lock made per wait; 176-186 against 208-212 us a wake-up on the 2-core VM).
        self.wake = threading.Lock()
        self.wake.acquire()
        self.thread = threading.Thread(
            target=leaving_signals(self._watch), name="asynctrace-loop-watchdog", daemon=True
        )
        self.thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The watched loop (``None`` once collected)."""
        return self._loop()

    def _arm(
        self, loop: asyncio.AbstractEventLoop, threshold_s: float, loop_thread: int | None
    ) -> None:
        """Watch *loop*, running in *loop_thread* (default: this one), from now on."""
        self._loop = _loop_ref(loop)
        self.loop_id = id(loop)
        self.loop_thread = threading.get_ident() if loop_thread is None else loop_thread
        self.threshold = threshold_s
        self.half = threshold_s / 2
        self.period = min(max(threshold_s / 5, 0.001), 0.01)  # samples while blocked
        self.stall: Stall | None = None
        self.unclaimed = 0  # samples outside the program while the heartbeat posted at
        self.unclaimed_posted = 0.0  # this time is late, before any made its stall
        self.seen = self.since = self.posted = _monotonic()  # the loop runs: it is arming us
        self.waiting = waiting_codes(loop)

    def stop(self) -> None:
        """Stop watching; a stall in progress is recorded as it stands (truncated)."""
        self.stopped = True
        self._wake_up()
        try:
            self._record_open()
        except Exception as exc:  # never raise into the shutdown
            report_internal_error(("loop_stall", "stop"), exc)
        self._let_go(self.loop)

    def after_fork_in_child(self) -> None:
        """In a forked child: the watchdog thread is gone, and the lock it may have held."""
        self.stopped = True
        self.lock = threading.Lock()

    # -- the registry's part -------------------------------------------------

    @abc.abstractmethod
    def _let_go(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """The registry's fast path no longer holds *loop* (not running, or unwatched)."""

    @abc.abstractmethod
    def _leave(self) -> None:
        """Leave the registry, unless another loop's monitor took this one's place."""

    @abc.abstractmethod
    def _end_unless_adopted(self, loop: asyncio.AbstractEventLoop | None) -> bool:
        """*loop* is gone, closed or unwatched: stop unless a loop started since in its
        thread adopted this monitor (under the registry's lock); True: stopped."""

    @abc.abstractmethod
    def _warn_once(self, key: object, message: str) -> None:
        """Log *message* once per *key* (the registry's keys)."""

    # -- the loop thread -----------------------------------------------------

    def _beat(self, posted: float) -> None:
        try:
            now = _monotonic()
            if self.stopped or LOOP_STALL not in GATE.enabled:
                # Before the lock: in a forked child, the parent's watchdog may have held it.
                self._retire()
                return
            self.loop_thread = _get_ident()  # the loop may run in another thread than before
            # Under the lock the watchdog samples under: a sample either made its stall
            # before this (taken here) or sees the loop ran (and makes none).
            with self.lock:
                self.seen = now
                stall, self.stall = self.stall, None
            if stall is not None and stall.posted == posted:  # the watchdog saw the loop blocked
                self._record(stall, now)
        except Exception as exc:  # never raise into the loop
            report_internal_error(("loop_stall", "heartbeat"), exc)

    def _record_open(self, tracer: object = None) -> None:
        """Record the stall still in progress, if the watchdog sampled one, as ending now,
        tagged truncated (from the thread stopping the monitor: a shutdown's); with
        *tracer*, only one sampled under that tracer (a capture that ends)."""
        if not self.lock.acquire(True, _TAKE_S):
            self._warn_once("open", "a loop stall in progress at shutdown could not be recorded")
            return
        try:
            stall = self.stall
            if stall is not None and (tracer is None or stall.tracer is tracer):
                self.stall = None
            else:
                stall = None
        finally:
            self.lock.release()
        if stall is not None:
            self._record(stall, _monotonic(), truncated=True)

    _record = record_stall  # a stall as one span (see _stall_span)

    # -- the watchdog thread -------------------------------------------------

    def _watch(self) -> None:
        try:
            while not self.stopped:
                # The loop is held only while it runs: one the program dropped without
                # closing it is collected (it is garbage in a cycle), and the watchdog ends.
                loop = self._loop()
                if loop is None or LOOP_STALL not in GATE.enabled or loop.is_closed():
                    if self._end_unless_adopted(loop):
                        break
                    continue  # adopted: watch the new loop
                done = self._round(loop) if loop.is_running() else None
                if done is None:
                    # A loop that is not running is not blocked: a block of its next run
                    # began no earlier than now, not when a heartbeat last ran in this one.
                    self.seen = _monotonic()
                    self._let_go(loop)
                del loop
                if done is None:  # not running: look again in a while
                    done = self.wake.acquire(True, min(self.half, _POLL_S))
                if done:
                    break
        except Exception as exc:  # never raise: log once and stop watching this loop
            self.failed = True
            try:
                report_internal_error(("loop_stall", "watchdog"), exc)
            except Exception:
                logger.warning("asynctrace: the loop-stall watchdog stopped", exc_info=exc)
        finally:
            self._retire()

    def _round(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Post a heartbeat to the running *loop* and wait for it, sampling while it is
        late; True: stop."""
        wake = self.wake.acquire
        thread = getattr(loop, "_thread_id", None)  # asyncio's: the thread running it now
        if thread.__class__ is int:
            self.loop_thread = thread
        self.since = self.seen
        posted = self.posted = _monotonic()
        if self._in_selector():  # it would run a heartbeat at once: no need to post one
            self.seen = posted
            return self._nap(loop)
        try:
            loop.call_soon_threadsafe(self._beat, posted, context=self.context)
        except RuntimeError:  # the loop closed since is_closed() was asked
            # Not an end yet when it did: _watch decides, under the lock, whether a loop
            # started since in this thread took the monitor over.
            return not loop.is_closed()
        if self._nap(loop):
            return True
        while self.seen < posted and not self.stopped:  # blocked past half the threshold
            if not loop.is_running():  # it stopped, the heartbeat still queued: what
                self._forget(posted)  # its thread runs now is not the loop's
                self.seen = _monotonic()  # and it is not blocked (it may run again at once)
                return False
            self._sample(loop, posted)
            if wake(True, self.period):
                return True
        return False

    def _nap(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Sleep half a threshold, or less if *loop* stops running meanwhile; True: stop.

        Half a threshold longer than ``_POLL_S`` is slept in pieces of it, the
        loop looked at between them; a shorter one (the default) in one piece.
        """
        half = self.half
        if half <= _POLL_S:
            return self.wake.acquire(True, half)
        until = _monotonic() + half
        while True:
            left = until - _monotonic()
            if left <= 0:
                return False
            if self.wake.acquire(True, min(left, _POLL_S)):
                return True
            if not loop.is_running():
                return False

    _in_selector = in_selector  # the loop thread waits in its selector (see _stall_selector)
    _sample = take_sample  # one sample of the blocked loop thread (see _stall_samples)
    _forget = forget_stall

    def _wake_up(self) -> None:
        """End the watchdog's current or next sleep (once is enough: it then stops)."""
        with contextlib.suppress(RuntimeError):  # released already: nothing to wake
            self.wake.release()

    def _retire(self) -> None:
        """Stop and leave the registry (from either thread)."""
        self.stopped = True
        self._wake_up()
        self._leave()
        self._let_go(self.loop)
