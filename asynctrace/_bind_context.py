"""``bind_context``: capture the caller's context now, run a callable in it later.

A call of the bound callable that returns a coroutine returns one whose body
runs, step by step, in that call's copy of the captured context, whichever
task awaits it.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, ParamSpec, TypeVar, cast

__all__ = ["bind_context"]

P = ParamSpec("P")
R = TypeVar("R")
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


class Unstarted:
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


async def _in_context(context: contextvars.Context, pending: Unstarted) -> Any:
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
                "Any", _in_context(context, Unstarted(body))
            )
            # Named as the body: a task's repr, a stall span's coroutine name.
            stepped.__name__, stepped.__qualname__ = body.__name__, body.__qualname__
            return cast("R", stepped)
        return result

    return bound
