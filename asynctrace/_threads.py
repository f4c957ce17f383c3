"""Explicit context propagation into threads, executors and process pools.

A raw ``threading.Thread`` starts with an empty context: no active span, no
scope. These helpers carry the caller's context — the active span and every
asynctrace scope — on purpose, one call at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import logging
import math
import threading
import types
import weakref
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator
from typing import Any, ParamSpec, TypeVar, cast

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar
from opentelemetry import baggage
from opentelemetry import context as otel_context

from ._backend import asyncio_loop
from ._carriers import BAGGAGE, current_trace_carrier
from ._carriers import _with_baggage as with_baggage
from ._groups import Bucket
from ._remote_context import remote_trace_context
from ._scopes import BUCKET, ITERATION, PER_PROMPT, SCOPES, SESSION_ID, TASK_ID, ScopeState

__all__ = ["ContextThread", "bind_context", "context_executor", "to_thread"]

P = ParamSpec("P")
R = TypeVar("R")
_T = TypeVar("_T", bound="ContextThread")
_CoroutineType = types.CoroutineType


@types.coroutine
def _stepped(context: contextvars.Context, coro: Coroutine[Any, Any, R]) -> Generator[Any, Any, R]:
    """Await *coro*, running each of its steps inside *context*.

    What the coroutine yields (an asyncio future, a trio trap) goes to the
    task as it is, and what the task sends or throws back goes to the
    coroutine inside *context*: its body sees that context from start to end,
    whichever task awaits it, on asyncio, uvloop and trio alike.
    """
    send = coro.send
    step: Callable[[Any], Any] = send
    arg: Any = None
    while True:
        try:
            yielded = context.run(step, arg)
        except StopIteration as stop:
            return cast("R", stop.value)
        step, arg = send, None
        try:
            arg = yield yielded
        except GeneratorExit:  # the awaiting coroutine is closed: close this one too
            context.run(coro.close)
            raise
        except BaseException as exc:  # a cancellation, say: the coroutine gets it
            step, arg = coro.throw, exc


class _Unstarted:
    """A bound coroutine's body until it starts; closed if it never does.

    A coroutine closed, or cancelled, before it starts runs none of its code,
    so its own ``finally`` cannot close the body. This holder goes with its
    frame and closes the body then, which would otherwise warn that it "was
    never awaited" (the bound coroutine warns itself when it was not).
    """

    __slots__ = ("coro",)

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro: Coroutine[Any, Any, Any] | None = coro

    def __del__(self) -> None:
        coro = self.coro
        if coro is not None:
            self.coro = None
            coro.close()


async def _in_context(context: contextvars.Context, pending: _Unstarted) -> Any:
    coro = cast("Coroutine[Any, Any, Any]", pending.coro)  # taken here only, once
    pending.coro = None
    return await _stepped(context, coro)


def bind_context(fn: Callable[P, R]) -> Callable[P, R]:
    """Capture the caller's context now; run *fn* in it later, in any thread.

    Each call runs in a fresh copy of the captured context, so the bound
    callable may be called concurrently from several threads, and context
    changes made by one call do not leak into the next.

    A call that returns a coroutine (*fn* is an ``async def`` function, say)
    returns one whose body, once awaited, runs from start to end in that
    call's copy of the captured context, not in the awaiting task's, on
    asyncio, uvloop and trio. An async generator's body is not covered: it
    runs in the context that iterates it.

    Example:
        >>> import threading
        >>> from asynctrace import iteration_scope, current_iteration
        >>> with iteration_scope(4):
        ...     job = bind_context(current_iteration)
        >>> out = []
        >>> t = threading.Thread(target=lambda: out.append(job())); t.start(); t.join()
        >>> out
        [4]
    """
    # The context, not its bound ``copy`` method: the call site's method call is
    # specialized by the interpreter, while making the bound method here costs
    # every binding about 80 ns (3.11).
    captured = contextvars.copy_context()

    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        context = captured.copy()
        result = context.run(fn, *args, **kwargs)
        # Checked per call, not per binding: reading fn's code flags at binding costs
        # about 3x this one test (3.11). An async def only makes its coroutine here;
        # its body runs when awaited, so each step is run in the context.
        if result.__class__ is _CoroutineType:
            body: types.CoroutineType[Any, Any, Any] = cast("Any", result)
            stepped: types.CoroutineType[Any, Any, Any] = cast(
                "Any", _in_context(context, _Unstarted(body))
            )
            # Named as the body: a task's repr, a stall span's coroutine name.
            stepped.__name__, stepped.__qualname__ = body.__name__, body.__qualname__
            return cast("R", stepped)
        return result

    return bound


# Inside a ContextThread's captured context: the thread whose run() entered it.
_ENTERED: contextvars.ContextVar[object] = contextvars.ContextVar(
    "asynctrace_context_thread", default=None
)


def _enter(thread: Any, run: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    _ENTERED.set(thread)  # in the fresh copy only
    return run(thread, *args, **kwargs)


def _in_captured_context(run: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a ``run`` method so that it runs in a copy of the thread's captured context.

    The outermost ``run`` enters the context; a ``super().run()`` inside it
    (already in that context, marked by ``_ENTERED``) calls straight through,
    so changes the outer ``run`` made to the context reach the inner one. An
    object with no captured context (not made by ``ContextThread.__new__``)
    runs as it is.
    """

    @functools.wraps(run)
    def run_in_context(self: Any, *args: Any, **kwargs: Any) -> Any:
        captured = getattr(self, "_asynctrace_context", None)
        if captured is None or _ENTERED.get() is self:
            return run(self, *args, **kwargs)
        return captured.copy().run(_enter, self, run, args, kwargs)

    run_in_context._asynctrace_wrapped = True  # type: ignore[attr-defined]
    return run_in_context


