"""The TraceConfig form: aiohttp's tracing signals start, end and fail a request's span."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import aiohttp
from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY as _SUPPRESS_HTTP
from opentelemetry.trace import Span

from asynctrace_contrib._http import DEFAULT_SECRET_KEYS

from ._options import Options, RequestHook
from ._propagation import HANDLED, suppressed
from ._requests import Requests

__all__ = ["trace_config"]


def _make_trace_config(options: Options) -> aiohttp.TraceConfig:
    requests = Requests(options)

    async def on_request_start(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        ctx.asynctrace_token = None
        if suppressed():
            ctx.asynctrace_span = None
            return
        ctx.asynctrace_span = requests.begin(
            params.method.upper(), params.url, params.headers, params
        )
        # This request is handled: the trace configs after ours (OpenTelemetry's
        # aiohttp instrumentation) stand aside, as OpenTelemetry's own layers do. The
        # key stays set until the request ends, through the client middlewares: a
        # request one of them makes is still handled by a layer of ours (HANDLED).
        ctx.asynctrace_token = otel_context.attach(otel_context.set_value(_SUPPRESS_HTTP, HANDLED))

    async def on_request_end(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        _release(ctx)
        span: Span | None = getattr(ctx, "asynctrace_span", None)
        if span is not None:
            ctx.asynctrace_span = None
            requests.response(span, params.response, params)

    async def on_request_exception(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        _release(ctx)
        span: Span | None = getattr(ctx, "asynctrace_span", None)
        if span is not None:
            ctx.asynctrace_span = None
            requests.failed(span, params.exception, params.url, params.headers)

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_request_start)
    config.on_request_end.append(on_request_end)
    config.on_request_exception.append(on_request_exception)
    config.asynctrace = True  # type: ignore[attr-defined]  # marks ours
    return config


def _release(ctx: SimpleNamespace) -> None:
    """Lift the suppression that on_request_start set for this request."""
    token = getattr(ctx, "asynctrace_token", None)
    if token is not None:
        ctx.asynctrace_token = None
        try:
            otel_context.detach(token)
        except Exception:  # pragma: no cover - detach only logs
            pass


def trace_config(
    *,
    span_name: Callable[[str, Any], str] | None = None,
    secret_keys: Iterable[str] = DEFAULT_SECRET_KEYS,
    record_request_headers: Iterable[str] = (),
    record_response_headers: Iterable[str] = (),
    request_hook: RequestHook | None = None,
    response_hook: RequestHook | None = None,
) -> aiohttp.TraceConfig:
    """An ``aiohttp.TraceConfig`` that propagates context and records client spans.

    Args:
        span_name: ``(method, params) -> name``; default ``"{METHOD}"`` (``"HTTP"``
            for a method not known: see :mod:`._http_values`). One that raises
            or returns no ``str`` gives the default; logged once.
        secret_keys: query keys whose values are redacted in ``url.full``
            (case-insensitive substrings; the default includes every name
            :func:`asynctrace.is_credential_key` treats as a credential); they
            are secret-like names in any exception text recorded afterwards
            too, process-wide.
        record_request_headers: request header names (a list of str) recorded
            as ``http.request.header.<name>``; none by default. A credential
            header's values (``Authorization``, ``Cookie``, ``X-Api-Key``...)
            are recorded as ``REDACTED``.
        record_response_headers: same for ``http.response.header.<name>``.
        request_hook: ``(span, TraceRequestStartParams)``, called for recorded spans.
        response_hook: ``(span, TraceRequestEndParams)``, called for recorded spans.
            A hook that raises is logged once and ignored.

    Raises:
        asynctrace.ConfigurationError: an option is not of the kind above (a
            bare string for a list of names, a name that is not a str, a hook
            that is not callable); the message names it.

    Example:
        >>> import aiohttp
        >>> async def fetch(url):
        ...     async with aiohttp.ClientSession(trace_configs=[trace_config()]) as session:
        ...         async with session.get(url) as response:
        ...             return await response.text()
    """
    return _make_trace_config(Options(**locals()))  # exactly the keyword arguments above
