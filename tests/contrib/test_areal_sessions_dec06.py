"""asynctrace_contrib.areal's session decorators classify what they wrap as asynctrace's
own do: a callable object by its class's ``__call__``, static and class methods by the
function inside; what they cannot time is refused. No AReaL needed."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from asynctrace_contrib import areal

import asynctrace as at


class _Reward:
    def __init__(self) -> None:
        self.finished = False

    async def __call__(self, value: int) -> int:
        await asyncio.sleep(0)
        self.finished = True
        return value


class _Generates:
    def __call__(self) -> Iterator[int]:
        yield 1


class _AsyncGenerates:
    async def __call__(self) -> AsyncIterator[int]:
        yield 1


def _generates() -> Iterator[int]:
    yield 1


def _decorators() -> list[Any]:
    return [areal.session_context(), areal.trace_session("reward")]


def test_an_object_with_an_async_call_gets_the_awaiting_wrapper() -> None:
    for decorator in _decorators():
        reward = _Reward()
        wrapped = decorator(reward)
        assert inspect.iscoroutinefunction(wrapped)
        assert asyncio.run(wrapped(3)) == 3
        assert reward.finished  # the wrapper awaited the body, inside its scope


@pytest.mark.parametrize("target", [_Generates(), _AsyncGenerates(), _generates, _Reward, 5])
def test_what_cannot_be_timed_is_refused(target: Any) -> None:
    for decorator in _decorators():
        with pytest.raises(at.ConfigurationError):
            decorator(target)


class _Env:
    @areal.trace_session("reward")
    @staticmethod
    async def static_async(x: int) -> int:
        await asyncio.sleep(0)
        return x

    @areal.session_context()
    @staticmethod
    def static_sync(x: int) -> int:
        return x

    @areal.session_context()
    @classmethod
    async def class_async(cls, x: int) -> tuple[type, int]:
        await asyncio.sleep(0)
        return cls, x

    @areal.trace_session("reward")
    @classmethod
    def class_sync(cls, x: int) -> tuple[type, int]:
        return cls, x


def test_static_and_class_methods_keep_their_kind() -> None:
    assert isinstance(_Env.__dict__["static_async"], staticmethod)
    assert isinstance(_Env.__dict__["class_async"], classmethod)
    assert inspect.iscoroutinefunction(_Env.static_async)
    assert inspect.iscoroutinefunction(_Env().class_async)
    env = _Env()
    assert asyncio.run(env.static_async(1)) == 1
    assert env.static_sync(2) == 2
    assert asyncio.run(env.class_async(3)) == (_Env, 3)
    assert _Env.class_sync(4) == (_Env, 4)
    for name in ("static_async", "static_sync", "class_async", "class_sync"):
        inner = _Env.__dict__[name].__func__
        assert hasattr(inner, "__wrapped__"), name  # the function inside was wrapped


def test_a_refused_partial_is_named_by_what_it_wraps() -> None:
    for decorator in _decorators():
        with pytest.raises(at.ConfigurationError, match="'_generates' is a generator"):
            decorator(functools.partial(_generates))
