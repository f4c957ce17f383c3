"""Decorators that trace plain, coroutine, generator and async-generator functions."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator, Callable, Generator
from keyword import iskeyword
from typing import Any, TypeVar, cast

from ._errors import ConfigurationError
from ._groups import PER_PROMPT as PER_PROMPT_GROUP
from ._scopes import PER_PROMPT
from ._spans import LEAF, UMBRELLA, Attributes, attach, detach, finish, start
from ._state import GATE

__all__ = ["trace_fn", "umbrella_trace_fn"]

F = TypeVar("F", bound=Callable[..., Any])


def _check_group(group: object, where: str) -> str:
    if not isinstance(group, str) or not group.strip():
        raise ConfigurationError(f"{where}(group): expected a non-empty group name, got {group!r}")
    return group.strip().lower()


def _decorate(fn: F, group: str, name: str | None, shape: int, attributes: Attributes | None) -> F:
    span_name = name or getattr(fn, "__qualname__", None) or repr(fn)
    attrs = dict(attributes) if attributes else None

    if inspect.iscoroutinefunction(fn):

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

    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def asyncgen_wrapper(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
            agen = fn(*args, **kwargs)  # bad arguments raise here, before any span starts
            enabled = GATE.enabled
            span = None
            if enabled and (PER_PROMPT_GROUP if PER_PROMPT.get() else group) in enabled:
                span = start(span_name, group, shape, attrs, None)
            send_value: Any = None
            throw: BaseException | None = None
            try:
                while True:
                    # The span is current only while the body runs; no token
                    # is held across the yield below.
                    token = attach(span) if span is not None else None
                    try:
                        if throw is not None:
                            exc, throw = throw, None
                            item = await agen.athrow(exc)
                        else:
                            item = await agen.asend(send_value)
                    except StopAsyncIteration:
                        break
                    finally:
                        detach(token)
                    try:
                        send_value = yield item
                    except GeneratorExit:
                        token = attach(span) if span is not None else None
                        try:
                            await agen.aclose()
                        finally:
                            detach(token)
                        raise
                    except BaseException as exc:  # athrow(): forward into the body
                        throw = exc
            except BaseException as exc:
                if span is not None:
                    finish(span, type(exc), exc)
                raise
            if span is not None:
                finish(span, None, None)

        return cast("F", asyncgen_wrapper)

    if inspect.isgeneratorfunction(fn):

        def run_generator(gen: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
            enabled = GATE.enabled
            if not enabled or (PER_PROMPT_GROUP if PER_PROMPT.get() else group) not in enabled:
                return (yield from gen)
            span = start(span_name, group, shape, attrs, None)
            if span is None:
                return (yield from gen)
            return (yield from _traced_sync(gen, span))

        return _generator_wrapper(fn, run_generator)

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


_PREFIX = "_at_"


def _forwarding(fn: Callable[..., Any]) -> tuple[str, str, dict[str, Any]] | None:
    """Parameter list, forwarding call and defaults that mirror *fn*'s signature.

    A wrapper with the wrapped function's exact parameters avoids packing
    ``*args, **kwargs`` on every call, which is most of the disabled-path
    cost. ``None`` when the signature cannot be mirrored.
    """
    if "__signature__" in getattr(fn, "__dict__", {}):
        return None  # an advertised signature may not be what the code accepts
    try:
        signature = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    params: list[str] = []
    call: list[str] = []
    defaults: dict[str, Any] = {}
    kinds = inspect.Parameter
    saw_star = False
    positional_only_done = False
    for i, p in enumerate(signature.parameters.values()):
        if p.name.startswith(_PREFIX) or not p.name.isidentifier() or iskeyword(p.name):
            return None
        if p.kind is not kinds.POSITIONAL_ONLY and not positional_only_done:
            positional_only_done = True
            if params:
                params.append("/")
        default = ""
        if p.default is not kinds.empty:
            key = f"{_PREFIX}d{i}"
            defaults[key] = p.default
            default = f"={key}"
        if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD):
            params.append(p.name + default)
            call.append(p.name)
        elif p.kind is kinds.VAR_POSITIONAL:
            saw_star = True
            params.append("*" + p.name)
            call.append("*" + p.name)
        elif p.kind is kinds.KEYWORD_ONLY:
            if not saw_star:
                saw_star = True
                params.append("*")
            params.append(p.name + default)
            call.append(f"{p.name}={p.name}")
        else:  # VAR_KEYWORD
            params.append("**" + p.name)
            call.append("**" + p.name)
    if not positional_only_done and params:
        params.append("/")
    return ", ".join(params), ", ".join(call), defaults


def _gated_wrapper(fn: F, group: str, traced: Callable[..., Any], *, is_async: bool) -> F:
    """Build ``wrapper(<fn's parameters>)``: the gate check, then *fn* or *traced*."""
    forwarding = _forwarding(fn)
    params, call = "*args, **kwargs", "*args, **kwargs"
    defaults: dict[str, Any] = {}
    if forwarding is not None:
        params, call, defaults = forwarding
    awaiting = "await " if is_async else ""
    p = _PREFIX
    source = (
        f"{'async ' if is_async else ''}def {p}wrapper({params}):\n"
        f"    {p}on = {p}gate.enabled\n"
        f"    if not {p}on or ({p}ppg if {p}pp.get() else {p}group) not in {p}on:\n"
        f"        return {awaiting}{p}fn({call})\n"
        f"    return {awaiting}{p}traced({call})\n"
    )
    namespace: dict[str, Any] = {
        f"{p}gate": GATE,
        f"{p}ppg": PER_PROMPT_GROUP,
        f"{p}pp": PER_PROMPT,
        f"{p}group": group,
        f"{p}fn": fn,
        f"{p}traced": traced,
        **defaults,
    }
    filename = f"<asynctrace wrapper of {getattr(fn, '__qualname__', fn)!r}>"
    exec(compile(source, filename, "exec"), namespace)
    wrapper = namespace[f"{p}wrapper"]
    functools.update_wrapper(wrapper, fn)
    return cast("F", wrapper)


def _generator_wrapper(
    fn: F, run: Callable[[Generator[Any, Any, Any]], Generator[Any, Any, Any]]
) -> F:
    """Build the generator function ``wrapper(<fn's parameters>)``: ``yield from run(fn(...))``.

    With *fn*'s own parameters, a call with bad arguments raises at the call,
    as calling *fn* would, not at the first ``next()``; and the wrapper is
    still a generator function (frameworks such as FastAPI and pytest look).
    The gate is read, and the span started, when iteration starts.
    """
    forwarding = _forwarding(fn)
    params, call = "*args, **kwargs", "*args, **kwargs"
    defaults: dict[str, Any] = {}
    if forwarding is not None:
        params, call, defaults = forwarding
    p = _PREFIX
    source = f"def {p}wrapper({params}):\n    return (yield from {p}run({p}fn({call})))\n"
    namespace: dict[str, Any] = {f"{p}fn": fn, f"{p}run": run, **defaults}
    filename = f"<asynctrace wrapper of {getattr(fn, '__qualname__', fn)!r}>"
    exec(compile(source, filename, "exec"), namespace)
    wrapper = namespace[f"{p}wrapper"]
    functools.update_wrapper(wrapper, fn)
    return cast("F", wrapper)


def _traced_sync(gen: Generator[Any, Any, Any], span: Any) -> Generator[Any, Any, Any]:
    """Drive *gen* with *span* current only while *gen* runs.

    The context is attached around each resume and detached before the value
    is handed to the consumer, so no token is ever held across a ``yield``.
    """
    send_value: Any = None
    throw: BaseException | None = None
    try:
        while True:
            token = attach(span)
            try:
                if throw is not None:
                    exc, throw = throw, None
                    item = gen.throw(exc)
                else:
                    item = gen.send(send_value)
            finally:
                detach(token)
            try:
                send_value = yield item
            except GeneratorExit:
                token = attach(span)
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


def trace_fn(
    group: str, name: str | None = None, *, attributes: Attributes | None = None
) -> Callable[[F], F]:
    """Decorate a function so each call is a *leaf* span of *group*.

    Works on plain functions, coroutine functions (the span covers the awaited
    body), generator and async-generator functions (the span covers the whole
    iteration; no context token is held across a ``yield``; ``break`` or
    ``aclose()`` end it exactly once). The gate is read at call time, so
    decorating at import time, before configuration, works. ``name`` defaults
    to the function's qualified name.

    Example:
        >>> @trace_fn("reward")
        ... async def score(sample): ...
    """
    checked = _check_group(group, "trace_fn")

    def decorator(fn: F) -> F:
        return _decorate(fn, checked, name, LEAF, attributes)

    return decorator


def umbrella_trace_fn(
    group: str, name: str | None = None, *, attributes: Attributes | None = None
) -> Callable[[F], F]:
    """Like :func:`trace_fn`, for an umbrella span (never bucketed).

    Example:
        >>> @umbrella_trace_fn("job", "rl.job")
        ... def main(): ...
    """
    checked = _check_group(group, "umbrella_trace_fn")

    def decorator(fn: F) -> F:
        return _decorate(fn, checked, name, UMBRELLA, attributes)

    return decorator
