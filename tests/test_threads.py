"""Threads, executors, subprocesses: one trace per run, scopes travel explicitly."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import trace

from asynctrace import (
    Bucket,
    ContextThread,
    bind_context,
    bucket_scope,
    context_executor,
    current_bucket,
    current_iteration,
    in_per_prompt_scope,
    inject_env,
    iteration_scope,
    managed_span,
    per_prompt_scope,
    to_thread,
    umbrella_span,
)
from asynctrace.testing import CapturedSpans

HERE = Path(__file__).parent


def scope_values() -> tuple[int | None, Bucket | None, bool, int]:
    """What a callee sees: iteration, bucket, per-prompt, current span id."""
    return (
        current_iteration(),
        current_bucket(),
        in_per_prompt_scope(),
        trace.get_current_span().get_span_context().span_id,
    )


def run_child() -> dict[str, Any]:
    """Start a real Python child with the current context in its environment."""
    env = inject_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, str(HERE / "_child_span.py")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return dict(json.loads(out.stdout))


def parent_of(span: Any) -> int | None:
    """Parent span id of a finished span."""
    return span.parent.span_id if span.parent is not None else None


def test_whole_chain_is_one_trace(spans: CapturedSpans) -> None:
    """driver → tasks → ContextThread → pool → to_thread → subprocess: one trace, right parents."""
    child_info: dict[str, Any] = {}

    def in_pool() -> None:
        with managed_span("data_processing", "pool"):

            async def hop() -> None:
                await to_thread(in_to_thread)

            asyncio.run(hop())

    def in_to_thread() -> None:
        with managed_span("data_processing", "to_thread"):
            child_info.update(run_child())

    def in_thread(pool: Any) -> None:
        with managed_span("data_processing", "thread"):
            pool.submit(in_pool).result()

    async def driver() -> None:
        with ThreadPoolExecutor(2) as raw_pool:
            pool = context_executor(raw_pool)
            with umbrella_span("job", "driver"):

                async def task() -> None:
                    with managed_span("rollout", "task"):
                        thread = ContextThread(target=in_thread, args=(pool,))
                        thread.start()
                        await asyncio.get_running_loop().run_in_executor(None, thread.join)

                await asyncio.gather(asyncio.create_task(task()))

    asyncio.run(driver())
    by_name = {s.name: s for s in spans.spans}
    trace_id = by_name["driver"].context.trace_id
    chain = ["driver", "task", "thread", "pool", "to_thread"]
    for parent, child in itertools.pairwise(chain):
        assert by_name[child].context.trace_id == trace_id
        assert parent_of(by_name[child]) == by_name[parent].context.span_id, child
    assert child_info["trace_id"] == trace_id
    assert child_info["parent_id"] == by_name["to_thread"].context.span_id


def test_raw_thread_and_plain_submit_start_new_traces(spans: CapturedSpans) -> None:
    """Documented: a raw Thread or a plain executor.submit inherits no context."""
    seen: list[tuple[Any, ...]] = []
    with iteration_scope(3), bucket_scope(Bucket.IDLE), umbrella_span("job", "driver"):
        raw = threading.Thread(target=lambda: seen.append(scope_values()))
        raw.start()
        raw.join()
        with ThreadPoolExecutor(1) as pool:
            seen.append(pool.submit(scope_values).result())

            def spanned() -> None:
                with managed_span("reward", "orphan"):
                    pass

            pool.submit(spanned).result()
    for iteration, bucket, per_prompt, span_id in seen:
        assert (iteration, bucket, per_prompt, span_id) == (None, None, False, 0)
    orphan = spans.by_name("orphan")[0]
    assert orphan.parent is None
    assert orphan.context.trace_id != spans.by_name("driver")[0].context.trace_id


def test_every_scope_travels(spans: CapturedSpans) -> None:
    """bind_context, ContextThread, context_executor carry span and all scopes."""
    results: list[tuple[Any, ...]] = []
    with iteration_scope(5), bucket_scope(Bucket.WASTED), per_prompt_scope():
        with umbrella_span("job", "driver") as driver:
            expected = (5, Bucket.WASTED, True, driver.get_span_context().span_id)
            bound = bind_context(scope_values)
            thread = ContextThread(target=lambda: results.append(scope_values()))
            with context_executor(ThreadPoolExecutor(2)) as pool:
                futures = [pool.submit(scope_values) for _ in range(4)]
                mapped = list(pool.map(lambda _: scope_values(), range(4)))
    thread.start()
    thread.join()
    results.append(bound())
    results.extend(f.result() for f in futures)
    results.extend(mapped)
    assert results == [expected] * 10
    assert current_iteration() is None


def test_a_subclass_that_overrides_run_keeps_the_context() -> None:
    """A ContextThread subclass's own run(), and a super().run() inside it, see the scopes."""
    seen: list[Any] = []

    class Worker(ContextThread):
        def run(self) -> None:
            seen.append(("own", current_iteration()))
            super().run()  # the target, in the same (already entered) context

    class Deeper(Worker):
        def run(self) -> None:
            seen.append(("deeper", current_iteration()))
            super().run()

    with iteration_scope(6):
        workers = [
            Worker(target=lambda: seen.append(("target", current_iteration()))),
            Deeper(target=lambda: seen.append(("target", current_iteration()))),
        ]
    for worker in workers:
        worker.start()
        worker.join()
    assert seen == [
        ("own", 6),
        ("target", 6),
        ("deeper", 6),
        ("own", 6),
        ("target", 6),
    ]
    assert current_iteration() is None


