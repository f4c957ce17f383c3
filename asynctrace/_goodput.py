"""Live goodput callbacks: the registered ones and the thread that calls them.

The runtime's rollup (:mod:`asynctrace.export._goodput_sink`, on an export
thread) turns each finished step into a :class:`~asynctrace.StepGoodput`.
Callbacks registered with :func:`on_step_goodput` receive it on one background
thread of their own (``asynctrace-goodput-callbacks``), fed by a bounded queue:
a callback that raises is logged once and keeps being called; one that blocks
or is slow delays only the callbacks after it, never the program, and
records arriving while the queue is full are dropped and counted.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ._forksafe import reinit_at_fork
from ._own_threads import leaving_signals
from ._step_goodput import StepGoodput

__all__ = [
    "Dispatcher",
    "callbacks",
    "on_step_goodput",
    "release_for_shutdown",
    "remove_step_goodput",
]

logger = logging.getLogger("asynctrace")

F = TypeVar("F", bound=Callable[..., Any])


# -- callbacks -----------------------------------------------------------------

_lock = threading.Lock()
reinit_at_fork(_lock)  # held by another thread at fork(): new in the child
_callbacks: tuple[Callable[[StepGoodput], Any], ...] = ()


def on_step_goodput(fn: F) -> F:
    """Call *fn* with each finished step's :class:`StepGoodput`, on a background thread.

    Registered for the process (before or after :func:`asynctrace.configure`;
    the live rollup runs when the ``goodput`` configuration key is on, or when
    a callback is registered by the time ``configure`` runs). Callbacks run
    one after another, in registration order, on the thread
    ``asynctrace-goodput-callbacks``: a callback that raises is logged once and
    keeps being called; a slow one delays the later records (queued, up to
    ``goodput.callback_queue``, then dropped and counted), never the program.
    Registering the same function twice calls it once. Returns *fn*, so it
    works as a decorator.

    Example:
        >>> seen = []
        >>> _ = on_step_goodput(seen.append)
        >>> remove_step_goodput(seen.append)
        True
    """
    global _callbacks
    if not callable(fn):
        raise TypeError(f"on_step_goodput: {fn!r} is not callable")
    with _lock:
        if fn not in _callbacks:
            _callbacks = (*_callbacks, fn)
    return fn


def remove_step_goodput(fn: Callable[[StepGoodput], Any]) -> bool:
    """Stop calling *fn*; ``False`` if it was not registered.

    Example:
        >>> remove_step_goodput(print)
        False
    """
    global _callbacks
    with _lock:
        if fn not in _callbacks:
            return False
        _callbacks = tuple(cb for cb in _callbacks if cb != fn)
        return True


def callbacks() -> tuple[Callable[[StepGoodput], Any], ...]:
    """The registered callbacks (a snapshot)."""
    return _callbacks


_STOP: Final = object()
_here = threading.local()  # .dispatcher: the Dispatcher whose thread this is


def release_for_shutdown() -> bool:
    """Called by a shutdown: if it runs inside a goodput callback, that callback's
    dispatcher does not wait for it at close (it waits for the shutdown, which would
    wait for it). Returns whether the current thread is a callbacks thread.

    Example:
        >>> release_for_shutdown()
        False
    """
    dispatcher: Dispatcher | None = getattr(_here, "dispatcher", None)
    if dispatcher is None:
        return False
    dispatcher.released = True
    return True


class Dispatcher:
    """A bounded queue of records and the thread that calls the callbacks with them."""

    def __init__(self, max_queue: int) -> None:
        self._max = max_queue
        self._queue: deque[Any] = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        reinit_at_fork(self._start_lock, self._wake)
        self._closed = False
        self.delivered = 0
        self.dropped = 0
        self.errors = 0
        self._warned: set[int] = set()
        self._warned_full = False
        self.released = False  # a callback waits for this close: do not wait for it
        # The record the callbacks are handling. Once a close has given up waiting, it
        # counts as dropped (counts()) until its callbacks return, then as delivered:
        # the lock makes each reading count it once.
        self._current: Any = None
        self._gave_up = False
        self._count_lock = threading.Lock()
        reinit_at_fork(self._count_lock)

    def put(self, record: StepGoodput) -> None:
        """Queue *record* for the callbacks (export thread; never waits)."""
        if not _callbacks or self._closed:
            return
        if len(self._queue) >= self._max:
            self.dropped += 1
            if not self._warned_full:
                self._warned_full = True
                logger.warning(
                    "asynctrace: goodput callbacks are %d records behind (goodput."
                    "callback_queue); dropping records, the count is in Telemetry.goodput",
                    self._max,
                )
            return
        self._queue.append(record)
        if self._thread is None:
            self._start()
        self._wake.set()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=leaving_signals(self._run),
                    name="asynctrace-goodput-callbacks",
                    daemon=True,
                )
                self._thread.start()

    def _run(self) -> None:
        _here.dispatcher = self
        queue = self._queue
        while True:
            self._wake.wait()
            self._wake.clear()
            while queue:
                record = queue.popleft()
                if record is _STOP:
                    return
                self._current = record
                for fn in _callbacks:
                    self._call(fn, record)
                with self._count_lock:
                    self.delivered += 1
                    self._current = None

    def _call(self, fn: Callable[[StepGoodput], Any], record: StepGoodput) -> None:
        try:
            fn(record)
        except BaseException as exc:  # a callback's SystemExit does not end the thread either
            self.errors += 1
            if id(fn) not in self._warned:
                self._warned.add(id(fn))
                logger.warning(
                    "asynctrace: the goodput callback %r raised; it keeps being called "
                    "(further errors are counted, not logged)",
                    fn,
                    exc_info=exc,
                )

    def counts(self) -> tuple[int, int]:
        """``(delivered, dropped)``, read together; once a close has given up waiting, the
        record a callback is still handling counts as dropped (as delivered when it returns).

        Example:
            >>> Dispatcher(4).counts()
            (0, 0)
        """
        with self._count_lock:
            late = 1 if self._gave_up and self._current is not None else 0
            return self.delivered, self.dropped + late

    def close(self, timeout_s: float) -> bool:
        """Deliver what is queued, waiting at most *timeout_s*; ``False`` if it took longer."""
        self._closed = True
        thread = self._thread
        if thread is None:
            return True
        queue = self._queue
        queue.append(_STOP)
        self._wake.set()
        if self.released or thread is threading.current_thread():
            return True  # a callback waits for this shutdown: it delivers the rest after
        thread.join(max(0.0, timeout_s))
        if thread.is_alive():
            # The records still queued are taken out (pop is atomic: each record is
            # either delivered by the thread or counted here, never both); the stop
            # marker goes back so the thread ends after its current callback. The
            # record in that callback is counted here too, unless it has just finished.
            left = 0
            while True:
                try:
                    item = queue.pop()
                except IndexError:
                    break
                if item is not _STOP:
                    left += 1
            queue.append(_STOP)
            self._wake.set()
            with self._count_lock:
                self._gave_up = True
                self.dropped += left
                if self._current is not None:
                    left += 1  # for the warning: counts() counts it while it runs
            logger.warning(
                "asynctrace: a goodput callback was still running %.1f s into shutdown; "
                "%d record%s not delivered, queued or in that callback (counted in "
                "Telemetry.goodput.dropped)",
                timeout_s,
                left,
                " was" if left == 1 else "s were",
            )
            return False
        return True


# The names a record pickled by an earlier release refers to (pickle finds them by
# module and name): kept here, so such a pickle still loads.
from ._goodput_stats import GoodputStats  # noqa: E402, F401
