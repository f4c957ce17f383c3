"""The session decorators: each call of a function in a new session, or one phase execution.

Callables are classified as the span decorators classify them (a callable
object by its class's ``__call__``, a partial by what it wraps), and what a
wrapper cannot time is refused when decorating.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ._decorator_checks import check_callable
from ._decorators import _classified
from ._errors import ConfigurationError
from ._phases import check_phase
from ._session_phase import trace_session_phase
from ._sessions import session_scope
from ._wrappers import default_name

__all__ = ["session_context", "trace_session"]

F = TypeVar("F", bound=Callable[..., Any])


def _is_coroutine(fn: Callable[..., Any], where: str, instead: str) -> bool:
    """Whether calls of *fn* are to be awaited, as the span decorators decide it (a
    callable object by its class's ``__call__``, a partial by what it wraps).

    A :class:`ConfigurationError` for what a wrapper cannot time: a class or a
    non-callable, and a (async) generator function, whose wrapper would cover
    the making of the generator, not its body.
    """
    check_callable(fn, where)
    kind = _classified(fn)
    if inspect.isgeneratorfunction(kind) or inspect.isasyncgenfunction(kind):
        raise ConfigurationError(
            f"{where}: {default_name(fn)!r} is a generator function; accepted: a function "
            f"or a coroutine function (for a generator, {instead})"
        )
    return inspect.iscoroutinefunction(kind)


def session_context() -> Callable[[F], F]:
    """Decorator: each call of the function runs in a new :class:`session_scope`.

    Works on plain and coroutine functions, on callable objects (as their
    class's ``__call__`` is: an ``async def __call__`` is awaited inside), and
    above ``@staticmethod`` or ``@classmethod`` (the function inside is
    wrapped, and the method kind kept).

    Raises:
        ConfigurationError: the function is a generator or async generator
            function (the wrapper would cover only the making of the generator),
            or a class, or not callable.

    Example:
        >>> @session_context()
        ... async def collect_sample(engine, request): ...
    """

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return cast("F", type(fn)(decorator(fn.__func__)))
        if _is_coroutine(fn, "session_context()", "open session_scope() inside its body"):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with session_scope():
                    return await fn(*args, **kwargs)

            return cast("F", async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with session_scope():
                return fn(*args, **kwargs)

        return cast("F", wrapper)

    return decorator


def trace_session(phase: str) -> Callable[[F], F]:
    """Decorator: every call of the function is one execution of *phase*.

    Works on plain and coroutine functions, on callable objects (as their
    class's ``__call__`` is), and above ``@staticmethod`` or ``@classmethod``
    (the function inside is wrapped, and the method kind kept); the phase is
    validated when decorating.

    Raises:
        ConfigurationError: *phase* is not registered, or the function is a
            generator or async generator function (the wrapper would time only
            the making of the generator), or a class, or not callable.

    Example:
        >>> @trace_session("reward")
        ... async def compute_reward(response): ...
    """
    check_phase(phase)

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return cast("F", type(fn)(decorator(fn.__func__)))
        if _is_coroutine(
            fn, f"trace_session({phase!r})", "open trace_session_phase() inside its body"
        ):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with trace_session_phase(phase):
                    return await fn(*args, **kwargs)

            return cast("F", async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with trace_session_phase(phase):
                return fn(*args, **kwargs)

        return cast("F", wrapper)

    return decorator
