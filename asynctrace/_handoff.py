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

The thread that ends spans notices: the queue is whole batches behind, and
either half full or its worker has taken no work for half the export delay
(the durability bound: what a SIGKILL may lose). Short of that the worker is
left alone: a burst that it writes after the loop has gone idle costs the
loop nothing. From then until the worker has emptied its queue, that thread
sleeps briefly whenever the queue is whole batches behind, at most once a
millisecond: the sleep leaves the lock free for longer than a woken thread
needs to take it. The worker writes a batch or two each time (until its
``write`` releases the lock again). The loop pays the worker's time, which
it would pay anyway with a worker that runs, and keeps its spans.

A worker that waits for something other than the lock (a slow or stalled
exporter, a full disk) takes no work however often it is given the lock, and
the sleeps would only slow the loop: after ``TRIES`` sleeps in a row with no
work taken, none is given until the worker takes work again. Where the
worker's CPU clock can be read (Linux; the worker calls :meth:`Handoff.attach`
on its own thread), a sleep during which the worker ran counts as help
however long it goes without taking work: a worker busy with one large batch
(an export that gives the lock up several times, a writer's chunks) is
starved for the lock, not blocked, and keeps getting it. A round of
``TRIES`` sleeps it never ran in says it waits on its exporter: the next
round waits for 1, 2, 4, ... 64 batches taken, since on a machine with more
runnable threads than cores a sleep can cost the loop a scheduler slice. If
the worker takes none (or no more), the round opens all the same once 16,
32, ... 1024 ms have passed and its CPU clock has moved since its last
batch: an export that waited on its
collector (the reply of an OTLP request) has woken and needs the lock again
to finish, and without a sleep would get it only when the loop goes idle; an
exporter still blocked uses no CPU and gets no sleep. A sleep that comes back
late (``COSTLY_S``) with no worker of the process having run in it (their
CPU clocks, read together) ends its round at once: a thread of the program
took the lock, and a busy one keeps it for a whole switch interval, which
the loop would pay at every further sleep. A late sleep in which the worker
did run helped it, but cost the loop a switch interval: it counts towards
the ``TRIES`` of its round instead of starting the count afresh, so a worker
that keeps the lock for its own Python work (an exporter busy formatting a
large batch) ends its round after ``TRIES`` of them.

Whatever the worker does, the sleeps and what they cost (their wall time,
the late return included) stay within a budget: ``BUDGET_SHARE`` of the
wall time, 20 %, of which up to ``BUDGET_S`` (200 ms, a second's worth) may
be spent at once. The budget is each queue's (each worker's). An exporter
slower than the program ends spans (one that spends its CPU in Python)
then costs the loop at most that share in sleeps, and the queue drops what
it cannot hold, as OpenTelemetry's batch processor would.
"""

from __future__ import annotations

import threading
import time
from typing import Final

__all__ = ["BUDGET_S", "BUDGET_SHARE", "COSTLY_S", "HANDOFF_S", "TRIES", "Handoff"]

HANDOFF_S: Final = 0.0002
"""How long the ending thread sleeps: a woken thread takes the lock well within it."""

TRIES: Final = 4
"""Sleeps given in a row to a worker that takes no work before it is left alone."""

COSTLY_S: Final = 0.001
"""A sleep back later than this ends its round if no worker ran in it; if its worker ran,
it counts towards the round's ``TRIES``."""

BUDGET_SHARE: Final = 0.2
"""The share of the wall time one queue's sleeps may take, their late returns included."""

BUDGET_S: Final = 0.2
"""The sleeps' time that may be spent at once (what ``BUDGET_SHARE`` gives in a second)."""

_MAX_BACKOFF: Final = 64  # batches sat out after fruitless rounds, at most

_EVERY_S: Final = 0.001

_REPROBE_S: Final = 0.016  # a fruitless round's pause when no work is taken (x backoff)

_NEVER: Final = float("inf")


def _own_cpu_clock() -> int | None:
    """The calling thread's CPU-time clock, if the platform lets other threads read it."""
    try:
        return time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError):  # not on this platform
        return None


def _cpu(clock: int | None) -> float | None:
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except OSError:  # the thread is gone
        return None


_CLOCKS: dict[int, int] = {}  # every attached worker's CPU clock, by its thread's ident


def _workers_cpu() -> float:
    """The CPU time of every worker attached in this process, together."""
    total = 0.0
    for ident, clock in tuple(_CLOCKS.items()):
        used = _cpu(clock)
        if used is None:
            if _CLOCKS.get(ident) == clock:  # not a new worker's under a reused ident
                _CLOCKS.pop(ident, None)
        else:
            total += used
    return total