def test_context_thread_subclasses_of_every_shape() -> None:
    """A mixin's run(), a scope entered before super().run(), arguments, and subclasses
    that skip ContextThread.__init__ or define run() as a staticmethod all keep working."""
    seen: list[Any] = []

    class Mixin:
        def run(self) -> None:
            seen.append(("mixin", current_iteration()))
            with iteration_scope(9):
                super().run()  # type: ignore[misc]

    class Mixed(Mixin, ContextThread):
        pass

    class NoInit(ContextThread):
        def __init__(self) -> None:
            threading.Thread.__init__(self)

        def run(self, extra: int = 0) -> None:
            seen.append(("no-init", current_iteration(), extra))

    class Static(ContextThread):
        @staticmethod
        def run() -> None:  # type: ignore[override]
            seen.append(("static",))

    with iteration_scope(6):
        mixed = Mixed(target=lambda: seen.append(("target", current_iteration())))
        no_init = NoInit()
    for thread in (mixed, no_init):
        thread.start()
        thread.join()
    no_init.run(3)  # called directly, with an argument
    Static().run()
    assert seen == [
        ("mixin", 6),
        ("target", 9),  # the scope the mixin entered reaches the target
        ("no-init", 6, 0),  # captured in __new__, though ContextThread.__init__ never ran
        ("no-init", 6, 3),
        ("static",),
    ]


def test_bound_callable_is_reentrant_across_threads() -> None:
    """One bound callable may run in several threads at once."""
    barrier = threading.Barrier(4)

    def work() -> int | None:
        barrier.wait(timeout=10)
        return current_iteration()

    with iteration_scope(8):
        bound = bind_context(work)
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda _: bound(), range(4))) == [8, 8, 8, 8]


def test_changes_inside_do_not_leak_between_calls() -> None:
    """Each call of a bound callable starts from the captured context."""

    def enter_and_leak() -> int | None:
        before = current_iteration()
        iteration_scope(99).__enter__()
        return before

    with iteration_scope(1):
        bound = bind_context(enter_and_leak)
    assert bound() == 1
    assert bound() == 1


def test_process_pool_gets_a_carrier(spans: CapturedSpans) -> None:
    """ProcessPoolExecutor: trace context and scopes travel as a picklable snapshot."""
    sys.path.insert(0, str(HERE))
    try:
        import _pool_worker

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=ctx, initializer=_pool_worker.init) as raw:
            pool = context_executor(raw)
            with iteration_scope(4), bucket_scope(Bucket.OVERHEAD):
                with umbrella_span("job", "driver") as driver:
                    info = pool.submit(_pool_worker.traced_work, 1, name="pool.submit").result()
                    mapped = list(pool.map(_pool_worker.traced_work, [2, 3]))
        driver_ctx = driver.get_span_context()
        for result in [info, *mapped]:
            assert result["trace_id"] == driver_ctx.trace_id
            assert result["parent_id"] == driver_ctx.span_id
            assert result["iteration"] == 4
            assert result["bucket"] == "overhead"
            assert result["span_bucket"] == "overhead"
        assert [r["x"] for r in mapped] == [2, 3]
    finally:
        sys.path.remove(str(HERE))


