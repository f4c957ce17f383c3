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
round: a loop may run in one thread, then in another."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from types import CodeType
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation import _SPAN_KEY

from ._backend import asyncio_loop, in_trio_task
from ._errors import report_internal_error
from ._fast import FastTracer
from ._groups import LOOP_STALL
from ._own_threads import leaving_signals
from ._redact import redact_text
from ._scopes import SCOPES
from ._semconv import GROUP, TRUNCATED
from ._span_context import _CONTEXT_VAR
from ._stall_frames import Frame, current_frames, stack, task_context
from ._state import GATE

__all__ = ["DEFAULT_THRESHOLD_MS", "LOOP_STALL", "SPAN_NAME", "notice_loop", "rearm", "stop_all"]

logger = logging.getLogger("asynctrace")

SPAN_NAME: Final = "asynctrace.loop_stall"
DEFAULT_THRESHOLD_MS: Final = 50.0
MAX_STACKS: Final = 5  # folded stacks written on the span, most seen first
_MAX_KEYS: Final = 256  # distinct stacks counted per stall
# The longest a watchdog sleeps before it looks whether its loop still runs: one whose loop
# closed ends within it (an asyncio.run() per request leaves no thread behind for long).
_POLL_S: Final = 0.1
# The longest stop_all() waits, per monitor, for the lock its heartbeat and watchdog share
# to take a stall still in progress (held for a few bytecodes at a time, unless the loop
# thread was interrupted inside them: by the signal whose handler shuts down, say).
_TAKE_S: Final = 0.05

_get_running_loop = asyncio._get_running_loop
_current_task = asyncio.current_task
_enter_task = getattr(asyncio.tasks, "_enter_task", None)
_leave_task = getattr(asyncio.tasks, "_leave_task", None)
_monotonic = time.monotonic
_get_ident = threading.get_ident
_UNSET: Final = object()
_OTEL_VAR = _CONTEXT_VAR  # None when another runtime context holds OpenTelemetry's

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


def _waiting_codes(loop: asyncio.AbstractEventLoop) -> tuple[CodeType, CodeType] | None:
    """The code of *loop*'s selector ``select`` and of the iteration that calls it.

    ``None`` for a loop that does not wait in a Python selector (uvloop's
    waits in C): it is posted a heartbeat every half threshold, idle or not.
    """
    select = getattr(type(getattr(loop, "_selector", None)), "select", None)
    run_once = getattr(type(loop), "_run_once", None)
    codes = (getattr(select, "__code__", None), getattr(run_once, "__code__", None))
    if isinstance(codes[0], CodeType) and isinstance(codes[1], CodeType):
        return codes[0], codes[1]
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
        monitor.stopped = True
        monitor.lock = threading.Lock()
    _monitors.clear()
    _stopped_loops.clear()
    _last = _UNSET


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------
# One loop's monitor.


def _loop_ref(loop: asyncio.AbstractEventLoop) -> Callable[[], asyncio.AbstractEventLoop | None]:
    """A weak reference to *loop*, or (a loop type without them) a strong one."""
    try:
        return weakref.ref(loop)
    except TypeError:  # not weak-referenceable: watched for as long as it is not closed
        return lambda: loop


class _Stall:
    """What the watchdog saw while the heartbeat posted at ``posted`` had not run.

    The blocked task is the first one a sample found running; ``otel`` and
    ``scopes`` are read from its context at every sample, so they are those
    current in it when the loop was last seen blocked.
    """

    __slots__ = (
        "context",
        "counts",
        "otel",
        "posted",
        "samples",
        "scopes",
        "since",
        "task",
        "tracer",
    )

    def __init__(self, posted: float, since: float, task: object | None, samples: int = 0) -> None:
        self.posted = posted
        self.since = since  # the last time the loop was seen running
        # The tracer when the stall was first seen: one still in progress at shutdown is
        # recorded with it, after the gate has let go of it.
        self.tracer: Any = GATE.tracer
        self.task: object | None = None
        self.context: contextvars.Context | None = None
        self.otel: Any = None
        self.scopes: Any = None
        self.samples = samples  # the samples taken before this one made the stall
        self.counts: Counter[tuple[Frame, ...]] = Counter()
        if task is not None:
            self.task = task
            self.context = task_context(task)

    def add(self, stack: tuple[Frame, ...] | None, task: object | None) -> None:
        """Count a sample: *stack* ``None`` for one outside the program (only counted)."""
        self.samples += 1
        if stack is None:
            return
        if stack in self.counts or len(self.counts) < _MAX_KEYS:
            self.counts[stack] += 1
        if task is None:
            return
        if self.task is None:
            self.task = task
            self.context = task_context(task)
        context = self.context
        if task is self.task and context is not None:
            if _OTEL_VAR is not None:
                self.otel = context.get(_OTEL_VAR)
            self.scopes = context.get(SCOPES)