class _Entered:
    """A started thread's ``run``, as its class resolves it, entered in the captured context.

    Set on the instance by :meth:`ContextThread.start`, so whatever ``run`` is
    (a plain method, one a class-based decorator made, one set on the
    instance) runs in the context; taken off again when it returns.
    """

    __slots__ = ("resolved", "thread")

    def __init__(self, thread: ContextThread, resolved: Callable[[], Any]) -> None:
        self.thread = thread
        self.resolved = resolved

    def __call__(self) -> Any:
        thread = self.thread
        try:
            if _ENTERED.get() is thread:  # entered already
                return self.resolved()
            context = thread._asynctrace_context.copy()
            return context.run(self._entered)
        finally:
            if thread.__dict__.get("run") is self:
                del thread.__dict__["run"]  # no cycle left through the instance
            self.resolved = _nothing

    def _entered(self) -> Any:
        _ENTERED.set(self.thread)  # in the fresh copy only
        return self.resolved()


def _nothing() -> None:
    return None


class ContextThread(threading.Thread):
    """A ``threading.Thread`` that runs in the context of the code that created it.

    The active span and every scope (iteration, bucket, per-prompt) are
    captured when the thread object is made (in ``__new__``, so a subclass
    whose ``__init__`` calls ``threading.Thread.__init__`` directly is
    covered) and are current inside ``run()``: the one a subclass (or a mixin
    listed before this class) defines, one a class-based decorator wraps, or
    one set on the instance before ``start()``.

    Example:
        >>> from asynctrace import iteration_scope, current_iteration
        >>> out = []
        >>> with iteration_scope(2):
        ...     t = ContextThread(target=lambda: out.append(current_iteration()))
        >>> t.start(); t.join(); out
        [2]
    """

    _asynctrace_context: contextvars.Context

    def __new__(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
        self = super().__new__(cls)
        self._asynctrace_context = contextvars.copy_context()
        return self

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The run() this class resolves to (its own, or a mixin's) gets the context when
        # called directly too, unless it is already wrapped. Only plain functions: any
        # other run is entered by start() (see _Entered).
        run = inspect.getattr_static(cls, "run", None)
        if inspect.isfunction(run) and not getattr(run, "_asynctrace_wrapped", False):
            cls.run = _in_captured_context(run)  # type: ignore[method-assign]

    def start(self) -> None:
        """Start the thread; its ``run()``, whatever it resolves to, runs in the context."""
        own = self.__dict__
        before = own.get("run", _nothing)  # a run set on the instance, if any
        entered = before if isinstance(before, _Entered) else _Entered(self, self.run)
        own["run"] = entered
        try:
            super().start()
        except BaseException:  # not started (twice, or no thread to be had): as it was
            if own.get("run") is entered and entered is not before:
                if before is _nothing:
                    del own["run"]
                else:
                    own["run"] = before
            raise

    @_in_captured_context
    def run(self) -> None:
        """Run the thread's target inside the captured context."""
        super().run()


def _user_baggage() -> dict[str, str] | None:
    """The caller's OpenTelemetry baggage, as text (as a carrier sends it); ``None`` if none.

    An entry whose ``str()`` raises is left out, as a carrier leaves it out.
    """
    try:
        entries = baggage.get_all()
    except Exception:
        return None
    kept: dict[str, str] = {}
    for key, value in entries.items():
        try:
            kept[str(key)] = value if value.__class__ is str else str(value)
        except Exception:
            continue
    return kept or None


class _ScopeSnapshot:
    """Picklable copy of the trace context, baggage and scopes, for process pools.

    The caller's baggage and scopes are restored in the worker whatever the
    worker's ``propagate_scopes`` says (that gate guards a server against its
    callers; a pool's worker is the caller's own), so a forked worker and a
    spawned one, which has its own configuration, see the same.
    """

    __slots__ = (
        "baggage",
        "bucket",
        "carrier",
        "iteration",
        "per_prompt",
        "session_id",
        "task_id",
    )

    def __init__(self) -> None:
        carrier = current_trace_carrier()
        carrier.pop(BAGGAGE, None)  # the scopes and baggage travel here, not in the carrier
        self.carrier = carrier
        self.baggage = _user_baggage()
        bucket = BUCKET.get()
        self.bucket = bucket.value if bucket is not None else None
        self.iteration = ITERATION.get()
        self.per_prompt = PER_PROMPT.get()
        self.task_id = TASK_ID.get()
        self.session_id = SESSION_ID.get()

    def __getstate__(self) -> tuple[Any, ...]:
        return (
            self.carrier,
            self.baggage,
            self.bucket,
            self.iteration,
            self.per_prompt,
            self.task_id,
            self.session_id,
        )

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (
            self.carrier,
            self.baggage,
            self.bucket,
            self.iteration,
            self.per_prompt,
            self.task_id,
            self.session_id,
        ) = state

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Call *fn* in the worker's own context with the snapshot's span, baggage and scopes.

        The worker's context is kept, as a raw pool keeps it: what the pool's
        initializer set there (a ``ContextVar``, ``decimal``'s precision) is
        seen by every call. Only the OpenTelemetry context and the scopes are
        replaced, whole (a forked worker would otherwise keep the span and
        scopes of whoever first submitted to it), and put back afterwards.
        """
        bucket = Bucket(self.bucket) if self.bucket is not None else None
        state = ScopeState(
            bucket, bool(self.per_prompt), self.iteration, self.task_id, self.session_id
        )
        scopes = SCOPES.set(state)
        try:
            # no span but the carrier's, and the caller's baggage only
            ctx = otel_context.Context()
            if self.baggage:
                ctx = with_baggage(self.baggage, ctx)
            empty = otel_context.attach(ctx)
            try:
                with remote_trace_context(self.carrier):
                    return fn(*args, **kwargs)
            finally:
                otel_context.detach(empty)
        finally:
            SCOPES.reset(scopes)


def _run_in_snapshot(snapshot: _ScopeSnapshot, fn: Callable[..., R], *args: Any) -> R:
    return snapshot.run(fn, *args)


def _run_in_snapshot_kw(
    snapshot: _ScopeSnapshot, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> R:
    return snapshot.run(fn, *args, **kwargs)


class ContextExecutor(concurrent.futures.Executor):
    """An executor whose ``submit`` and ``map`` carry the caller's context.

    Thread-based executors get the full context (active span and scopes).
    A ``ProcessPoolExecutor`` cannot receive a context, so it gets a picklable
    snapshot: a W3C carrier plus the baggage and scope values, restored in the worker.
    """

    def __init__(self, executor: concurrent.futures.Executor) -> None:
        self._executor = executor
        self._by_carrier = isinstance(executor, concurrent.futures.ProcessPoolExecutor)

    @property
    def wrapped(self) -> concurrent.futures.Executor:
        """The executor doing the work."""
        return self._executor

    def submit(
        self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[R]:
        """Schedule ``fn(*args, **kwargs)`` in the caller's context."""
        if self._by_carrier:
            return self._executor.submit(_run_in_snapshot_kw, _ScopeSnapshot(), fn, args, kwargs)
        # A submitted call runs once: a copy of the context made now is its own, so
        # no per-call copy (bind_context's) is needed.
        run: Callable[..., R] = contextvars.copy_context().run
        return self._executor.submit(run, fn, *args, **kwargs)

    def map(
        self,
        fn: Callable[..., R],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[R]:
        """``Executor.map`` with every call in the caller's context."""
        if self._by_carrier:
            call: Callable[..., R] = functools.partial(_run_in_snapshot, _ScopeSnapshot(), fn)
        else:
            call = bind_context(fn)
        return self._executor.map(call, *iterables, timeout=timeout, chunksize=chunksize)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Shut the wrapped executor down."""
        self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)


def context_executor(executor: concurrent.futures.Executor) -> ContextExecutor:
    """Wrap *executor* so ``submit`` and ``map`` carry the caller's context.

    Example:
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> from asynctrace import iteration_scope, current_iteration
        >>> with context_executor(ThreadPoolExecutor(2)) as pool, iteration_scope(9):
        ...     pool.submit(current_iteration).result()
        9
    """
    if isinstance(executor, ContextExecutor):
        return executor
    return ContextExecutor(executor)


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
