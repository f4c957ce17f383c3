"""Decorators that trace plain, coroutine, generator and async-generator functions."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

from ._carrier_calls import accepts_trace_context
from ._decorator_checks import check_callable, check_group, check_name, check_options
from ._errors import ConfigurationError
from ._generator_wrappers import asyncgen_wrapper, generator_wrapper, wrapper_names
from ._managed_span import managed_span
from ._span_rules import LEAF, UMBRELLA, Attributes
from ._spans import umbrella_span
from ._wrappers import PREFIX, compile_wrapper, default_name, unpartial

# What the wrappers use lives in modules, read through them (``_scopes.SCOPES``,
# not a ContextVar of their own): a traced function pickled by value (cloudpickle:
# Ray, loky, Dask) then carries references to them, which pickle, and not the
# ContextVar, which does not.

__all__ = ["trace_fn", "umbrella_trace_fn"]

F = TypeVar("F", bound=Callable[..., Any])


def _umbrella(group: str, name: str, *, attributes: Attributes | None, profile: bool) -> Any:
    return umbrella_span(group, name, attributes=attributes, profile=profile)


def _profiled(
    fn: F,
    group: str,
    name: str | None,
    attributes: Attributes | None,
    open_span: Callable[..., Any],
    where: str,
) -> F:
    """*fn* with each call in a span that asks to be profiled (functions and coroutines)."""
    kind = _classified(fn)
    if inspect.isgeneratorfunction(kind) or inspect.isasyncgenfunction(kind):
        raise ConfigurationError(
            f"{where}(profile=True): {default_name(fn)!r} is a generator "
            "function; accepted: a function or a coroutine function (profile the loop that "
            "consumes it)"
        )
    is_async = inspect.iscoroutinefunction(kind)
    p = PREFIX

    def source(params: str, call: str) -> str:
        return (  # the end of an iteration leaves the block as a return does
            f"{'async ' if is_async else ''}def {p}wrapper({params}):\n"
            f"    {p}ended = None\n"
            f"    with {p}open({p}group, {p}name, attributes={p}attrs, profile=True):\n"
            f"        try:\n"
            f"            return {'await ' if is_async else ''}{p}fn({call})\n"
            f"        except {p}Stop as {p}stop:\n"
            f"            {p}ended = {p}stop\n"
            f"    try:\n"
            f"        raise {p}ended\n"
            f"    finally:\n"
            f"        {p}ended = None\n"
        )

    names = {
        "fn": fn,
        "open": open_span,
        "group": group,
        "name": name or default_name(fn),
        "attrs": dict(attributes) if attributes else None,
        "Stop": _STOP,
    }
    return compile_wrapper(fn, source, names)


def _classified(fn: Callable[..., Any]) -> Any:
    """What decides how *fn* is traced: *fn*, or the ``__call__`` of a callable object.

    A partial is looked through (as :mod:`inspect` does). An object that
    :mod:`inspect` calls a coroutine or async generator function (an
    ``AsyncMock``, say) is one. Another object that is neither a function nor
    a class is a coroutine function, a generator function and so on exactly
    when its class's ``__call__`` is one.
    """
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return fn  # says so itself (an AsyncMock, a marked function), whatever its __call__ is
    target = unpartial(fn)
    if inspect.isroutine(target) or isinstance(target, type):
        return fn
    return type(target).__call__  # callable: checked before


# The body of a traced function or coroutine function, inlined in the wrapper
# (one frame between the caller and *fn*, untraced or traced): the gate check,
# then *fn* alone or *fn* with the span current. The end of an iteration
# (StopIteration, StopAsyncIteration from a ``__next__`` or ``__anext__``) ends
# the span as a return does. Every name carries the prefix that _forwarding
# refuses in parameter names, so a parameter can shadow none of them.
_CALL_BODY = """\
    _at_on = _at_gate.enabled
    if not _at_on:
        return {aw}_at_fn({call})
    _at_checked = _at_ppg if _at_scopes.SCOPES.get().per_prompt else _at_group
    if _at_checked not in _at_on:
        if _at_gate.audit is not None:
            _at_gate.audit(_at_group)
        return {aw}_at_fn({call})
    _at_span = _at_start(_at_name, _at_group, _at_shape, _at_attrs, None)
    if _at_span is None:
        return {aw}_at_fn({call})
    _at_token = _at_attach(_at_span)
    try:
        _at_result = {aw}_at_fn({call})
    except _at_Stop:
        _at_detach(_at_token, _at_group)
        _at_finish(_at_span, None, None)
        raise
    except _at_BaseException as _at_raised:
        _at_detach(_at_token, _at_group)
        _at_finish(_at_span, _at_type(_at_raised), _at_raised)
        raise
    _at_detach(_at_token, _at_group)
    _at_finish(_at_span, None, None)
    return _at_result
