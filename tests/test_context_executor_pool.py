"""A process pool wrapped by ``context_executor`` keeps each worker's own context.

The pool's initializer sets up the worker (a ``ContextVar`` with a request
context, ``decimal``'s precision): every call must see that as it does in the
raw pool. Only the span and the scopes come from the caller, and go again
after the call.
"""

from __future__ import annotations

import contextvars
import decimal
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from asynctrace import context_executor, current_iteration, current_task_id, iteration_scope

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="unset")


def _initializer() -> None:
    decimal.getcontext().prec = 5
    REQUEST.set("set-by-initializer")


def _seen(_: object = None) -> tuple[str, str, int | None, int | str | None]:
    """What a call sees: decimal's precision at work, the request, two scopes."""
    return (
        str(decimal.Decimal(1) / decimal.Decimal(7)),
        REQUEST.get(),
        current_iteration(),
        (current_task_id()),
    )


def _set_request(value: str) -> str:
    """A call that changes the worker's context (a raw pool's next calls see it)."""
    REQUEST.set(value)
    return value


def _calls(pool: Any) -> list[Any]:
    """The same calls on either pool: one inside a scope, then ones outside any."""
    with iteration_scope(7):
        first = pool.submit(_seen).result()
    mapped = list(pool.map(_seen, [1]))
    pool.submit(_set_request, "set-by-a-call").result()
    return [first, *mapped, pool.submit(_seen).result()]


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_a_wrapped_pool_keeps_what_the_initializer_set(start: str) -> None:
    """Every call sees the initializer's context, as in the raw pool; the scopes are the
    caller's, and gone in the next call."""
    if start not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {start} start method here")
    context = multiprocessing.get_context(start)
    with ProcessPoolExecutor(1, mp_context=context, initializer=_initializer) as raw:
        wrapped = _calls(context_executor(raw))
    with ProcessPoolExecutor(1, mp_context=context, initializer=_initializer) as raw:
        plain = _calls(raw)
    assert wrapped[0] == ("0.14286", "set-by-initializer", 7, None)
    assert wrapped[1] == ("0.14286", "set-by-initializer", None, None)
    assert wrapped[2] == ("0.14286", "set-by-a-call", None, None)
    # The worker's own context as the raw pool has it (whose forked worker, though, keeps
    # the scope of the call it was forked for: the wrapped one sees only its caller's).
    assert [seen[:2] for seen in plain] == [seen[:2] for seen in wrapped]