def test_a_forked_pool_worker_runs_each_call_in_a_fresh_context(spans: CapturedSpans) -> None:
    """A worker forked when the first call was submitted inherits that thread's context;
    each call still runs in the caller's context alone: a later call made outside any
    span and scope sees none, not the first caller's."""
    sys.path.insert(0, str(HERE))
    try:
        import _pool_worker

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(1, mp_context=ctx) as raw:
            pool = context_executor(raw)
            with iteration_scope(1), umbrella_span("job", "step-1") as step:
                first = pool.submit(_pool_worker.what_is_current, 1).result()
            later = pool.submit(_pool_worker.what_is_current, 2).result()
            mapped = list(pool.map(_pool_worker.what_is_current, [3]))
        assert (first["trace_id"], first["iteration"]) == (step.get_span_context().trace_id, 1)
        for result in [later, *mapped]:
            assert (result["trace_id"], result["iteration"], result["task_id"]) == (0, None, None)
    finally:
        sys.path.remove(str(HERE))


@pytest.mark.anyio
async def test_to_thread_on_every_backend(spans: CapturedSpans) -> None:
    """to_thread carries span and scopes on asyncio, uvloop and trio."""
    with iteration_scope(6), umbrella_span("job", "driver") as driver:
        values = await to_thread(scope_values)
    assert values == (6, None, False, driver.get_span_context().span_id)


@pytest.mark.anyio
async def test_to_thread_work_can_call_back_into_the_loop_through_anyio() -> None:
    """The call runs in anyio's worker threads on every backend: anyio.from_thread works."""

    def in_thread() -> tuple[int | None, int | None]:
        return current_iteration(), anyio.from_thread.run_sync(current_iteration)

    with iteration_scope(5):
        assert await to_thread(in_thread) == (5, 5)


@pytest.mark.anyio
async def test_a_cancelled_to_thread_caller_waits_for_the_call_to_end() -> None:
    """A caller cancelled while the call runs leaves only once it has ended: none left behind."""
    release = threading.Event()
    ended: list[int | None] = []

    def blocked() -> None:
        release.wait(10)
        ended.append(current_iteration())

    timer = threading.Timer(0.3, release.set)
    timer.start()
    try:
        with iteration_scope(3), anyio.move_on_after(0.1):
            await to_thread(blocked)
        assert ended == [3]
    finally:
        release.set()
        timer.cancel()


@pytest.mark.anyio
async def test_tasks_inherit_and_isolate(spans: CapturedSpans) -> None:
    """Tasks created in a span nest under it; sibling tasks do not see each other's spans."""
    async with umbrella_span("job", "driver") as driver:

        async def child(i: int) -> None:
            async with managed_span("reward", f"c{i}"):
                await anyio.sleep(0.001)

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(child, i)
    for i in range(10):
        span = spans.by_name(f"c{i}")[0]
        assert parent_of(span) == driver.get_span_context().span_id


@pytest.mark.anyio
async def test_a_bound_async_function_runs_its_body_in_the_captured_context() -> None:
    """bind_context of an async def: the body sees the captured scopes across awaits, no leak."""

    async def body(tag: str) -> tuple[str, int | None, int | None, int | None]:
        before = current_iteration()
        await anyio.sleep(0.001)
        with iteration_scope(99):
            await anyio.sleep(0)
        async with anyio.create_task_group() as tg:  # tasks it starts inherit the context
            seen: list[int | None] = []
            tg.start_soon(lambda: _append_iteration(seen))
        return tag, before, current_iteration(), seen[0]

    class AsyncCall:
        async def __call__(self, x: int) -> tuple[int | None, int]:
            await anyio.sleep(0)
            return current_iteration(), x

    with iteration_scope(4):
        bound = bind_context(body)
        partial = bind_context(functools.partial(body, "p"))
        obj = bind_context(AsyncCall())
    with iteration_scope(7):
        coroutine = bound("x")
        assert coroutine.__qualname__ == body.__qualname__  # named as the body (a task's repr)
        assert await coroutine == ("x", 4, 4, 4)
        assert await partial() == ("p", 4, 4, 4)
        assert await obj(1) == (4, 1)
        assert current_iteration() == 7


async def _append_iteration(out: list[int | None]) -> None:
    out.append(current_iteration())


