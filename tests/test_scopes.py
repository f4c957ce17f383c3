"""Scopes: iteration stamping, per-task isolation, token reset."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import asynctrace as at
from asynctrace import (
    Bucket,
    ConfigurationError,
    bucket_scope,
    current_bucket,
    current_iteration,
    in_per_prompt_scope,
    iteration_scope,
    managed_span,
    per_prompt_scope,
    umbrella_span,
)
from asynctrace.testing import CapturedSpans


def iteration_of(span: object) -> object:
    """The rl.iteration attribute of a span, or None."""
    return dict(span.attributes or {}).get("rl.iteration")  # type: ignore[attr-defined]


def test_scopes_reset_by_token() -> None:
    """Each scope restores the previous value on exit, also when nested."""
    assert current_iteration() is None
    with iteration_scope(1):
        with iteration_scope(2):
            assert current_iteration() == 2
        assert current_iteration() == 1
    assert current_iteration() is None
    with bucket_scope(Bucket.IDLE):
        assert current_bucket() is Bucket.IDLE
    assert current_bucket() is None
    with per_prompt_scope():
        assert in_per_prompt_scope()
    assert not in_per_prompt_scope()


def test_scope_reset_on_exception() -> None:
    """An exception inside a scope still resets it."""
    with pytest.raises(RuntimeError), iteration_scope(5):
        raise RuntimeError
    assert current_iteration() is None


@pytest.mark.parametrize("bad", ["3", 2.0, None, True])
def test_iteration_scope_rejects_non_ints(bad: object) -> None:
    """iteration_scope names the bad value."""
    with pytest.raises(ConfigurationError, match=repr(bad)):
        iteration_scope(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["IDLE", None, 1])
def test_bucket_scope_rejects_non_buckets(bad: object) -> None:
    """bucket_scope accepts only Bucket members (or their values) and lists them."""
    with pytest.raises(ConfigurationError, match="Bucket.IDLE"):
        bucket_scope(bad)  # type: ignore[arg-type]


def test_iteration_stamped_and_own_value_kept(spans: CapturedSpans) -> None:
    """Every span inside iteration_scope gets rl.iteration; its own value wins."""
    with iteration_scope(7):
        with umbrella_span("step", "step"):
            with managed_span("generation", "gen"):
                pass
            with managed_span("evaluate", "eval", attributes={"rl.iteration": 0}):
                pass
    with managed_span("generation", "after"):
        pass
    assert iteration_of(spans.by_name("step")[0]) == 7
    assert iteration_of(spans.by_name("gen")[0]) == 7
    assert iteration_of(spans.by_name("eval")[0]) == 0
    assert iteration_of(spans.by_name("after")[0]) is None


@pytest.mark.anyio
async def test_iteration_reaches_nested_coroutines_and_tasks(spans: CapturedSpans) -> None:
    """The scope reaches awaited coroutines and tasks created inside it."""

    async def nested() -> None:
        with managed_span("generation", "nested"):
            await anyio.sleep(0)

    with iteration_scope(7):
        await nested()
        async with anyio.create_task_group() as tg:
            tg.start_soon(nested)
    assert [iteration_of(s) for s in spans.by_name("nested")] == [7, 7]


@pytest.mark.anyio
async def test_concurrent_tasks_see_only_their_own_scope(spans: CapturedSpans) -> None:
    """1,000 concurrent tasks, each in its own iteration/bucket scope, never mix values."""
    seen: dict[int, tuple[int | None, Bucket | None]] = {}
    buckets = list(Bucket)

    async def worker(i: int) -> None:
        with iteration_scope(i), bucket_scope(buckets[i % 4]):
            await anyio.sleep(0)
            with managed_span("generation", f"task-{i}"):
                await anyio.sleep(0.001)
                await anyio.sleep(0)
            seen[i] = (current_iteration(), current_bucket())

    async with anyio.create_task_group() as tg:
        for i in range(1000):
            tg.start_soon(worker, i)
    assert len(spans.spans) == 1000
    for span in spans.spans:
        i = int(span.name.split("-")[1])
        assert iteration_of(span) == i
        assert dict(span.attributes or {})["rl.bucket"] == buckets[i % 4].value
        assert seen[i] == (i, buckets[i % 4])
    assert current_iteration() is None


@pytest.mark.anyio
async def test_async_with_scopes(spans: CapturedSpans) -> None:
    """Scopes also work with `async with`."""
    async with iteration_scope(3), per_prompt_scope():
        assert in_per_prompt_scope()
        assert current_iteration() == 3
    assert current_iteration() is None
    assert not in_per_prompt_scope()


_ASYNC_EXITS: dict[str, Callable[[], Any]] = {
    "iteration": lambda: iteration_scope(3),
    "bucket": lambda: bucket_scope(Bucket.IDLE),
    "per_prompt": per_prompt_scope,
    "task": lambda: at.task_scope(5),
    "session": at.session_scope,
    "phase": lambda: at.atrace_session_phase("generate"),
    "dispatch": lambda: at.dispatch_scope(attempt=1),
}


@pytest.mark.anyio
@pytest.mark.parametrize("make", sorted(_ASYNC_EXITS))
async def test_async_exit_passes_the_exception_on_and_restores(make: str) -> None:
    """The scopes' ``__aexit__`` (their ``__exit__``, awaited) suppresses nothing.

    Awaited it finishes with ``None`` on every backend; called by ``with`` its
    result is false; the scope is undone either way.
    """
    with at.task_scope(1), at.session_scope():
        before = at.current_session_id()
        with pytest.raises(KeyError, match="inside"):
            async with _ASYNC_EXITS[make]():
                raise KeyError("inside")
        scope = _ASYNC_EXITS[make]()
        scope.__enter__()
        assert not scope.__exit__(None, None, None)
        scope = _ASYNC_EXITS[make]()
        await scope.__aenter__()
        assert await scope.__aexit__(None, None, None) is None
        assert (current_iteration(), current_bucket()) == (None, None)
        assert not in_per_prompt_scope()
        assert (at.current_task_id(), at.current_session_id()) == (1, before)


def test_scope_object_cannot_be_entered_twice() -> None:
    """Re-entering the same scope object would leak a token, so it is refused."""
    scope = iteration_scope(1)
    with scope, pytest.raises(RuntimeError), scope:
        pass


def _exited_in_a_copy(scope: Any, read: Callable[[], object]) -> tuple[object, object, object]:
    """Enter *scope* here, exit it in a copy of this context: (inside, in the copy, here)."""
    scope.__enter__()
    inside = read()
    copy = contextvars.copy_context()
    copy.run(scope.__exit__, None, None, None)  # the token is this context's: no reset there
    return inside, copy.run(read), read()


@pytest.mark.parametrize(
    ("make", "read", "value"),
    [
        ("iteration", "iteration", 7),
        ("bucket", "bucket", "idle"),
        ("task", "task", 23),
        ("per_prompt", "per_prompt", True),
        ("dispatch", "per_prompt", True),
    ],
)
def test_a_scope_exited_in_another_context_restores_its_field_there(
    make: str, read: str, value: object
) -> None:
    """Entered in one context, exited in a copy (a token of another context): no error;
    in the copy the scope's own field goes back to its value before, and the context
    it was entered in is untouched."""
    makers = {
        "iteration": lambda: at.iteration_scope(7),
        "bucket": lambda: at.bucket_scope(at.Bucket.IDLE),
        "task": lambda: at.task_scope(23),
        "per_prompt": at.per_prompt_scope,
        "dispatch": at.dispatch_scope,
    }
    readers = {
        "iteration": at.current_iteration,
        "bucket": lambda: b.value if (b := at.current_bucket()) is not None else None,
        "task": at.current_task_id,
        "per_prompt": at.in_per_prompt_scope,
    }
    before = readers[read]()
    inside, in_copy, here = contextvars.copy_context().run(
        _exited_in_a_copy, makers[make](), readers[read]
    )
    assert inside == value
    assert in_copy == before
    assert here == value  # exiting in the copy changed nothing here


def test_a_scope_exited_where_that_context_set_its_own_leaves_that_one_alone() -> None:
    """A generator holding ``iteration_scope(5)`` across a ``yield``, resumed (and closed)
    in a context that has its own ``iteration_scope(8)``: that context still sees 8 after
    the generator's scope ends there, and the generator's own context sees 5 no more."""

    def steps() -> Any:
        with at.iteration_scope(5):
            yield at.current_iteration()
            yield at.current_iteration()

    generator = steps()
    seen = [contextvars.copy_context().run(next, generator)]

    def elsewhere() -> tuple[object, object]:
        with at.iteration_scope(8):
            value = next(generator)
            generator.close()  # its scope exits here, by a token of another context
            return value, at.current_iteration()

    inside, after = contextvars.copy_context().run(elsewhere)
    assert seen == [5]
    assert inside == 8  # (the generator reads the context it runs in)
    assert after == 8


def test_a_session_scope_exited_in_another_context_restores_the_session_there() -> None:
    """The session scope's exit, by a token of another context."""
    inside, in_copy, here = contextvars.copy_context().run(
        _exited_in_a_copy, at.session_scope(), at.current_session_id
    )
    assert isinstance(inside, str)
    assert in_copy is None
    assert here == inside