class Handoff:
    """Sleeps that give the interpreter lock to a starved worker.

    Example:
        >>> worker = threading.Thread(target=lambda: None)
        >>> Handoff(0.5).offer(worker)  # a worker that is not running gets nothing
        False
    """

    __slots__ = (
        "_after",
        "_backoff",
        "_behind",
        "_clock",
        "_credit",
        "_given",
        "_idle",
        "_ran",
        "_refilled",
        "_reprobe",
        "_skip",
        "_starved",
        "_tries",
        "starved_s",
    )

    def __init__(self, starved_s: float) -> None:
        self.starved_s = starved_s  # behind and no work taken for this long: starved
        self._after = 0.0
        self._ran = 0.0  # when the worker last took work
        self._behind = 0.0  # when the queue was first seen behind since then
        self._starved = False  # until the worker empties its queue
        self._given = 0.0  # the worker's last ``ran()`` when sleeps were last counted
        self._tries = 0  # sleeps given since the worker last took work or ran in one
        self._clock: int | None = None  # the worker's CPU clock (attach)
        self._skip = 0  # times the worker is seen taking work before the next round
        self._backoff = 1  # the next _skip after a round that did not help (doubles)
        self._reprobe = _NEVER  # when a fruitless round ends: the next without work taken
        self._idle = 0.0  # the worker's CPU clock then: used since, it woke from its wait
        self._credit = BUDGET_S  # the sleeps' time left (negative: a late sleep's debt)
        self._refilled = 0.0  # when the credit was last topped up

    def attach(self) -> None:
        """The worker calls this first, on its own thread: its CPU clock shows
        whether a sleep let it run (a restarted worker calls it again)."""
        self._clock = _own_cpu_clock()
        self._tries = self._skip = 0  # a new thread: nothing known of it yet
        self._idle = 0.0
        if self._clock is not None:
            _CLOCKS[threading.get_ident()] = self._clock

    def ran(self) -> None:
        """The worker calls this when it takes work (it holds the lock then)."""
        self._ran = time.monotonic()

    @property
    def starved(self) -> bool:
        """The worker was found starved and has not emptied its queue since."""
        return self._starved

    def caught_up(self) -> None:
        """The worker calls this when its queue is empty."""
        self._starved = False

    def offer(self, worker: threading.Thread, urgent: bool = False) -> bool:
        """The queue is whole batches behind: sleep briefly if *worker* is starved.

        It is starved when it took no work in the ``starved_s`` since the queue
        was first seen behind, or when the caller says the backlog is *urgent*
        (half the queue), and stays so until it calls
        :meth:`caught_up`. At most one sleep a millisecond; none on the
        worker's own thread or for a worker that is not alive, and none after
        ``TRIES`` in a row with no work taken (nor, where its CPU clock is
        known, any CPU time used), until it takes some (or, where the clock is
        known, it has used CPU again after a pause that doubles per such
        round). The sleeps take at most ``BUDGET_SHARE`` of the wall time
        (``BUDGET_S`` at once). Returns whether the lock was given.
        """
        now = time.monotonic()
        if now < self._after:
            return False
        self._after = now + _EVERY_S
        if not worker.is_alive() or worker.ident == threading.get_ident():
            return False
        if not self._starved:
            if not urgent:
                behind = self._behind
                if behind <= self._ran:  # behind since now (the worker took work before)
                    self._behind = now
                    return False
                if now - behind < self.starved_s:
                    return False
            self._starved = True
        if self._ran != self._given:  # it took work since: the sleeps may help again
            self._given = self._ran
            if self._skip:  # ... but the last round did not: sit out some of its batches
                self._skip -= 1
                # The round's pause still holds, counted from the CPU it has used by now:
                # one that takes no more work but wakes later (an export's reply came) needs
                # the lock again, and may not get it from a busy loop to take its next batch.
                used = _cpu(self._clock)
                self._idle = used if used is not None else _NEVER
                return False
            self._reprobe = _NEVER  # taking work, it is counted in batches again
            self._tries = 0
        elif self._tries >= TRIES:  # it waits for something else (a slow exporter)
            if now < self._reprobe:
                return False
            used = _cpu(self._clock)
            if used is None or used <= self._idle:  # still waiting: it has not woken since
                return False
            self._tries = 0  # ... or, woken, for the lock again (an export's reply came)
            self._skip = 0
        credit = self._budget(now)
        if credit <= 0.0:  # the share of the loop's time for sleeps is spent
            return False
        self._tries += 1
        clock = self._clock
        before = _cpu(clock)
        workers = _workers_cpu() if before is not None else 0.0
        time.sleep(HANDOFF_S)
        spent = time.monotonic() - now
        self._credit = credit - spent
        late = spent > COSTLY_S
        if before is not None:
            after = _cpu(clock)
            ran = after is not None and after > before
            if ran and not late:  # it ran: it needs the lock
                self._tries = self._skip = 0
                self._backoff = 1
            elif self._tries >= TRIES or (late and not ran and _workers_cpu() <= workers):
                # A round in which it never ran: it waits on its exporter (a slow
                # collector), and a sleep only costs the loop, which on a machine with
                # more runnable threads than cores may not get its core back for a
                # scheduler slice (7 ms seen). A sleep that came back late with no
                # worker having run in it ends the round at once: a thread of the
                # program took the lock (a busy one keeps it a whole switch interval,
                # 5 ms) or another process the core. The next round waits for 1, 2,
                # 4 ... 64 batches taken, or, if it takes none, 16, 32 ... 1024 ms
                # and its CPU clock moving (woken from its wait within one export, it
                # needs the lock again); one sleep it runs in resets that. A late sleep it
                # ran in counts as one of the round's TRIES: it kept the lock for its own
                # Python work, a switch interval the loop paid.
                self._tries = TRIES
                self._skip = self._backoff
                self._reprobe = time.monotonic() + _REPROBE_S * self._backoff
                self._idle = after if after is not None else _NEVER
                self._backoff = min(2 * self._backoff, _MAX_BACKOFF)
        return True

    def _budget(self, now: float) -> float:
        """The sleeps' time left at *now*: topped up at ``BUDGET_SHARE`` of the time
        passed, up to ``BUDGET_S``."""
        credit = min(BUDGET_S, self._credit + (now - self._refilled) * BUDGET_SHARE)
        self._refilled = now
        self._credit = credit
        return credit
