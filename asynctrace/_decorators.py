"""Decorators that trace plain, coroutine, generator and async-generator functions."""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Callable, Generator, Mapping
from typing import Any, TypeVar, cast

from . import _scopes
from ._errors import ConfigurationError
from ._groups import PER_PROMPT as PER_PROMPT_GROUP
from ._groups import validate_name
from ._managed_span import managed_span
from ._span_context import attach, attach_context, current_context, detach, finish
from ._span_rules import LEAF, UMBRELLA, Attributes
from ._span_start import start
from ._spans import umbrella_span
from ._state import GATE
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
        return (
            f"{'async ' if is_async else ''}def {p}wrapper({params}):\n"
            f"    with {p}open({p}group, {p}name, attributes={p}attrs, profile=True):\n"
            f"        return {'await ' if is_async else ''}{p}fn({call})\n"
        )

    names = {
        "fn": fn,
        "open": open_span,
        "group": group,
        "name": name or default_name(fn),
        "attrs": dict(attributes) if attributes else None,
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


def _check_callable(fn: object, where: str) -> None:
    if not callable(fn):
        raise ConfigurationError(
            f"{where}: expected a function, a method or another callable to decorate, "
            f"got a {type(fn).__name__}"
        )
    if isinstance(fn, type):  # the wrapper, a function, would replace the class itself
        raise ConfigurationError(
            f"{where}: {fn.__qualname__!r} is a class; accepted: a function, a method or "
            "another callable (decorate the class's __init__, or a factory function that "
            "builds it)"
        )


def _check_group(group: object, where: str) -> str:
    """The group's name, in the normal form ``register_span_groups`` requires: the span
    helpers compare names exactly, so a decorator takes the same names they do."""
    if not isinstance(group, str) or not group.strip():
        raise ConfigurationError(f"{where}(group): expected a non-empty group name, got {group!r}")
    name = validate_name(group, f"{where}(group)")
    if name != group:
        raise ConfigurationError(
            f"{where}(group): group name {group!r} is not in normal form; use {name!r} "
            "(lower case, no surrounding spaces), as register_span_groups requires"
        )
    return name


_SCALARS = (bool, str, int, float)
_ACCEPTED_VALUES = "a str, bool, int or float, or a list or tuple of one of those types"


def _check_attribute(key: str, value: object, where: str) -> None:
    """One decorator attribute, checked as OpenTelemetry would at every call."""
    if not key:
        raise ConfigurationError(
            f"{where}(attributes): attribute names must be non-empty strings, got {key!r}"
        )
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, (list, tuple)):
        kinds = {type(item) for item in value if item is not None}
        if len(kinds) <= 1 and kinds <= set(_SCALARS):
            return
        raise ConfigurationError(
            f"{where}(attributes): {key!r} has a {type(value).__name__} of "
            f"{', '.join(sorted(kind.__name__ for kind in kinds))}; accepted: {_ACCEPTED_VALUES}"
        )
    raise ConfigurationError(
        f"{where}(attributes): {key!r} has a value of type {type(value).__name__}; "
        f"accepted: {_ACCEPTED_VALUES}"
    )


def _check_options(attributes: object, profile: object, where: str) -> Attributes | None:
    """*attributes* (a mapping of names to attribute values, or None) and *profile* (a
    bool), checked once at decoration rather than warned about at every call."""
    if attributes is not None:
        if not (
            isinstance(attributes, Mapping) and all(isinstance(key, str) for key in attributes)
        ):
            raise ConfigurationError(
                f"{where}(attributes): expected a mapping of attribute names (str) to values, "
                f"or None; got {attributes!r}"
            )
        for key, value in attributes.items():
            _check_attribute(key, value, where)
    if not isinstance(profile, bool):
        raise ConfigurationError(f"{where}(profile): expected True or False, got {profile!r}")
    return attributes


def _check_name(name: object, where: str) -> str | None:
    if name is None or (isinstance(name, str) and name.strip()):
        return name
    raise ConfigurationError(
        f"{where}(name): expected a non-empty span name (a str), or None for the "
        f"function's qualified name; got {name!r}"
    )


