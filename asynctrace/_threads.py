"""Explicit context propagation into threads, executors and process pools.

A raw ``threading.Thread`` starts with an empty context: no active span, no
scope. These helpers carry the caller's context — the active span and every
asynctrace scope — on purpose, one call at a time.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ParamSpec, TypeVar

import anyio.to_thread

from ._groups import Bucket
from ._propagation import current_trace_carrier, remote_trace_context
from ._scopes import BUCKET, ITERATION, PER_PROMPT, SESSION_ID, TASK_ID

__all__ = ["ContextThread", "bind_context", "context_executor", "to_thread"]

P = ParamSpec("P")
R = TypeVar("R")


def bind_context(fn: Callable[P, R]) -> Callable[P, R]:
    """Capture the caller's context now; run *fn* in it later, in any thread.

    Each call runs in a fresh copy of the captured context, so the bound
    callable may be called concurrently from several threads, and context
    changes made by one call do not leak into the next.

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
        return captured.copy().run(fn, *args, **kwargs)

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
    so changes the outer ``run`` made to the context reach the inner one. A
    thread whose ``ContextThread.__init__`` never ran has no captured context:
    its ``run`` runs as it is.
    """

    @functools.wraps(run)
    def run_in_context(self: Any, *args: Any, **kwargs: Any) -> Any:
        captured = getattr(self, "_asynctrace_context", None)
        if captured is None or _ENTERED.get() is self:
            return run(self, *args, **kwargs)
        return captured.copy().run(_enter, self, run, args, kwargs)

    run_in_context._asynctrace_wrapped = True  # type: ignore[attr-defined]
    return run_in_context


class ContextThread(threading.Thread):
    """A ``threading.Thread`` that runs in the context of the code that created it.

    The active span and every scope (iteration, bucket, per-prompt) are
    captured in ``__init__`` and are current inside ``run()`` — including a
    ``run()`` that a subclass (or a mixin listed before this class) defines.

    Example:
        >>> from asynctrace import iteration_scope, current_iteration
        >>> out = []
        >>> with iteration_scope(2):
        ...     t = ContextThread(target=lambda: out.append(current_iteration()))
        >>> t.start(); t.join(); out
        [2]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._asynctrace_context = contextvars.copy_context()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The run() this class resolves to (its own, or a mixin's) gets the context,
        # unless it is already wrapped. Only plain functions: a staticmethod or
        # another callable object is left as it is.
        run = inspect.getattr_static(cls, "run", None)
        if inspect.isfunction(run) and not getattr(run, "_asynctrace_wrapped", False):
            cls.run = _in_captured_context(run)  # type: ignore[method-assign]

    @_in_captured_context
    def run(self) -> None:
        """Run the thread's target inside the captured context."""
        super().run()


class _ScopeSnapshot:
    """Picklable copy of the trace context and scopes, for process pools."""

    __slots__ = ("bucket", "carrier", "iteration", "per_prompt", "session_id", "task_id")

    def __init__(self) -> None:
        self.carrier = current_trace_carrier()
        bucket = BUCKET.get()
        self.bucket = bucket.value if bucket is not None else None
        self.iteration = ITERATION.get()
        self.per_prompt = PER_PROMPT.get()
        self.task_id = TASK_ID.get()
        self.session_id = SESSION_ID.get()

    def __getstate__(self) -> tuple[Any, ...]:
        return (
            self.carrier,
            self.bucket,
            self.iteration,
            self.per_prompt,
            self.task_id,
            self.session_id,
        )

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (
            self.carrier,
            self.bucket,
            self.iteration,
            self.per_prompt,
            self.task_id,
            self.session_id,
        ) = state

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        def restored() -> R:
            ITERATION.set(self.iteration)
            BUCKET.set(Bucket(self.bucket) if self.bucket is not None else None)
            PER_PROMPT.set(bool(self.per_prompt))
            TASK_ID.set(self.task_id)
            SESSION_ID.set(self.session_id)
            with remote_trace_context(self.carrier):
                return fn(*args, **kwargs)

        # A fresh context, not the worker's: a forked worker would otherwise keep the
        # span (and scopes) of whoever first submitted to it.
        return contextvars.Context().run(restored)


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
    snapshot: a W3C carrier plus the scope values, restored in the worker.
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


async def to_thread(fn: Callable[..., R], *args: Any) -> R:
    """Run ``fn(*args)`` in a worker thread, in the caller's context.

    Works on asyncio, uvloop and trio (through anyio).

    Example:
        >>> import anyio
        >>> anyio.run(to_thread, sum, [1, 2])
        3
    """
    return await anyio.to_thread.run_sync(bind_context(fn), *args)
