"""One stall's samples: what the loop-stall watchdog sees while a heartbeat is late.

The watchdog (:mod:`asynctrace._stall_watchdog`) samples the blocked loop
thread every period; the first sample that finds the program's code running
makes a :class:`Stall`, and every later one is added to it. The heartbeat
hands it to :mod:`asynctrace._stall_span` when it runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections import Counter
from typing import Any, Final, Protocol

from ._scopes import SCOPES
from ._span_context import _CONTEXT_VAR
from ._stall_frames import Frame, current_frames, stack, task_context
from ._state import GATE

__all__ = ["Stall", "forget_stall", "take_sample"]

_MAX_KEYS: Final = 256  # distinct stacks counted per stall
_OTEL_VAR = _CONTEXT_VAR  # None when another runtime context holds OpenTelemetry's
_current_task = asyncio.current_task


class Stall:
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


class _Sampled(Protocol):
    """A loop's monitor, as its samples read and write it (under its ``lock``)."""

    stall: Stall | None
    unclaimed: int  # samples outside the program while the heartbeat posted at
    unclaimed_posted: float  # this time is late, before any made its stall

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def loop_thread(self) -> int: ...

    @property
    def seen(self) -> float: ...

    @property
    def since(self) -> float: ...


def take_sample(monitor: _Sampled, loop: asyncio.AbstractEventLoop, posted: float) -> None:
    """Sample *loop*'s blocked thread, late with the heartbeat *posted*, into its stall.

    The monitor's ``_sample`` (this function itself, no call in between).
    """
    frame = current_frames().get(monitor.loop_thread)
    if frame is None:
        return
    task = _current_task(loop)
    frames, in_program = stack(frame)
    del frame
    program = task is not None or in_program
    with monitor.lock:
        if monitor.seen >= posted:
            return  # the heartbeat ran meanwhile
        stall = monitor.stall
        if stall is None or stall.posted != posted:
            if monitor.unclaimed_posted != posted:
                monitor.unclaimed_posted, monitor.unclaimed = posted, 0
            if not program:  # the loop's own code (in its selector, say): no stall yet
                monitor.unclaimed += 1
                return
            stall = monitor.stall = Stall(posted, monitor.since, task, monitor.unclaimed)
        stall.add(frames if program else None, task)


def forget_stall(monitor: _Sampled, posted: float) -> None:
    """Drop the stall being sampled for the heartbeat *posted* (the loop stopped).

    The monitor's ``_forget``.
    """
    with monitor.lock:
        if monitor.stall is not None and monitor.stall.posted == posted:
            monitor.stall = None
