"""Giving the interpreter lock to an export thread that a busy event loop starves.

A thread that waits for the GIL asks its holder to drop it only when a whole
switch interval (5 ms) passes with no release at all. Every release wakes
the waiter and restarts that clock, and the releasing thread usually takes
the lock back before the woken waiter gets to run. An event loop that keeps
its core busy and yields through ``select(0)`` (``await asyncio.sleep(0)``,
a ready socket) more often than every 5 ms therefore starves every other
thread: measured, a loop yielding each millisecond while it ended 5,000
spans/s had the export thread run once in 3 s, and the queue dropped a third
of the spans.

The thread that ends spans notices: the queue is whole batches behind while
its worker waits to run. It then sleeps briefly, which releases the lock for
longer than a woken thread needs to take it, at most once a millisecond.
The worker writes what it has (a batch or two, until its ``write`` releases
the lock again), and the loop goes on. The loop pays the worker's time,
which it would pay anyway with a worker that runs, and keeps its spans.
"""

from __future__ import annotations

import threading
import time
from typing import Final

__all__ = ["HANDOFF_S", "Handoff"]

HANDOFF_S: Final = 0.0002
"""How long the ending thread sleeps: a woken thread takes the lock well within it."""

_EVERY_S: Final = 0.001


class Handoff:
    """At most one sleep a millisecond for a worker that is behind.

    Example:
        >>> worker = threading.Thread(target=lambda: None)
        >>> Handoff().offer(worker)  # a worker that is not running gets nothing
        False
    """

    __slots__ = ("_after", "given")

    def __init__(self) -> None:
        self._after = 0.0
        self.given = 0  # sleeps so far

    def offer(self, worker: threading.Thread) -> bool:
        """Sleep briefly so that *worker* can run, unless that was done within 1 ms.

        Nothing happens on the worker's own thread, or when it is not alive.
        Returns whether the lock was given.
        """
        now = time.monotonic()
        if now < self._after:
            return False
        self._after = now + _EVERY_S
        if not worker.is_alive() or worker.ident == threading.get_ident():
            return False
        self.given += 1
        time.sleep(HANDOFF_S)
        return True
