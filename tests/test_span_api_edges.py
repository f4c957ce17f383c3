"""The span helpers and decorators given objects that are not what they expect.

A span context manager entered twice, callable objects whose ``__call__`` is
a coroutine or generator function, span names that are not strings, groups
that no set can hold: each is traced correctly, refused at decoration with a
clear error, or skipped and logged once; never a span left open, never an
exception into the host program.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace

import asynctrace as at
from asynctrace import ConfigurationError
from asynctrace._errors import set_strict
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]
OPENERS: list[Callable[[str, str], Any]] = [at.managed_span, at.umbrella_span, at.detached_span]


def _reentry_logs(caplog: pytest.LogCaptureFixture) -> int:
    return sum("entered already" in str(r.exc_info and r.exc_info[1]) for r in caplog.records)


# ---------------------------------------------------------------------------
# A span's context manager entered again.


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("opener", OPENERS, ids=lambda f: f.__name__)
def test_entering_a_span_again_leaves_the_first_entry_alone(
    provider: str,
    opener: Callable[[str, str], Any],
    lenient: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A nested `with` on the same object yields the disabled span and its exit ends
    nothing; the outer block's span stays current until its own exit, then is gone."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    with capture_spans("all", provider=provider) as captured:
        before = trace.get_current_span()
        outer = opener("reward", "outer")
        with outer as span:
            with outer as again:
                assert not again.is_recording()
                with outer as third:  # a second refused entry, nested in the first
                    assert not third.is_recording()
            assert trace.get_current_span() is span
            assert span.is_recording()
            with at.managed_span("reward", "child"):
                pass
        assert trace.get_current_span() is before
        with at.managed_span("reward", "later"):
            pass
        spans = {s.name: s for s in captured.spans}
    assert sorted(s.name for s in captured.spans) == ["child", "later", "outer"]
    assert spans["child"].parent is not None
    assert spans["child"].parent.span_id == spans["outer"].context.span_id
    assert spans["later"].parent is None  # the outer span did not stay current
    assert (spans["outer"].end_time or 0) >= (spans["child"].end_time or 0)  # its own exit
    assert _reentry_logs(caplog) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_entering_a_span_again_after_its_block_records_nothing(
    provider: str, lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Sequential reuse: the second block runs with the disabled span; one span in all."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    with capture_spans("all", provider=provider) as captured:
        before = trace.get_current_span()
        reused = at.managed_span("reward", "r")
        with reused as first:
            assert first.is_recording()
        with reused as second:
            assert not second.is_recording()
            assert trace.get_current_span() is before
        assert trace.get_current_span() is before
        names = [s.name for s in captured.spans]
    assert names == ["r"]
    assert _reentry_logs(caplog) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_async_with_entered_again_leaves_the_first_entry_alone(
    provider: str, lenient: None
) -> None:
    """The same for `async with`, nested on itself inside a task."""

    async def main() -> None:
        outer = at.managed_span("reward", "outer")
        async with outer as span:
            async with outer as again:
                assert not again.is_recording()
            assert trace.get_current_span() is span
            await asyncio.sleep(0)
            async with at.managed_span("reward", "child"):
                pass
        assert not trace.get_current_span().is_recording()

    with capture_spans("all", provider=provider) as captured:
        asyncio.run(main())
        spans = {s.name: s for s in captured.spans}
    assert set(spans) == {"outer", "child"}
    assert spans["child"].parent is not None
    assert spans["child"].parent.span_id == spans["outer"].context.span_id


def test_a_span_made_before_a_reconfiguration_entered_again_ends_at_its_own_exit(
    lenient: None,
) -> None:
    """Made under the fast provider, entered under the SDK one, nested on itself: the
    refused entry's exit leaves the span open; the outer exit ends it."""
    with capture_spans("all", provider="fast"):
        outer = at.managed_span("reward", "outer")
        with capture_spans("all", provider="sdk") as captured:
            with outer as span:
                with outer as again:
                    assert not again.is_recording()
                assert trace.get_current_span() is span
                assert span.is_recording()
                with at.managed_span("reward", "child"):
                    pass
            assert not trace.get_current_span().is_recording()
            spans = {s.name: s for s in captured.spans}
    assert set(spans) == {"outer", "child"}
    assert spans["child"].parent is not None
    assert spans["child"].parent.span_id == spans["outer"].context.span_id


# ---------------------------------------------------------------------------
# Callable objects whose __call__ is a coroutine, generator or async generator.


class _Scorer:
    async def __call__(self, sample: str) -> int:
        await asyncio.sleep(0.01)
        with at.managed_span("reward", "inside"):
            pass
        return len(sample)


class _Batches:
    def __call__(self, n: int) -> Iterator[int]:
        for i in range(n):
            with at.managed_span("data_processing", "item"):
                pass
            yield i


