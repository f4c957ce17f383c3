"""Carriers through function calls (Ray tasks and actors, process pools).

:func:`accepts_trace_context` on the receiving function takes the carrier
keyword off and runs the body under it; :func:`dispatch_with_trace_context`
adds the caller's carrier on the sending side.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import CoroutineType
from typing import Any, Final, TypeVar, cast

from ._bind_context import Unstarted
from ._carriers import _CARRIER_KWARGS, CARRIER_KWARG, current_trace_carrier
from ._errors import ConfigurationError
from ._remote_context import remote_trace_context

__all__ = ["accepts_trace_context", "dispatch_with_trace_context"]

F = TypeVar("F", bound=Callable[..., Any])
_CoroutineType: Final = CoroutineType


def _signature_with_carrier(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    missing = [name for name in _CARRIER_KWARGS if name not in signature.parameters]
    if not missing:
        return signature
    extra = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation="Mapping[str, str] | None",
        )
        for name in missing
    ]
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        params[len(params) - 1 : len(params) - 1] = extra
    else:
        params.extend(extra)
    return signature.replace(parameters=params)


def _no_carrier(carrier: object) -> bool:
    """Whether *carrier* holds nothing to read: ``None``, empty, or an object whose truth
    value raises (a numpy array, say), which is not a carrier either."""
    try:
        return not carrier
    except Exception:
        return True


def _carrier_of(kwargs: dict[str, Any], declared: frozenset[str]) -> Any:
    """The carrier passed under either keyword; a keyword *fn* declares stays in *kwargs*."""
    carrier = None
    for name in _CARRIER_KWARGS:
        if name in kwargs:
            value = kwargs[name] if name in declared else kwargs.pop(name)
            if _no_carrier(carrier):
                carrier = value
    return carrier


def accepts_trace_context(fn: F) -> F:
    """Let *fn* accept a ``trace_carrier=`` keyword and run under that context.

    Works on functions and methods, sync and async. The wrapper's
    ``inspect.signature`` shows the extra keyword, so signature checks such as
    Ray's accept the call. Called without a carrier, *fn* runs as before.
    nemo-lens's keyword, ``_otel_carrier=``, is accepted as well, so a caller
    still on lens (``ray_dispatch_with_context``) reaches an asynctrace actor
    during a migration; when both are given, the first non-empty one of
    ``trace_carrier`` and ``_otel_carrier`` wins.

    Example:
        >>> @accepts_trace_context
        ... def run_rollouts(batch):
        ...     return len(batch)
        >>> run_rollouts([1, 2], trace_carrier={})
        2
        >>> run_rollouts([1, 2], _otel_carrier={})
        2
    """
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ConfigurationError(
            f"accepts_trace_context({fn.__qualname__}): generator functions are not supported; "
            "open remote_trace_context(carrier) inside the generator instead"
        )
    # keywords the function declares itself are passed through
    declared: frozenset[str] = frozenset()
    try:
        declared = frozenset(inspect.signature(fn).parameters) & frozenset(_CARRIER_KWARGS)
    except (TypeError, ValueError):
        pass

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            carrier = _carrier_of(kwargs, declared)
            if _no_carrier(carrier):
                return await fn(*args, **kwargs)
            with remote_trace_context(carrier):
                return await fn(*args, **kwargs)

        wrapper: Callable[..., Any] = async_wrapper
    else:

        @functools.wraps(fn)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            carrier = _carrier_of(kwargs, declared)
            if _no_carrier(carrier):
                return fn(*args, **kwargs)
            remote = remote_trace_context(carrier)
            with remote:
                result = fn(*args, **kwargs)
            # An object with ``async def __call__``, or an async def under a decorator
            # that is not async-aware: its body runs when awaited, under the carrier too.
            if result.__class__ is _CoroutineType:
                return _awaited_in(remote, result)
            return result

        wrapper = sync_wrapper
    signature = _signature_with_carrier(fn)
    if signature is not None:
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        # Ray (and others) call inspect.unwrap() before reading a signature;
        # following __wrapped__ would hide the extra keyword, so keep the
        # original under another name.
        wrapper.__asynctrace_wrapped__ = fn  # type: ignore[attr-defined]
        del wrapper.__wrapped__  # type: ignore[attr-defined]
    return cast("F", wrapper)


def _awaited_in(remote: remote_trace_context, body: Any) -> Any:
    """A coroutine that awaits *body* inside *remote* (entered again, for the await).

    Named as *body* (a task's repr, a stall span's coroutine name). Closed
    before it starts (a task cancelled at once), it closes *body* too, which
    would otherwise warn that it was never awaited (as ``bind_context``'s).
    """
    wrapped: CoroutineType[Any, Any, Any] = cast("Any", _in_remote(remote, Unstarted(body)))
    wrapped.__name__, wrapped.__qualname__ = body.__name__, body.__qualname__
    return wrapped


async def _in_remote(remote: remote_trace_context, pending: Any) -> Any:
    body = pending.coro  # taken here only, once
    pending.coro = None
    with remote:
        return await body


def dispatch_with_trace_context(
    fn: Callable[..., Any], /, *args: Any, carrier_kwarg: str = CARRIER_KWARG, **kwargs: Any
) -> Any:
    """Call ``fn(*args, trace_carrier=current_trace_carrier(), **kwargs)``.

    The call-site half of :func:`accepts_trace_context`, e.g. for
    ``actor.method.remote``. ``carrier_kwarg="_otel_carrier"`` sends the
    carrier under nemo-lens's keyword instead, for an actor still wrapped by
    lens's ``traced_remote_call``.

    Example:
        >>> dispatch_with_trace_context(lambda x, trace_carrier: (x, trace_carrier), 1)
        (1, {})
        >>> dispatch_with_trace_context(
        ...     lambda x, _otel_carrier: (x, _otel_carrier), 1, carrier_kwarg="_otel_carrier"
        ... )
        (1, {})
    """
    if carrier_kwarg not in _CARRIER_KWARGS:
        raise ConfigurationError(
            f"dispatch_with_trace_context: carrier_kwarg={carrier_kwarg!r} is not accepted; "
            f"use one of {', '.join(map(repr, _CARRIER_KWARGS))}"
        )
    kwargs[carrier_kwarg] = current_trace_carrier()
    return fn(*args, **kwargs)