def _parent_context(stall: _Stall, start: int) -> Any:
    """The OpenTelemetry context the stall's span starts in (*start*: the stall's, in ns).

    That of the span current in the blocked task at the last sample: the span
    the block ended in, ended since or not. When the block began before that
    span started (it crossed into it with no await between), the span current
    in the task when the loop ran again, if it is still open and began before
    the block did: it holds the whole stall.
    """
    last = stall.otel
    context = stall.context
    if last is None or context is None or _OTEL_VAR is None:
        return last
    span_start = getattr(last.get(_SPAN_KEY), "start_time", None)
    if not isinstance(span_start, int) or start >= span_start:
        return last  # the block began inside it
    now = context.get(_OTEL_VAR)
    outer = now.get(_SPAN_KEY) if now is not None else None
    outer_start = getattr(outer, "start_time", None)
    still_open = getattr(outer, "end_time", 0) is None
    if isinstance(outer_start, int) and outer_start <= start and still_open:
        return now
    return last


class _Monitor:
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

    def adopt(self, loop: asyncio.AbstractEventLoop, threshold_s: float) -> None:
        """Watch *loop* (running in this thread) instead of the closed one (under ``_lock``).

        The watchdog sees it at its next look (within ``_POLL_S``), as it would
        have seen that its loop closed.
        """
        del _monitors[self.loop_id]
        with self.lock:
            self._arm(loop, threshold_s, None)
        _monitors[self.loop_id] = self

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
        self.stall: _Stall | None = None
        self.unclaimed = 0  # samples outside the program while the heartbeat posted at
        self.unclaimed_posted = 0.0  # this time is late, before any made its stall
        self.seen = self.since = self.posted = _monotonic()  # the loop runs: it is arming us
        self.waiting = _waiting_codes(loop)

    def stop(self) -> None:
        """Stop watching; a stall in progress is recorded as it stands (truncated)."""
        self.stopped = True
        self._wake_up()
        try:
            self._record_open()
        except Exception as exc:  # never raise into the shutdown
            report_internal_error(("loop_stall", "stop"), exc)
        global _last
        if _last is self.loop:
            _last = _UNSET

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
            _say_once("open", "a loop stall in progress at shutdown could not be recorded")
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

    def _record(self, stall: _Stall, now: float, truncated: bool = False) -> None:
        # Cut short by a shutdown: the gate has let go of the tracer, still running.
        tracer = stall.tracer if truncated else GATE.tracer
        loop = self.loop  # running this heartbeat (or blocked): alive
        if tracer is None or not stall.samples or loop is None:
            return
        wall, mono = time.time_ns(), time.monotonic_ns()
        # The loop ran the heartbeat at `since` and not the one posted at `posted`: the
        # block began in between; the middle is within half that interval of it.
        began = (stall.since + stall.posted) / 2
        if now - began <= self.threshold and not truncated:
            return  # not longer than the threshold (one cut short by a shutdown: seen so far)
        start = wall - (mono - int(began * 1e9))
        end = wall - (mono - int(now * 1e9))
        context = _parent_context(stall, start)
        parent = context.get(_SPAN_KEY) if context is not None else None
        parent_start = getattr(parent, "start_time", None)
        parent_end = getattr(parent, "end_time", None)
        if isinstance(parent_start, int) and start < parent_start:
            start = parent_start  # nests under its parent on the task's track
        if isinstance(parent_end, int) and end > parent_end:
            end = max(parent_end, start)
        attributes = self._attributes(stall)
        if truncated:
            attributes[TRUNCATED] = True
        if context is None:
            context = otel_context.Context()
        task = stall.task
        entered = False
        on_loop = _get_ident() == self.loop_thread
        if (
            task is not None
            and on_loop
            and _enter_task is not None
            and _current_task(loop) is None
        ):
            try:  # start the span as the blocked task: its track, for every processor
                _enter_task(loop, task)
                entered = True
            except Exception:
                entered = False
        try:
            if tracer.__class__ is FastTracer:
                span = tracer.start_owned(SPAN_NAME, context, attributes, None, start_time=start)
                owned: Any = span
                if task is not None and not on_loop and getattr(owned, "_owner", None) is not None:
                    owned._owner = task  # the blocked task's track, not this thread's
            else:
                span = tracer.start_span(
                    SPAN_NAME, context, SpanKind.INTERNAL, attributes, start_time=start
                )
            span.end(end)
        finally:
            if entered and _leave_task is not None:
                _leave_task(loop, task)

    def _attributes(self, stall: _Stall) -> dict[str, Any]:
        attributes: dict[str, Any] = {GROUP: LOOP_STALL}
        if stall.scopes is not None:
            attributes.update(stall.scopes.stamps)  # rl.iteration, rl.task_id, rl.session_id
        ranked = stall.counts.most_common(MAX_STACKS)
        top = ranked[0][0] if ranked else ()
        if top:
            path, line, function = top[0]
            attributes["code.function.name"] = function
            attributes["code.file.path"] = path
            attributes["code.line.number"] = line
            attributes["asynctrace.stall.frames"] = tuple(f"{p}:{n} {f}" for p, n, f in top)
        attributes["asynctrace.stall.stacks"] = tuple(
            ";".join(f"{f} ({p}:{n})" for p, n, f in reversed(stack)) + f" {count}"
            for stack, count in ranked
            if stack
        )
        attributes["asynctrace.stall.samples"] = stall.samples
        attributes["asynctrace.stall.threshold_ms"] = round(self.threshold * 1000, 3)
        task = stall.task
        if task is not None:
            get_name = getattr(task, "get_name", None)
            if callable(get_name):
                attributes["asynctrace.stall.task"] = redact_text(str(get_name()))
            get_coro = getattr(task, "get_coro", None)
            coro = get_coro() if callable(get_coro) else None
            name = getattr(coro, "__qualname__", None)
            if isinstance(name, str):
                attributes["asynctrace.stall.coroutine"] = name
        return attributes

    # -- the watchdog thread -------------------------------------------------

    def _watch(self) -> None:
        try:
            while not self.stopped:
                # The loop is held only while it runs: one the program dropped without
                # closing it is collected (it is garbage in a cycle), and the watchdog ends.
                loop = self._loop()
                if loop is None or LOOP_STALL not in GATE.enabled or loop.is_closed():
                    with _lock:  # a loop started since in its thread may adopt this monitor
                        if self._loop() is loop and not self.stopped:
                            self.stopped = True  # no longer to adopt: ends
                    if self.stopped:
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

    def _in_selector(self) -> bool:
        """Whether the loop thread waits in its selector, called from the loop's iteration.

        Such a loop is not blocked. Not posting it a heartbeat then spares an
        idle loop a wake-up every half threshold; a loop busy or blocked
        anywhere else still gets one: a callback's own ``select``, and another
        loop's iteration run from one of this loop's callbacks (a nested
        ``run_until_complete``), whose stack holds two iterations. Frames
        that cannot be read raise: the watchdog, which samples them too, stops.
        """
        codes = self.waiting
        if codes is None:
            return False
        frame = current_frames().get(self.loop_thread)
        try:
            if frame is None or frame.f_code is not codes[0]:
                return False
            frame = frame.f_back
            if frame is None or frame.f_code is not codes[1]:
                return False
            frame = frame.f_back
            while frame is not None:  # the only iteration on the stack: not a nested loop
                if frame.f_code is codes[1]:
                    return False
                frame = frame.f_back
            return True
        finally:
            del frame

    def _wake_up(self) -> None:
        """End the watchdog's current or next sleep (once is enough: it then stops)."""
        with contextlib.suppress(RuntimeError):  # released already: nothing to wake
            self.wake.release()

    def _sample(self, loop: asyncio.AbstractEventLoop, posted: float) -> None:
        frame = current_frames().get(self.loop_thread)
        if frame is None:
            return
        task = _current_task(loop)
        frames, in_program = stack(frame)
        del frame
        program = task is not None or in_program
        with self.lock:
            if self.seen >= posted:
                return  # the heartbeat ran meanwhile
            stall = self.stall
            if stall is None or stall.posted != posted:
                if self.unclaimed_posted != posted:
                    self.unclaimed_posted, self.unclaimed = posted, 0
                if not program:  # the loop's own code (in its selector, say): no stall yet
                    self.unclaimed += 1
                    return
                stall = self.stall = _Stall(posted, self.since, task, self.unclaimed)
            stall.add(frames if program else None, task)

    @staticmethod
    def _let_go(loop: asyncio.AbstractEventLoop) -> None:
        """The loop is not running: the fast path no longer holds it, so a loop the program
        drops unclosed is collected even when it was the last one watched. Its next umbrella
        span looks it up again (a racing notice only costs that lookup)."""
        global _last
        if _last is loop:
            _last = _UNSET

    def _forget(self, posted: float) -> None:
        """Drop the stall being sampled for the heartbeat *posted* (the loop stopped)."""
        with self.lock:
            if self.stall is not None and self.stall.posted == posted:
                self.stall = None

    def _retire(self) -> None:
        """Stop and leave the registry (from either thread)."""
        self.stopped = True
        self._wake_up()
        global _last
        with _lock:
            if _monitors.get(self.loop_id) is self and not self.failed:
                del _monitors[self.loop_id]
        if _last is self.loop:
            _last = _UNSET
