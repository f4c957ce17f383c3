"""How an export queue's producers, its worker thread and its readers signal each other.

:class:`Wakeup` wakes the worker, :class:`Done` tells a flush its marker
(:class:`_Marker`) was honoured, :func:`take` moves a batch out of the queue,
and :class:`Moves` lets a reader on another thread read the counters between
two of the worker's moves. None takes a lock a signal handler could find held:
a flush may be asked from a handler that interrupted any of them.
"""

from __future__ import annotations

import queue as _queue_module
import threading
from collections import deque
from itertools import repeat
from typing import Any

__all__ = ["Done", "Moves", "Wakeup", "take"]


class Wakeup:
    """Wakes the worker thread: ``threading.Event``'s methods, and no lock taken to set it.

    A Python signal handler runs on the main thread between two bytecodes of
    whatever it interrupted; an ``Event`` interrupted inside ``set()`` holds
    its lock, and a handler that sets it again (a flush on a preemption
    warning) would wait for that lock forever. :meth:`set` puts a token in a
    ``queue.SimpleQueue`` instead, whose ``put`` may be called re-entrantly.
    The worker may wake with no span queued (a token left by a set that raced
    a clear): it finds nothing and waits again.

    Example:
        >>> wake = Wakeup()
        >>> wake.set(); wake.wait(0.0)
        True
        >>> wake.clear(); wake.wait(0.0)
        False
    """

    __slots__ = ("_flag", "_tokens")

    def __init__(self) -> None:
        self._flag = False
        self._tokens: _queue_module.SimpleQueue[None] = _queue_module.SimpleQueue()

    def is_set(self) -> bool:
        """Whether it was set since the last :meth:`clear`."""
        return self._flag

    def set(self) -> None:
        """Wake the waiting thread (from any thread or signal handler)."""
        if not self._flag:
            self._flag = True
            self._tokens.put(None)

    def clear(self) -> None:
        """Forget the wake-ups so far (the waiting thread, before it looks for work)."""
        self._flag = False
        tokens = self._tokens
        while not tokens.empty():
            try:
                tokens.get_nowait()
            except _queue_module.Empty:  # pragma: no cover - only the worker takes tokens
                break

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until set, at most *timeout* seconds; whether it was set."""
        if self._flag:
            return True
        try:
            self._tokens.get(timeout=timeout)
        except _queue_module.Empty:
            return self._flag
        return True


class Done:
    """A flush marker's completion: ``wait`` and ``set`` as on a ``threading.Event``.

    Each :meth:`wait` waits on a lock of its own, made for that call: a flush
    called from a signal handler, while the code it interrupted waits for the
    same marker (or is inside ``set``), shares no lock with it.

    Example:
        >>> done = Done()
        >>> done.wait(0.0)
        False
        >>> done.set(); done.wait(0.0), done.is_set()
        (True, True)
    """

    __slots__ = ("_flag", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._waiters: list[threading.Lock] = []

    def is_set(self) -> bool:
        """Whether the marker was honoured."""
        return self._flag

    def set(self) -> None:
        """The marker was honoured: release every waiter (the worker calls this once)."""
        self._flag = True  # before the waiters are read: one added after sees it
        waiters = self._waiters
        while waiters:
            try:
                waiters.pop().release()
            except (IndexError, RuntimeError):  # pragma: no cover - taken by a timed-out waiter
                pass

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the marker is honoured, at most *timeout* seconds; whether it was."""
        if self._flag:
            return True
        done = threading.Lock()
        done.acquire()
        waiters = self._waiters
        waiters.append(done)
        if self.is_set():  # set before this waiter was added: it may never be released
            return True
        if done.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return True
        try:
            waiters.remove(done)  # timed out: against a stuck exporter, waiters do not pile up
        except ValueError:  # released just now
            pass
        return self._flag


class _Marker:
    """A flush request travelling through the queue behind the spans before it."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = Done()


_popleft = deque.popleft


def take(queue: deque[Any], count: int) -> list[Any]:
    """The first *count* items of *queue* (it holds that many), taken in one C loop."""
    return list(map(_popleft, repeat(queue, count)))


class Moves:
    """A count that is odd while the worker moves spans from one counter to another.

    The worker thread wraps each move (queue to in flight, in flight to
    exported) in ``with moves:``; a reader on another thread reads the
    counters between two equal even values of :attr:`value`, so a batch is
    never missed or counted twice (a seqlock: the worker never waits for a
    reader). Moves do not nest.
    """

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def __enter__(self) -> None:
        self.value += 1

    def __exit__(self, *exc: object) -> None:
        self.value += 1