class _Stream:
    async def __call__(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            await asyncio.sleep(0)
            with at.managed_span("data_processing", "item"):
                pass
            yield i


def _children_of(spans: Any, parent_name: str, child_name: str) -> list[Any]:
    (parent,) = spans.by_name(parent_name)
    children: list[Any] = spans.by_name(child_name)
    assert children
    for child in children:
        assert child.parent is not None
        assert child.parent.span_id == parent.context.span_id
        assert parent.end_time >= child.end_time  # the span covers the body
    return children


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("decorator", [at.trace_fn, at.umbrella_trace_fn], ids=["leaf", "umb"])
@pytest.mark.parametrize("partial", [False, True], ids=["object", "partial"])
def test_an_object_with_an_async_call_is_traced_as_a_coroutine_function(
    provider: str, decorator: Any, partial: bool
) -> None:
    """The wrapper is a coroutine function; the span covers the awaited body."""
    target: Any = functools.partial(_Scorer(), "abc") if partial else _Scorer()
    score = decorator("reward", "score")(target)
    assert inspect.iscoroutinefunction(score)
    with capture_spans("all", provider=provider) as captured:
        result = asyncio.run(score() if partial else score("abc"))
        _children_of(captured, "score", "inside")
    assert result == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_object_with_a_generator_call_is_traced_as_a_generator_function(
    provider: str,
) -> None:
    """The wrapper is a generator function; the span covers the whole iteration."""
    batches = at.trace_fn("data_processing", "batches")(_Batches())
    assert inspect.isgeneratorfunction(batches)
    with capture_spans("all", provider=provider) as captured:
        assert list(batches(3)) == [0, 1, 2]
        assert len(_children_of(captured, "batches", "item")) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_object_with_an_async_generator_call_is_traced_as_one(provider: str) -> None:
    """The wrapper is an async generator function; the span covers the whole iteration."""
    stream = at.trace_fn("data_processing", "stream")(_Stream())
    assert inspect.isasyncgenfunction(stream)

    async def main() -> list[int]:
        return [i async for i in stream(2)]

    with capture_spans("all", provider=provider) as captured:
        assert asyncio.run(main()) == [0, 1]
        assert len(_children_of(captured, "stream", "item")) == 2


def test_profiling_an_object_is_decided_by_its_call() -> None:
    """profile=True: an async __call__ gives a coroutine function, a generator one is
    refused at decoration as a generator function is."""
    score = at.trace_fn("reward", "score", profile=True)(_Scorer())
    assert inspect.iscoroutinefunction(score)
    with capture_spans("all") as captured:
        assert asyncio.run(score("ab")) == 2
        _children_of(captured, "score", "inside")
    with pytest.raises(ConfigurationError, match="generator function"):
        at.trace_fn("data_processing", profile=True)(_Batches())
    with pytest.raises(ConfigurationError, match="generator function"):
        at.umbrella_trace_fn("data_processing", profile=True)(_Stream())


# ---------------------------------------------------------------------------
# Span names.


@pytest.mark.parametrize("decorator", [at.trace_fn, at.umbrella_trace_fn])
@pytest.mark.parametrize("name", [123, b"reward", "", "  ", ["a"]])
def test_a_decorator_refuses_a_name_that_is_not_a_non_empty_string(
    decorator: Any, name: Any
) -> None:
    """At decoration, naming the argument, the value and what is accepted."""
    where = decorator.__name__
    with pytest.raises(ConfigurationError) as raised:
        decorator("reward", name)
    message = str(raised.value)
    assert f"{where}(name)" in message
    assert repr(name) in message
    assert "non-empty span name" in message


def test_a_decorator_without_a_name_uses_the_qualified_name() -> None:
    """None (the default) still means the function's qualified name."""

    def scored() -> int:
        return 1

    traced = at.trace_fn("reward", None)(scored)
    with capture_spans("all") as captured:
        traced()
        names = [s.name for s in captured.spans]
    assert names == [scored.__qualname__]


# ---------------------------------------------------------------------------
# Groups that no set can hold.


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("group", [["reward"], {"reward": 1}], ids=["list", "dict"])
def test_a_group_no_set_can_hold_is_skipped_and_logged_once(
    provider: str, group: Any, lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Every helper: no exception into the caller, no span, one log record naming the
    group's type (not its content)."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    with capture_spans("all", provider=provider) as captured:
        for _ in range(3):
            with at.managed_span(group, "m") as span:
                assert not span.is_recording()
            with at.umbrella_span(group, "u") as span:
                assert not span.is_recording()
            with at.detached_span(group, "d") as span:
                assert not span.is_recording()
            at.instant(group, "i")
            started = at.start_span(group, "s")
            assert not started.is_recording()
            at.end_span(started)
            assert at.is_span_group_enabled(group) is False
        names = [s.name for s in captured.spans]
    assert names == []
    logged = [r for r in caplog.records if "span group: expected a group name" in str(r.exc_info)]
    assert len(logged) == 1
    assert type(group).__name__ in str(logged[0].exc_info)
    assert "'reward'" not in str(logged[0].exc_info)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_group_no_set_can_hold_inside_a_per_prompt_scope_never_raises(
    provider: str, lenient: None
) -> None:
    """In a per-prompt scope the gate checks ``per_prompt``, not the group: what fails
    later on the span's path is logged, and the block still runs."""
    ran = 0
    with capture_spans("all", provider=provider), at.per_prompt_scope():
        with at.managed_span(["reward"], "m"):  # type: ignore[arg-type]
            ran += 1
        with at.umbrella_span(["reward"], "u"):  # type: ignore[arg-type]
            ran += 1
        at.instant(["reward"], "i")  # type: ignore[arg-type]
        at.end_span(at.start_span(["reward"], "s"))  # type: ignore[arg-type]
    assert ran == 2


def test_a_group_no_set_can_hold_raises_in_strict_mode() -> None:
    """Strict mode (asynctrace's own tests) sees the failure production code logs."""
    previous = set_strict(True)
    try:
        with capture_spans("all"), pytest.raises(TypeError, match="expected a group name"):
            at.managed_span(["reward"], "m")  # type: ignore[arg-type]
    finally:
        set_strict(previous)
