"""Decorator edges: advertised signatures along the way, pickling, mocks, argument checks.

Also ``wait_until``'s category check, made at the call like its other arguments'.
"""

from __future__ import annotations

import functools
import inspect
import operator
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock

import pytest
from opentelemetry import trace

import asynctrace
from asynctrace import ConfigurationError, trace_fn, umbrella_trace_fn, wait_until
from asynctrace.testing import CapturedSpans


def _advertised(fn: Any) -> Any:
    """A decorator that injects ``db`` and advertises a signature without it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("db", "injected")
        return fn(*args, **kwargs)

    signature = inspect.signature(fn)
    params = [p for p in signature.parameters.values() if p.name != "db"]
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return wrapper


@_advertised
def _handler(user: str, db: str, extra: object = None) -> tuple[str, str, object]:
    return (user, db, extra)


class _Advertising:
    """A callable object whose class advertises a signature narrower than its ``__call__``."""

    __signature__ = inspect.Signature(
        [inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return (args, kwargs)


class _Service:
    @_advertised
    def handle(self, user: str, db: str) -> tuple[str, str]:
        return (user, db)


def test_a_signature_advertised_inside_a_partial_or_a_class_is_not_mirrored(
    spans: CapturedSpans,
) -> None:
    """A partial of a function, a bound method or a callable object whose signature is
    advertised (inside, or by the class) takes the calls the real code takes, traced."""
    partial = trace_fn("reward", "partial")(functools.partial(_handler, "u"))
    assert partial(db="mine") == ("u", "mine", None)
    assert partial() == ("u", "injected", None)
    bound = trace_fn("reward", "bound")(_Service().handle)
    assert bound("u", db="mine") == ("u", "mine")
    obj = trace_fn("reward", "object")(_Advertising())
    assert obj(1, y=2) == ((1,), {"y": 2})
    assert spans.names() == ["partial", "partial", "bound", "object"]


def _scale(factor: int, x: int) -> int:
    """Multiply *x* by *factor*."""
    return factor * x


class _Scorer:
    def __init__(self, bonus: int) -> None:
        self.bonus = bonus

    def __call__(self, x: int) -> int:
        return x + self.bonus


SCALED = trace_fn("reward", attributes={"k": "v"})(functools.partial(_scale, 2))
SCORER = umbrella_trace_fn("job", "rl.scorer")(_Scorer(10))


def test_a_traced_partial_and_callable_object_pickle_with_standard_pickle(
    spans: CapturedSpans,
) -> None:
    """A traced partial or callable object pickles with :mod:`pickle` (process pools use it)
    and comes back traced as it was; its module is its function's, not ``functools``."""
    assert SCALED.__module__ == __name__
    assert SCALED.__doc__ == _scale.__doc__
    scaled, scorer = pickle.loads(pickle.dumps((SCALED, SCORER)))
    assert scaled(4) == 8
    assert scorer(1) == 11
    first, second = spans
    assert first.name == "_scale"
    assert (first.attributes or {}).get("k") == "v"
    assert second.name == "rl.scorer"
    assert (second.attributes or {}).get("asynctrace.group") == "job"


def test_a_pickled_traced_partial_is_traced_in_another_process() -> None:
    """The pickled form is the decorator applied again: a fresh interpreter loads it,
    calls it and records its spans."""
    data = pickle.dumps(
        (
            trace_fn("reward", "mul")(functools.partial(operator.mul, 3)),
            trace_fn("reward", "get")(operator.itemgetter(1)),
        )
    )
    child = (
        "import pickle, sys\n"
        "from asynctrace.testing import capture_spans\n"
        "mul, get = pickle.loads(sys.stdin.buffer.read())\n"
        "with capture_spans() as spans:\n"
        "    print(mul(5), get('ab'), spans.names())\n"
    )
    root = Path(asynctrace.__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", child],
        input=data,
        capture_output=True,
        cwd=root,
        timeout=60,
        check=True,
    )
    assert out.stdout.decode().split() == ["15", "b", "['mul',", "'get']"]


@pytest.mark.anyio
async def test_an_async_mock_is_traced_as_a_coroutine_function(spans: CapturedSpans) -> None:
    """An object ``inspect`` calls a coroutine function (``AsyncMock``) is traced as one:
    the wrapper is a coroutine function and the span covers the awaited body."""
    seen: list[bool] = []

    async def body(x: int) -> int:
        seen.append(trace.get_current_span().is_recording())
        return x

    traced = trace_fn("reward", "mocked")(AsyncMock(side_effect=body))
    assert inspect.iscoroutinefunction(traced)
    assert await traced(5) == 5
    assert seen == [True]
    assert spans.names() == ["mocked"]


@pytest.mark.parametrize("attributes", [["ab", "cd"], "ab", [1, 2], {1: "x"}, 3])
@pytest.mark.parametrize("decorator", [trace_fn, umbrella_trace_fn])
def test_attributes_must_be_a_mapping_with_str_keys(attributes: Any, decorator: Any) -> None:
    """``attributes`` that are not a mapping with str keys fail at decoration, naming it."""
    with pytest.raises(ConfigurationError, match=r"\(attributes\): expected a mapping") as info:
        decorator("reward", attributes=attributes)
    assert repr(attributes) in str(info.value)


@pytest.mark.parametrize("profile", ["yes", 0, 1, None])
def test_profile_must_be_a_bool(profile: Any) -> None:
    """``profile`` that is not a bool fails at decoration, naming it and the value."""
    with pytest.raises(ConfigurationError, match=r"trace_fn\(profile\): expected True or False"):
        trace_fn("reward", profile=profile)


@pytest.mark.parametrize("group", ["re ward", "reward!", "Reward/*", "/reward"])
def test_a_group_name_that_could_never_be_registered_is_refused(group: str) -> None:
    """A group name ``register_span_groups`` would refuse is refused at decoration too."""
    with pytest.raises(ConfigurationError, match=r"trace_fn\(group\): invalid name"):
        trace_fn(group)
    with pytest.raises(ConfigurationError, match=r"umbrella_trace_fn\(group\): invalid name"):
        umbrella_trace_fn(group)


@pytest.mark.anyio
@pytest.mark.parametrize("category", ["  bad/", "/idle", "", ["idle/x"], None])
async def test_wait_until_checks_its_category(category: Any) -> None:
    """A malformed category fails at the call, before any poll, telemetry on or off."""
    polls: list[int] = []

    def ready() -> bool:
        polls.append(1)
        return True

    with pytest.raises(ConfigurationError, match=r"wait_until\(category\)"):
        await wait_until(ready, category=category)
    assert polls == []
