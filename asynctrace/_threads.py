"""``to_thread``: run a callable in a worker thread, in the caller's context.

Each asyncio loop gets a lane of its own: a thread limit apart from anyio's
shared default one, and the calls whose callers left before they ended. On
trio, whose cancellation waits for the call, only a limiter per run.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from ._backend import asyncio_loop
from ._bind_context import bind_context

__all__ = ["THREAD_LIMIT", "to_thread"]

R = TypeVar("R")

# The states of a _Call.
_QUEUED, _RUNNING, _LEFT, _OVER = range(4)

# to_thread's own thread limit, per event loop (as anyio's default limit, 40): calls
# left running by cancelled callers count against it, and against nobody else's.
THREAD_LIMIT = 40

logger = logging.getLogger("asynctrace")
_warned = False  # the limit was reached with tokens held by calls whose callers left


class _Lane:
    """``to_thread``'s limiter on one asyncio loop, and the calls its callers left.

    Its own, not anyio's default limiter: that one is shared by every anyio
    user in the process (Starlette's ``run_in_threadpool``, FastAPI's sync
    endpoints), and calls that hang after their callers left would hold its
    tokens from all of them. anyio is handed a limiter that never waits.
    """

    __slots__ = ("left", "limiter", "loop", "unlimited")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)  # weakly: the lane lives as long as its loop
        self.limiter = anyio.CapacityLimiter(THREAD_LIMIT)
        self.unlimited = anyio.CapacityLimiter(math.inf)
        self.left = 0  # tokens held by running calls whose callers have left (loop thread only)

    def release_left(self, call: _Call) -> None:
        """In the loop: a call its caller left has ended; its token goes back."""
        self.left -= 1
        self.limiter.release_on_behalf_of(call)

    def warn_held(self) -> None:
        """The limit is reached: say once if calls whose callers left hold tokens."""
        global _warned
        if self.left and not _warned:
            _warned = True
            logger.warning(
                "asynctrace: to_thread's limit of %d threads is reached and %d of them run "
                "calls whose callers were cancelled (a timeout, say); further to_thread calls "
                "wait until those calls end",
                self.limiter.total_tokens,
                self.left,
            )


class _Call:
    """A ``to_thread`` call on asyncio: dropped if its caller leaves before it begins,
    and holding its thread-limiter token until it really ends.

    anyio makes a cancelled caller wait for the call only when the
    cancellation is anyio's (a cancel scope). An asyncio cancellation
    (``task.cancel()``, ``asyncio.timeout``) returns at once, as
    ``asyncio.to_thread`` does: waiting there would hang a caller whose
    ``finally`` is what stops the call, and outlast the timeout it was given.
    A call still queued then is dropped; one running ends on its own, and
    gives its token back itself when it does (anyio's own token is given back
    as the caller leaves, and each call after it would take a new thread).
    """

    __slots__ = ("_fn", "_lane", "_lock", "_state")

    def __init__(self, fn: Callable[..., Any], lane: _Lane) -> None:
        self._fn = fn
        self._lane = lane
        self._lock = threading.Lock()
        self._state = _QUEUED

    def __call__(self, *args: Any) -> Any:
        """Run in the worker thread: the call, unless its caller has left already."""
        with self._lock:
            if self._state != _QUEUED:  # its result has nowhere to go: not run at all
                return None
            self._state = _RUNNING
        try:
            return self._fn(*args)
        finally:
            with self._lock:
                left, self._state = self._state == _LEFT, _OVER
            if left:  # the caller is gone: the token goes back from here
                lane = self._lane
                loop = lane.loop()
                try:
                    if loop is not None:
                        loop.call_soon_threadsafe(lane.release_left, self)
                except RuntimeError:  # the loop is closed, and its limiter with it
                    pass

    def leave(self) -> None:
        """The caller leaves: give the token back now, or (a call running) when it ends."""
        with self._lock:
            running = self._state == _RUNNING
            self._state = _LEFT if running else _OVER
        if running:
            self._lane.left += 1
        else:
            self._lane.limiter.release_on_behalf_of(self)


# A weak dict, not an anyio RunVar: its look-up costs about 1.5 us a call (3.11).
_LANES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lane] = weakref.WeakKeyDictionary()
# On trio, whose cancellation waits for the call: only the limiter, per run.
_TRIO_LIMITER: RunVar[anyio.CapacityLimiter] = RunVar("asynctrace_to_thread_limiter")


def _lane(loop: asyncio.AbstractEventLoop) -> _Lane:
    lane = _LANES.get(loop)
    if lane is None:
        lane = _LANES[loop] = _Lane(loop)
    return lane


def _trio_limiter() -> anyio.CapacityLimiter:
    try:
        return _TRIO_LIMITER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(THREAD_LIMIT)
        _TRIO_LIMITER.set(limiter)
        return limiter


async def to_thread(fn: Callable[..., R], *args: Any) -> R:
    """Run ``fn(*args)`` in a worker thread, in the caller's context.

    Works on asyncio, uvloop and trio (through anyio), in anyio's worker
    threads, at most 40 calls at once per event loop (a limit of its own,
    apart from anyio's default one). Under an anyio or trio cancel scope a
    cancelled caller waits for a call that runs, gets its outcome, and is
    cancelled at its next checkpoint. An asyncio cancellation
    (``task.cancel()``, ``asyncio.timeout``) is raised at once, as
    ``asyncio.to_thread`` raises it, a running call ends on its own (and
    counts against the limit until it does), and a call that has not begun
    yet does not run.

    Example:
        >>> import anyio
        >>> anyio.run(to_thread, sum, [1, 2])
        3
    """
    loop = asyncio_loop()
    if loop is None:  # trio: its cancellation waits for the call already
        return await anyio.to_thread.run_sync(bind_context(fn), *args, limiter=_trio_limiter())
    lane = _LANES.get(loop) or _lane(loop)
    call = _Call(bind_context(fn), lane)
    limiter = lane.limiter
    try:  # anyio's run_sync checkpoints next: no second trip through the loop here
        limiter.acquire_on_behalf_of_nowait(call)
    except anyio.WouldBlock:
        lane.warn_held()
        await limiter.acquire_on_behalf_of(call)
    try:
        result: R = await anyio.to_thread.run_sync(call, *args, limiter=lane.unlimited)
    finally:
        call.leave()
    return result


# The names a process pool's task pickled by an earlier release refers to (pickle finds
# them by module and name): kept here, so such a pickle still loads.
from ._scope_snapshot import ScopeSnapshot as _ScopeSnapshot  # noqa: E402, F401
from ._scope_snapshot import run_in_snapshot as _run_in_snapshot  # noqa: E402, F401
from ._scope_snapshot import run_in_snapshot_kw as _run_in_snapshot_kw  # noqa: E402, F401
