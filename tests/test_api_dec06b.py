"""Decorated calls: carrier order, exception groups, the end of an iteration, frames per call,
and capture_spans() import failures."""

from __future__ import annotations

import asyncio
import builtins
import inspect
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest
from _span_tree import parents
from opentelemetry.trace import StatusCode

import asynctrace as at
from asynctrace import MissingExtraError
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]

Group: Any = getattr(builtins, "BaseExceptionGroup", None)  # 3.11+
needs_groups = pytest.mark.skipif(Group is None, reason="no built-in BaseExceptionGroup")


# --- trace_fn stacked above accepts_trace_context -------------------------------------------


@at.trace_fn("reward", "outer")
@at.accepts_trace_context
def _outer_sync(x: int) -> int:
    with at.managed_span("reward", "body"):
        return x


@at.umbrella_trace_fn("job", "outer")
@at.accepts_trace_context
async def _outer_async(x: int) -> int:
    with at.managed_span("reward", "body"):
        return x


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fn", [_outer_sync, _outer_async], ids=["sync", "async"])
def test_trace_fn_above_accepts_trace_context_starts_under_the_carrier(
    provider: str, fn: Any
) -> None:
    """The carrier is attached before the span starts: the span is the driver's child."""
    assert "trace_carrier" in inspect.signature(fn).parameters
    with capture_spans(provider=provider) as c:
        with at.umbrella_span("job", "driver"):
            carrier = at.current_trace_carrier()
        result = fn(7, trace_carrier=carrier)
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
        assert result == 7
    assert parents(c) == {"driver": None, "outer": "driver", "body": "outer"}
    assert len({s.context.trace_id for s in c.spans}) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_trace_fn_above_accepts_trace_context_without_a_carrier(provider: str) -> None:
    """Called without a carrier, the function runs traced as before."""
    with capture_spans(provider=provider) as c:
        assert _outer_sync(3) == 3
    assert parents(c) == {"outer": None, "body": "outer"}


# --- exception groups -------------------------------------------------------------------------


def _mixed() -> BaseException:
    exc: BaseException = Group("task group", [ValueError("disk full"), KeyboardInterrupt()])
    return exc


def _nested() -> BaseException:
    inner = Group("inner", [KeyboardInterrupt(), OSError("gone")])
    exc: BaseException = Group("outer", [SystemExit(1), inner])
    return exc


def _only_base() -> BaseException:
    exc: BaseException = Group("cancelled", [KeyboardInterrupt(), SystemExit(1)])
    return exc


@needs_groups
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("make", [_mixed, _nested], ids=["mixed", "nested"])
def test_group_holding_an_error_is_an_error(provider: str, make: Any) -> None:
    """A BaseExceptionGroup holding an Exception is recorded and sets ERROR, on every path."""

    @at.trace_fn("reward", "sync")
    def sync() -> None:
        raise make()

    @at.trace_fn("reward", "coro")
    async def coro() -> None:
        raise make()

    with capture_spans(provider=provider) as c:
        for call in (sync, lambda: asyncio.run(coro())):
            with pytest.raises(Group):
                call()
        for opener in (at.managed_span, at.umbrella_span):
            with pytest.raises(Group), opener("reward", "cm"):
                raise make()
    assert len(c.spans) == 4
    for span in c.spans:
        assert span.status.status_code is StatusCode.ERROR, span.name
        assert "BaseExceptionGroup" in (span.status.description or "")
        assert [e.name for e in span.events] == ["exception"]
        assert "asynctrace.cancelled" not in dict(span.attributes or {})


@needs_groups
@pytest.mark.parametrize("provider", PROVIDERS)
def test_group_of_base_exceptions_only_is_not_an_error(provider: str) -> None:
    """A group of nothing but BaseExceptions stays a cancellation."""
    with capture_spans(provider=provider) as c:
        with pytest.raises(Group), at.managed_span("reward", "cm"):
            raise _only_base()
    (span,) = c.spans
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {})["asynctrace.cancelled"] is True
    assert not span.events


# --- the end of an iteration ------------------------------------------------------------------


class _Batches:
    def __init__(self, n: int) -> None:
        self.i, self.n = 0, n

    def __iter__(self) -> _Batches:
        return self

    @at.trace_fn("data_processing")
    def __next__(self) -> int:
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i


