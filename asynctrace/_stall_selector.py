"""Whether a watched loop's thread waits in its selector: idle, so posted no heartbeat.

Read by the loop-stall watchdog (:mod:`asynctrace._stall_watchdog`) before
each heartbeat it would post: an idle loop is not woken for nothing.
"""

from __future__ import annotations

import asyncio
from types import CodeType
from typing import Protocol

from ._stall_frames import current_frames

__all__ = ["in_selector", "waiting_codes"]


def waiting_codes(loop: asyncio.AbstractEventLoop) -> tuple[CodeType, CodeType] | None:
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


class _Waiting(Protocol):
    """A loop's monitor, as read here: its loop's :func:`waiting_codes` and thread."""

    @property
    def waiting(self) -> tuple[CodeType, CodeType] | None: ...

    @property
    def loop_thread(self) -> int: ...


def in_selector(monitor: _Waiting) -> bool:
    """Whether the loop thread waits in its selector, called from the loop's iteration.

    Such a loop is not blocked. Not posting it a heartbeat then spares an
    idle loop a wake-up every half threshold; a loop busy or blocked
    anywhere else still gets one: a callback's own ``select``, and another
    loop's iteration run from one of this loop's callbacks (a nested
    ``run_until_complete``), whose stack holds two iterations. Frames
    that cannot be read raise: the watchdog, which samples them too, stops.
    The monitor's ``_in_selector`` is this function itself (no call in between).
    """
    codes = monitor.waiting
    if codes is None:
        return False
    frame = current_frames().get(monitor.loop_thread)
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