@pytest.mark.anyio
async def test_a_bound_async_function_passes_on_exceptions_and_cancellation() -> None:
    """The body's exception reaches the awaiting task; a cancel scope cancels the body."""
    cleaned: list[int | None] = []

    async def boom() -> None:
        await anyio.sleep(0)
        raise KeyError("k")

    async def forever() -> None:
        try:
            await anyio.sleep(100)
        finally:
            cleaned.append(current_iteration())

    with iteration_scope(2):
        bound_boom, bound_forever = bind_context(boom), bind_context(forever)
    with pytest.raises(KeyError):
        await bound_boom()
    with anyio.move_on_after(0.01) as scope:
        await bound_forever()
    assert scope.cancelled_caught
    assert cleaned == [2]


def test_a_bound_coroutine_closed_unfinished_cleans_up_in_the_captured_context() -> None:
    """Closing a bound coroutine part-way closes the body, whose cleanup sees the context."""
    cleaned: list[int | None] = []

    async def body() -> None:
        try:
            await asyncio.sleep(0)
        finally:
            cleaned.append(current_iteration())

    with iteration_scope(5):
        bound = bind_context(body)
    coro = bound()
    coro.send(None)  # up to the first suspension
    coro.close()
    assert cleaned == [5]


@pytest.fixture(params=["asyncio", "uvloop"])
def loop_run(request: pytest.FixtureRequest) -> Any:
    """asyncio.run, or uvloop.run."""
    if request.param == "uvloop":
        return pytest.importorskip("uvloop").run
    return asyncio.run


@pytest.mark.parametrize("how", ["task.cancel", "asyncio.timeout", "wait_for"])
def test_an_asyncio_cancelled_to_thread_caller_leaves_and_its_finally_stops_the_call(
    loop_run: Any, how: str
) -> None:
    """An asyncio cancellation or timeout is raised at once, as ``asyncio.to_thread`` raises
    it: a call that runs until its caller's ``finally`` stops it ends, and the timeout
    given is the time waited (waiting for the call would hang here)."""
    stop, started = threading.Event(), threading.Event()
    ended: list[int | None] = []

    def until_stopped() -> None:
        started.set()
        stop.wait(10.0)
        ended.append(current_iteration())

    async def wait_started() -> None:
        while not started.is_set():
            await asyncio.sleep(0.001)

    async def call() -> None:
        try:
            await to_thread(until_stopped)
        finally:
            stop.set()

    async def main() -> str:
        with iteration_scope(3):
            began = time.monotonic()
            try:
                if how == "task.cancel":
                    task = asyncio.create_task(call())
                    await wait_started()
                    task.cancel()
                    await task
                elif how == "asyncio.timeout":
                    if sys.version_info < (3, 11):
                        pytest.skip("asyncio.timeout is new in 3.11")
                    async with asyncio.timeout(0.05):
                        await call()
                else:
                    await asyncio.wait_for(call(), 0.05)
            except (asyncio.CancelledError, TimeoutError, asyncio.TimeoutError) as exc:
                assert time.monotonic() - began < 5.0  # a hang bound: the stop event ends it
                return type(exc).__name__
            return "not cancelled"

    outcome = loop_run(main())
    assert outcome == ("CancelledError" if how == "task.cancel" else "TimeoutError")
    deadline = time.monotonic() + 5.0
    while not ended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ended == [3]  # it ran to its end, in the caller's scopes


def test_an_asyncio_to_thread_cancelled_before_its_call_begins_runs_nothing(
    loop_run: Any,
) -> None:
    """A caller cancelled before the call has begun leaves at once, and the call never runs."""
    ran: list[int] = []

    async def main() -> None:
        await to_thread(lambda: None)  # the worker thread exists
        task = asyncio.create_task(to_thread(ran.append, 1))
        await asyncio.sleep(0)  # to_thread's first suspension, before the call is queued
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await to_thread(lambda: None)  # the same worker: whatever it had queued came first

    loop_run(main())
    assert ran == []


@pytest.mark.anyio
async def test_to_thread_passes_on_results_and_exceptions() -> None:
    """The call's result is returned, its exception raised, on every backend."""

    def boom() -> None:
        raise KeyError("k")

    assert await to_thread(sum, [1, 2]) == 3
    with pytest.raises(KeyError):
        await to_thread(boom)