class _ProfiledBatches(_Batches):
    @at.trace_fn("data_processing", profile=True)
    def __next__(self) -> int:
        return _Batches.__next__.__wrapped__(self)  # type: ignore[attr-defined,no-any-return]


class _Stream:
    def __init__(self, n: int) -> None:
        self.i, self.n = 0, n

    def __aiter__(self) -> _Stream:
        return self

    @at.umbrella_trace_fn("generation")
    async def __anext__(self) -> int:
        if self.i >= self.n:
            raise StopAsyncIteration
        self.i += 1
        return self.i


class _ProfiledStream(_Stream):
    @at.trace_fn("generation", profile=True)
    async def __anext__(self) -> int:
        return await _Stream.__anext__.__wrapped__(self)  # type: ignore[attr-defined,no-any-return]


async def _drain(stream: Any) -> list[int]:
    return [x async for x in stream]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("kind", ["next", "anext", "profiled_next", "profiled_anext"])
def test_end_of_iteration_ends_the_span_normally(provider: str, kind: str) -> None:
    """StopIteration / StopAsyncIteration from a traced __next__ / __anext__ is no error."""
    with capture_spans(provider=provider) as c:
        if kind == "next":
            assert list(_Batches(2)) == [1, 2]
        elif kind == "profiled_next":
            assert list(_ProfiledBatches(2)) == [1, 2]
        elif kind == "anext":
            assert asyncio.run(_drain(_Stream(2))) == [1, 2]
        else:
            assert asyncio.run(_drain(_ProfiledStream(2))) == [1, 2]
    # (a loop stall span may join them on a loaded host: the loop preempted for long)
    spans = [span for span in c.spans if span.name != "asynctrace.loop_stall"]
    assert len(spans) == 3
    for span in spans:
        assert span.status.status_code is StatusCode.UNSET
        assert not span.events


@pytest.mark.parametrize("provider", PROVIDERS)
def test_other_errors_of_a_traced_next_are_still_errors(provider: str) -> None:
    """Only the end of an iteration is exempt: another error out of a traced ``__next__``
    is an error."""

    class Broken:
        def __iter__(self) -> Broken:
            return self

        @at.trace_fn("reward", "next")
        def __next__(self) -> int:
            raise LookupError("nope")

    with capture_spans(provider=provider) as c, pytest.raises(LookupError):
        for _ in Broken():
            pass
    (span,) = c.spans
    assert span.status.status_code is StatusCode.ERROR


# --- frames per decorated call ----------------------------------------------------------------


def _frames_to(frame: FrameType | None, target: str) -> int:
    """How many frames lie between *frame*'s caller and the frame of the function *target*."""
    count = 0
    frame = frame.f_back if frame is not None else None
    while frame is not None and frame.f_code.co_name != target:
        count += 1
        frame = frame.f_back
    assert frame is not None, f"{target} not on the stack"
    return count


@pytest.mark.parametrize("provider", [*PROVIDERS, "off"])
def test_one_frame_between_caller_and_traced_function(provider: str) -> None:
    """Traced or not, a decorated call adds one frame: the wrapper."""
    seen: dict[str, int] = {}

    @at.trace_fn("reward")
    def func() -> None:
        seen["func"] = _frames_to(sys._getframe(), "func_caller")

    @at.trace_fn("reward")
    async def coro() -> None:
        seen["coro"] = _frames_to(sys._getframe(), "coro_caller")

    @at.trace_fn("reward")
    def gen() -> Iterator[int]:
        seen["gen"] = _frames_to(sys._getframe(), "gen_caller")
        yield 1

    def func_caller() -> None:
        func()

    async def coro_caller() -> None:
        await coro()

    def gen_caller() -> None:
        assert list(gen()) == [1]

    def run() -> None:
        func_caller()
        asyncio.run(coro_caller())
        gen_caller()

    if provider == "off":
        run()
    else:
        with capture_spans(provider=provider) as c:
            run()
        assert len(c.spans) == 3
    assert seen == {"func": 1, "coro": 1, "gen": 1}


# --- capture_spans() and import failures ------------------------------------------------------


def test_capture_reports_an_internal_import_failure_as_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An import failure inside asynctrace is not reported as the SDK missing."""
    monkeypatch.setitem(sys.modules, "asynctrace.export._open_spans", None)
    with pytest.raises(ImportError, match="_open_spans") as raised:
        with capture_spans(provider="sdk"):
            pass
    assert not isinstance(raised.value, MissingExtraError)
