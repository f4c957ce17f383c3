"""``nemo.lens.contrib.ray``'s helpers: carriers across a Ray call, spans around one."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace

import asynctrace

from ._context import extract_context
from ._redaction import safe_set_span_attributes
from ._spans import redacting_span

__all__ = [
    "create_linked_span",
    "extract_ray_context",
    "inject_ray_context",
    "ray_dispatch_with_context",
    "traced_remote_call",
]

F = TypeVar("F", bound=Callable[..., Any])


def inject_ray_context() -> dict[str, str]:
    """A carrier dict with the current trace context, for a Ray call.

    Example:
        >>> inject_ray_context()
        {}
    """
    return asynctrace.current_trace_carrier()


def extract_ray_context(carrier: Mapping[str, str] | None = None) -> otel_context.Context:
    """The context *carrier* holds (the current one when *carrier* is ``None``).

    Example:
        >>> extract_ray_context(None) is not None
        True
    """
    if carrier is None:
        return otel_context.get_current()
    return extract_context(carrier)


def traced_remote_call(method: F, tracer: trace.Tracer | None = None) -> F:
    """lens's Ray wrapper: run *method* in a span named after it, under the caller's trace.

    It is :func:`asynctrace.accepts_trace_context` (so both ``_otel_carrier=``
    and ``trace_carrier=`` work) plus, as in lens, an ungated span named
    ``method.__qualname__``. On an ``async def`` the result is an ``async def``
    too (Ray runs it as an async actor method) and the span covers the awaited
    body, whose spans are its children.

    Raises:
        asynctrace.ConfigurationError: *method* is a generator or async
            generator function.

    Example:
        >>> @traced_remote_call
        ... def work(x):
        ...     return x * 2
        >>> work(2, _otel_carrier={})
        4
    """
    span_name = method.__qualname__
    if inspect.isgeneratorfunction(method) or inspect.isasyncgenfunction(method):
        raise asynctrace.ConfigurationError(
            f"traced_remote_call({span_name}): generator functions are not supported (the "
            "span would end before the first item); accepted: a function or an async def"
        )
    spanned: Callable[..., Any]
    if inspect.iscoroutinefunction(method):  # an async actor method: Ray checks for this

        @functools.wraps(method)
        async def spanned_async(*args: Any, **kwargs: Any) -> Any:
            chosen = tracer if tracer is not None else asynctrace.get_tracer()
            with redacting_span(chosen, span_name):
                return await method(*args, **kwargs)

        spanned = spanned_async
    else:

        @functools.wraps(method)
        def spanned_sync(*args: Any, **kwargs: Any) -> Any:
            chosen = tracer if tracer is not None else asynctrace.get_tracer()
            with redacting_span(chosen, span_name):
                return method(*args, **kwargs)

        spanned = spanned_sync
    return asynctrace.accepts_trace_context(spanned)  # type: ignore[return-value]


def create_linked_span(
    tracer: trace.Tracer,
    name: str,
    remote_context: otel_context.Context | None = None,
    remote_carrier: Mapping[str, str] | None = None,
    **attributes: Any,
) -> trace.Span:
    """A started span *linked* to a remote span, not its child (lens's); the caller ends it.

    The link is to the span in *remote_context*, else in *remote_carrier*
    (read by :func:`extract_context`). *attributes* are filtered and
    redacted as by :func:`safe_set_span_attributes`.

    Example:
        >>> span = create_linked_span(get_tracer(), "rl.pp.stage", remote_carrier={}, stage=1)
        >>> span.end()
    """
    if remote_carrier is not None and remote_context is None:
        remote_context = extract_context(remote_carrier)
    links = []
    if remote_context is not None:
        remote = trace.get_current_span(remote_context).get_span_context()
        if remote.is_valid:
            links.append(trace.Link(remote))
    span = tracer.start_span(name, links=links)
    if attributes:
        safe_set_span_attributes(span, attributes)
    return span


def ray_dispatch_with_context(
    remote_fn: Any, *args: Any, _carrier: Mapping[str, str] | None = None, **kwargs: Any
) -> Any:
    """``remote_fn.remote(*args, _otel_carrier=carrier, **kwargs)``, as lens's does.

    Example:
        >>> class Remote:
        ...     def remote(self, x, _otel_carrier):
        ...         return x, _otel_carrier
        >>> ray_dispatch_with_context(Remote(), 1)
        (1, {})
    """
    carrier = dict(_carrier) if _carrier is not None else inject_ray_context()
    return remote_fn.remote(*args, _otel_carrier=carrier, **kwargs)
