"""Thread edges: to_thread keeps its thread limit; bound coroutines that never start."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import warnings

import anyio.to_thread
import pytest

from asynctrace import _threads, bind_context, to_thread


async def _until(condition: object, what: str) -> None:
    """Let the loop run until *condition()* holds (no timing is asserted)."""
    for _ in range(10_000):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never: {what}")


def test_a_call_left_running_by_a_cancelled_caller_keeps_its_thread_token() -> None:
    """After asyncio cancels callers whose calls still run, no more calls run than the
    thread limit allows; a waiting call runs once a running one ends."""
    release = threading.Event()
    started: list[int] = []

    def hang(i: int) -> int:
        started.append(i)
        release.wait(30)
        return i

    async def main() -> None:
        limiter = _threads._lane(asyncio.get_running_loop()).limiter
        limiter.total_tokens = 2
        try:
            for i in range(2):  # two calls that run on after their callers are cancelled
                task = asyncio.create_task(to_thread(hang, i))
                await _until(lambda i=i: len(started) > i, "the call started")
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert limiter.borrowed_tokens == 2  # still theirs: the calls still run
            third = asyncio.create_task(to_thread(hang, 2))
            await _until(lambda: limiter.statistics().tasks_waiting == 1, "the third waits")
            assert started == [0, 1]
        finally:
            release.set()
        assert await third == 2
        await _until(lambda: limiter.borrowed_tokens == 0, "every token is given back")

    asyncio.run(main())
    assert started == [0, 1, 2]


def test_a_call_dropped_before_it_begins_gives_its_token_back() -> None:
    """A call whose caller is cancelled before the call begins never runs, and its token
    is free again at once."""
    ran: list[int] = []

    async def main() -> None:
        limiter = _threads._lane(asyncio.get_running_loop()).limiter
        task = asyncio.create_task(to_thread(ran.append, 1))
        await asyncio.sleep(0)  # the call is queued or still waiting for its worker
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await _until(lambda: limiter.borrowed_tokens == 0, "the token is given back")
        assert await to_thread(sum, [1, 2]) == 3

    asyncio.run(main())


def test_hung_calls_left_by_cancelled_callers_do_not_block_other_anyio_users(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As many hung calls as to_thread's limit, left by cancelled callers, hold its own
    tokens only: anyio.to_thread.run_sync (Starlette's run_in_threadpool) still runs, a
    further to_thread call waits, and that is said once, naming the calls that hold them."""
    release = threading.Event()
    started: list[int] = []
    limit = _threads.THREAD_LIMIT

    def hang(i: int) -> int:
        started.append(i)
        release.wait(30)
        return i

    async def main() -> None:
        limiter = _threads._lane(asyncio.get_running_loop()).limiter
        waiting: list[asyncio.Task[int]] = []
        try:
            callers = [asyncio.create_task(to_thread(hang, i)) for i in range(limit)]
            await _until(lambda: len(started) == limit, "every call started")
            for caller in callers:
                caller.cancel()
            await asyncio.gather(*callers, return_exceptions=True)
            assert limiter.borrowed_tokens == limit  # the hung calls keep asynctrace's tokens
            default = anyio.to_thread.current_default_thread_limiter()
            assert default.borrowed_tokens == 0  # and none of anyio's default limiter
            # Bounded only so that a regression fails instead of hanging the suite.
            assert await asyncio.wait_for(anyio.to_thread.run_sync(sum, [1, 2]), 30) == 3
            for i in range(2):
                waiting.append(asyncio.create_task(to_thread(hang, limit + i)))
                await _until(lambda i=i: limiter.statistics().tasks_waiting == i + 1, "waits")
            assert len(started) == limit
        finally:
            release.set()
        assert await asyncio.gather(*waiting) == [limit, limit + 1]
        await _until(lambda: limiter.borrowed_tokens == 0, "every token is given back")

    _threads._warned = False
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        asyncio.run(main())
    said = [r.getMessage() for r in caplog.records if "to_thread's limit" in r.getMessage()]
    assert len(said) == 1, said
    assert f"limit of {limit} threads is reached and {limit} of them" in said[0]


async def _body() -> int:
    await asyncio.sleep(0)
    return 1


def test_a_bound_coroutine_that_never_starts_does_not_warn() -> None:
    """A bound coroutine cancelled before it starts, or closed unawaited, closes its body:
    no "never awaited" warning, as for the coroutine without binding."""

    async def main() -> None:
        task = asyncio.create_task(bind_context(_body)())
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        bind_context(_body)().close()
        assert await bind_context(_body)() == 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert [str(w.message) for w in caught] == []


def test_a_bound_coroutine_never_awaited_still_warns_once() -> None:
    """One forgotten (neither awaited nor closed) still warns, once, under its body's name."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        coro = bind_context(_body)()
        del coro
        gc.collect()
    assert [str(w.message) for w in caught] == ["coroutine '_body' was never awaited"]