"""

# The end of an iteration, which ends a traced call's span as a return does.
_STOP = (StopIteration, StopAsyncIteration)


def _decorate(fn: F, group: str, name: str | None, shape: int, attributes: Attributes | None) -> F:
    span_name = name or default_name(fn)
    attrs = dict(attributes) if attributes else None
    kind = _classified(fn)

    if inspect.isasyncgenfunction(kind):
        return asyncgen_wrapper(fn, group, span_name, shape, attrs)

    if inspect.isgeneratorfunction(kind):
        wrapper = generator_wrapper(fn, group, span_name, shape, attrs)
        code = getattr(inspect.unwrap(unpartial(kind)), "__code__", None)
        if code is not None and code.co_flags & inspect.CO_ITERABLE_COROUTINE:
            return cast("F", types.coroutine(wrapper))  # @types.coroutine: awaited
        return wrapper

    is_async = inspect.iscoroutinefunction(kind)

    def source(params: str, call: str) -> str:
        head = f"{'async ' if is_async else ''}def {PREFIX}wrapper({params}):\n"
        return head + _CALL_BODY.format(aw="await " if is_async else "", call=call)

    names = {**wrapper_names(fn, group, span_name, shape, attrs), "Stop": _STOP}
    return compile_wrapper(fn, source, names)


class _Traced(functools.partial):  # type: ignore[type-arg]
    """A traced partial or callable object: its wrapper, held by a partial of no arguments.

    The wrapper is a function compiled here, which :mod:`pickle` saves by
    reference only, and it has no module-level name to be found by. This one
    pickles as the decorator applied again to what it wraps, so standard
    pickle (``multiprocessing``, ``ProcessPoolExecutor``) sends it as
    cloudpickle would. Attributes it lacks are the wrapper's (``__code__``,
    ``__defaults__``), as they would be if the wrapper were returned itself.
    """

    __wrapped__: Callable[..., Any]
    _asynctrace_recipe: tuple[Any, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_retrace, self._asynctrace_recipe)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.func, name)


def _retrace(
    umbrella: bool,
    group: str,
    name: str | None,
    attributes: Attributes | None,
    profile: bool,
    fn: Callable[..., Any],
) -> Any:
    """Unpickle a traced partial or callable object: decorate *fn* again."""
    decorator = umbrella_trace_fn if umbrella else trace_fn
    return decorator(group, name, attributes=attributes, profile=profile)(fn)


# The code of the wrappers accepts_trace_context makes (its nested functions).
_CARRIER_CODES: Final = frozenset(
    c for c in accepts_trace_context.__code__.co_consts if isinstance(c, types.CodeType)
)


def _under_carrier(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """The function an :func:`accepts_trace_context` wrapper *fn* wraps, or ``None``.

    Only a plain function is one (a bound method shares its function's code
    but is bound to an object).
    """
    if not isinstance(fn, types.FunctionType) or fn.__code__ not in _CARRIER_CODES:
        return None
    inner = getattr(fn, "__asynctrace_wrapped__", None) or getattr(fn, "__wrapped__", None)
    return inner if callable(inner) else None


def _traced(
    fn: F, group: str, name: str | None, attributes: Attributes | None, profile: bool, shape: int
) -> F:
    """*fn* traced: a function, or for a partial or callable object a :class:`_Traced`.

    On an :func:`accepts_trace_context` wrapper, the result is the function
    inside traced, with the carrier wrapper put back around it: the carrier is
    attached before the span starts, in whichever order the two are stacked.
    """
    inner = _under_carrier(fn)
    if inner is not None:
        return cast(
            "F", accepts_trace_context(_traced(inner, group, name, attributes, profile, shape))
        )
    if profile:
        opener = managed_span if shape == LEAF else _umbrella
        where = "trace_fn" if shape == LEAF else "umbrella_trace_fn"
        wrapper = _profiled(fn, group, name, attributes, opener, where)
    else:
        wrapper = _decorate(fn, group, name, shape, attributes)
    if not isinstance(fn, functools.partial) and (inspect.isroutine(fn) or isinstance(fn, type)):
        return wrapper  # saved by reference, under the name the module gives it
    traced = _Traced(wrapper)
    functools.update_wrapper(traced, wrapper)
    traced.__wrapped__ = fn
    attrs = dict(attributes) if attributes else None
    traced._asynctrace_recipe = (shape == UMBRELLA, group, name, attrs, profile, fn)
    return cast("F", traced)


def trace_fn(
    group: str,
    name: str | None = None,
    *,
    attributes: Attributes | None = None,
    profile: bool = False,
) -> Callable[[F], F]:
    """Decorate a function so each call is a *leaf* span of *group*.

    Works on plain functions, coroutine functions (the span covers the awaited
    body), generator and async-generator functions (the span covers the whole
    iteration; no context token is held across a ``yield``; ``break`` or
    ``aclose()`` end it exactly once), partials of them, and callable objects,
    traced as their class's ``__call__`` is (an ``async def __call__`` makes
    a coroutine function). The gate is read at call time, so decorating at
    import time, before configuration, works. ``name`` defaults to the
    function's qualified name. With *profile* (functions and coroutine
    functions), a call is profiled if its step is scheduled in the
    ``profiler`` configuration.

    Raises:
        ConfigurationError: *group* is not a group name in normal form
            (lower case, no surrounding spaces), *name* is neither ``None``
            nor a non-empty str, *attributes* has an empty key or a value
            that is no OpenTelemetry attribute value, or (when decorating)
            the object is not callable, is a class (decorate its ``__init__``
            or a factory) or, with *profile*, is a generator function.

    Example:
        >>> @trace_fn("reward")
        ... async def score(sample): ...
    """
    checked = check_group(group, "trace_fn")
    name = check_name(name, "trace_fn")
    attributes = check_options(attributes, profile, "trace_fn")

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return cast("F", type(fn)(decorator(fn.__func__)))
        check_callable(fn, "trace_fn")
        return _traced(fn, checked, name, attributes, profile, LEAF)

    return decorator


def umbrella_trace_fn(
    group: str,
    name: str | None = None,
    *,
    attributes: Attributes | None = None,
    profile: bool = False,
) -> Callable[[F], F]:
    """Like :func:`trace_fn`, for an umbrella span (never bucketed).

    Raises:
        ConfigurationError: as :func:`trace_fn` does.

    Example:
        >>> @umbrella_trace_fn("job", "rl.job")
        ... def main(): ...
    """
    checked = check_group(group, "umbrella_trace_fn")
    name = check_name(name, "umbrella_trace_fn")
    attributes = check_options(attributes, profile, "umbrella_trace_fn")

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return cast("F", type(fn)(decorator(fn.__func__)))
        check_callable(fn, "umbrella_trace_fn")
        return _traced(fn, checked, name, attributes, profile, UMBRELLA)

    return decorator
