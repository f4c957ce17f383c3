"""``context_executor``: an executor whose ``submit`` and ``map`` carry the caller's context.

Thread-based executors get the full context (active span and scopes); a
process pool gets a picklable :class:`~asynctrace._scope_snapshot.ScopeSnapshot`.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ParamSpec, TypeVar

from ._bind_context import bind_context
from ._scope_snapshot import ScopeSnapshot, run_in_snapshot, run_in_snapshot_kw

__all__ = ["ContextExecutor", "context_executor"]

P = ParamSpec("P")
R = TypeVar("R")


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
            return self._executor.submit(run_in_snapshot_kw, ScopeSnapshot(), fn, args, kwargs)
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
            call: Callable[..., R] = functools.partial(run_in_snapshot, ScopeSnapshot(), fn)
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