def _decorate(fn: F, group: str, name: str | None, shape: int, attributes: Attributes | None) -> F:
    span_name = name or default_name(fn)
    attrs = dict(attributes) if attributes else None
    kind = _classified(fn)

    if inspect.iscoroutinefunction(kind):

        async def traced_coroutine(*args: Any, **kwargs: Any) -> Any:
            span = start(span_name, group, shape, attrs, None)
            if span is None:
                return await fn(*args, **kwargs)
            token = attach(span)
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                detach(token)
                finish(span, type(exc), exc)
                raise
            detach(token)
            finish(span, None, None)
            return result

        return _gated_wrapper(fn, group, traced_coroutine, is_async=True)

    if inspect.isasyncgenfunction(kind):
        return _asyncgen_wrapper(fn, group, span_name, shape, attrs)

    if inspect.isgeneratorfunction(kind):

        def run_generator(gen: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
            enabled = GATE.enabled
            if not enabled:
                return (yield from gen)
            if (checked := PER_PROMPT_GROUP if _scopes.SCOPES.get().per_prompt else group) not in (
                enabled
            ):
                if GATE.audit is not None:
                    GATE.audit(checked)
                return (yield from gen)
            span = start(span_name, group, shape, attrs, None)
            if span is None:
                return (yield from gen)
            return (yield from _traced_sync(gen, span))

        wrapper = _generator_wrapper(fn, run_generator)
        code = getattr(inspect.unwrap(unpartial(kind)), "__code__", None)
        if code is not None and code.co_flags & inspect.CO_ITERABLE_COROUTINE:
            return cast("F", types.coroutine(wrapper))  # @types.coroutine: awaited
        return wrapper

    def traced_call(*args: Any, **kwargs: Any) -> Any:
        span = start(span_name, group, shape, attrs, None)
        if span is None:
            return fn(*args, **kwargs)
        token = attach(span)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            detach(token)
            finish(span, type(exc), exc)
            raise
        detach(token)
        finish(span, None, None)
        return result

    return _gated_wrapper(fn, group, traced_call, is_async=False)


def _gated_wrapper(fn: F, group: str, traced: Callable[..., Any], *, is_async: bool) -> F:
    """Build ``wrapper(<fn's parameters>)``: the gate check, then *fn* or *traced*."""
    awaiting = "await " if is_async else ""
    p = PREFIX

    def source(params: str, call: str) -> str:
        return (
            f"{'async ' if is_async else ''}def {p}wrapper({params}):\n"
            f"    {p}on = {p}gate.enabled\n"
            f"    if not {p}on:\n"
            f"        return {awaiting}{p}fn({call})\n"
            f"    {p}checked = {p}ppg if {p}scopes.SCOPES.get().per_prompt else {p}group\n"
            f"    if {p}checked not in {p}on:\n"
            f"        if {p}gate.audit is not None:\n"
            f"            {p}gate.audit({p}checked)\n"
            f"        return {awaiting}{p}fn({call})\n"
            f"    return {awaiting}{p}traced({call})\n"
        )

    names = {"gate": GATE, "ppg": PER_PROMPT_GROUP, "scopes": _scopes, "group": group}
    return compile_wrapper(fn, source, {**names, "fn": fn, "traced": traced})


def _generator_wrapper(
    fn: F, run: Callable[[Generator[Any, Any, Any]], Generator[Any, Any, Any]]
) -> F:
    """Build the generator function ``wrapper(<fn's parameters>)``: ``yield from run(fn(...))``.

    With *fn*'s own parameters, a call with bad arguments raises at the call,
    as calling *fn* would, not at the first ``next()``; and the wrapper is
    still a generator function (frameworks such as FastAPI and pytest look).
    The gate is read, and the span started, when iteration starts.
    """
    p = PREFIX

    def source(params: str, call: str) -> str:
        return f"def {p}wrapper({params}):\n    return (yield from {p}run({p}fn({call})))\n"

    return compile_wrapper(fn, source, {"fn": fn, "run": run})


# The body of a traced async generator. Async generators cannot ``yield from``,
# so the driving loop is the wrapper's own body. Every name it uses, locals and
# builtins alike, carries the prefix that _forwarding refuses in parameter
# names, so a parameter (``type``, say) can shadow none of them.
_ASYNCGEN_BODY = """\
    _at_agen = _at_fn({call})
    # The first asend made with the event loop's hooks off: the loop then knows
    # only this wrapper, whose closing closes *fn*'s generator, and never closes
    # that generator itself, concurrently (as it would at shutdown_asyncgens).
    _at_hooks = _at_get_hooks()
    _at_set_hooks(None, None)
    try:
        _at_next = _at_agen.asend(None)
    finally:
        _at_set_hooks(*_at_hooks)
    _at_on = _at_gate.enabled
    _at_span = None
    if _at_on:
        _at_checked = _at_ppg if _at_scopes.SCOPES.get().per_prompt else _at_group
        if _at_checked in _at_on:
            _at_span = _at_start(_at_name, _at_group, _at_shape, _at_attrs, None)
        elif _at_gate.audit is not None:
            _at_gate.audit(_at_checked)
    _at_body = None
    _at_send = None
    _at_throw = None
    try:
        while True:
            # The span is current only while the body runs; no token is held
            # across the yield below. The body's own context (a span it opened
            # across a yield) is kept from one resume to the next.
            _at_token = None
            if _at_span is not None:
                _at_token = _at_attach(_at_span) if _at_body is None else _at_resume(_at_body)
            try:
                if _at_throw is not None:
                    _at_exc, _at_throw = _at_throw, None
                    _at_item = await _at_agen.athrow(_at_exc)
                elif _at_next is not None:
                    _at_item = await _at_next
                    _at_next = None
                else:
                    _at_item = await _at_agen.asend(_at_send)
            except _at_StopAsyncIteration:
                break
            finally:
                if _at_token is not None:
                    _at_body = _at_current()
                    _at_detach(_at_token)
            try:
                _at_send = yield _at_item
            except _at_GeneratorExit:
                _at_token = None
                if _at_span is not None:
                    _at_token = _at_attach(_at_span) if _at_body is None else _at_resume(_at_body)
                try:
                    await _at_agen.aclose()
                finally:
                    _at_detach(_at_token)
                raise
            except _at_BaseException as _at_raised:  # athrow(): forward into the body
                _at_throw = _at_raised
    except _at_BaseException as _at_raised:
        if _at_span is not None:
            _at_finish(_at_span, _at_type(_at_raised), _at_raised)
        raise
    if _at_span is not None:
        _at_finish(_at_span, None, None)
"""


def _asyncgen_wrapper(
    fn: F, group: str, span_name: str, shape: int, attrs: dict[str, Any] | None
) -> F:
    """Build the async generator function ``wrapper(<fn's parameters>)`` around *fn*.

    With *fn*'s own parameters, a call with bad arguments raises at the call,
    as calling *fn* would, before any span starts; the wrapper is still an
    async generator function. The gate is read, and the span started, when
    iteration starts; ``asend``, ``athrow`` and ``aclose`` reach *fn*'s body.
    """

    def source(params: str, call: str) -> str:
        return f"async def {PREFIX}wrapper({params}):\n" + _ASYNCGEN_BODY.format(call=call)

    names = {
        "fn": fn,
        "gate": GATE,
        "ppg": PER_PROMPT_GROUP,
        "scopes": _scopes,
        "group": group,
        "name": span_name,
        "shape": shape,
        "attrs": attrs,
        "start": start,
        "attach": attach,
        "resume": attach_context,
        "current": current_context,
        "detach": detach,
        "finish": finish,
        "get_hooks": sys.get_asyncgen_hooks,
        "set_hooks": sys.set_asyncgen_hooks,
        "type": type,
        "BaseException": BaseException,
        "GeneratorExit": GeneratorExit,
        "StopAsyncIteration": StopAsyncIteration,
    }
    return compile_wrapper(fn, source, names)


def _traced_sync(gen: Generator[Any, Any, Any], span: Any) -> Generator[Any, Any, Any]:
    """Drive *gen* with *span* current only while *gen* runs.

    The context is attached around each resume and detached before the value
    is handed to the consumer, so no token is ever held across a ``yield``.
    What the body made current itself (a span it opened across a ``yield``)
    is current again when it resumes, as in a generator without the decorator.
    """
    send_value: Any = None
    throw: BaseException | None = None
    body: Any = None  # the body's context when it last yielded
    try:
        while True:
            token = attach(span) if body is None else attach_context(body)
            try:
                if throw is not None:
                    exc, throw = throw, None
                    item = gen.throw(exc)
                else:
                    item = gen.send(send_value)
            finally:
                if token is not None:
                    body = current_context()
                detach(token)
            try:
                send_value = yield item
            except GeneratorExit:
                token = attach(span) if body is None else attach_context(body)
                try:
                    gen.close()
                finally:
                    detach(token)
                raise
            except BaseException as exc:  # forwarded into the traced generator
                throw = exc
    except StopIteration as stop:
        finish(span, None, None)
        return stop.value
    except BaseException as exc:
        finish(span, type(exc), exc)
        raise


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


def _traced(
    fn: F, group: str, name: str | None, attributes: Attributes | None, profile: bool, shape: int
) -> F:
    """*fn* traced: a function, or for a partial or callable object a :class:`_Traced`."""
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
    checked = _check_group(group, "trace_fn")
    name = _check_name(name, "trace_fn")
    attributes = _check_options(attributes, profile, "trace_fn")

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return cast("F", type(fn)(decorator(fn.__func__)))
        _check_callable(fn, "trace_fn")
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
    checked = _check_group(group, "umbrella_trace_fn")
    name = _check_name(name, "umbrella_trace_fn")
    attributes = _check_options(attributes, profile, "umbrella_trace_fn")

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return cast("F", type(fn)(decorator(fn.__func__)))
        _check_callable(fn, "umbrella_trace_fn")
        return _traced(fn, checked, name, attributes, profile, UMBRELLA)

    return decorator
