"""The client middleware form (aiohttp >= 3.12): one call per request."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import aiohttp

from asynctrace_contrib._http import DEFAULT_SECRET_KEYS

from ._options import Options, RequestHook
from ._requests import Requests
from ._resends import PENDING as _PENDING
from ._resends import attempted, count_resend

__all__ = ["client_middleware"]

_INJECTED = "_asynctrace_traceparent"  # the traceparent this layer set on a ClientRequest


def _make_middleware(options: Options) -> Any:
    requests = Requests(options, count_resends=True)

    async def asynctrace_middleware(request: Any, handler: Any) -> aiohttp.ClientResponse:
        headers = request.headers
        span = requests.begin(
            request.method, request.url, headers, request, getattr(request, _INJECTED, None)
        )
        if span is None:
            response: aiohttp.ClientResponse = await handler(request)
            return response
        # Remembered on the request (as _INJECTED names it, without setattr's call): a
        # retry middleware outside sends it again.
        request._asynctrace_traceparent = headers.get("traceparent")
        if _PENDING:  # an attempt failed or was redirected: this may be its call's resend
            count_resend(span, request)
        try:
            response = await handler(request)
        except BaseException as exc:
            requests.failed(span, exc, request.url, request.headers)
            if isinstance(exc, Exception):  # aiohttp, or a middleware outside, may resend it
                attempted(request)
            raise
        requests.response(span, response, request)
        return response

    asynctrace_middleware.asynctrace = True  # type: ignore[attr-defined]  # marks ours
    return asynctrace_middleware


def client_middleware(
    *,
    span_name: Callable[[str, Any], str] | None = None,
    secret_keys: Iterable[str] = DEFAULT_SECRET_KEYS,
    record_request_headers: Iterable[str] = (),
    record_response_headers: Iterable[str] = (),
    request_hook: RequestHook | None = None,
    response_hook: RequestHook | None = None,
) -> Any:
    """An aiohttp client middleware (aiohttp >= 3.12) doing what :func:`trace_config` does.

    The cheaper of the two forms: aiohttp calls one middleware per request,
    where a ``TraceConfig`` makes it emit every tracing signal. Same arguments
    as :func:`trace_config`; hooks receive the ``ClientRequest``.

    Example:
        >>> import aiohttp
        >>> async def fetch(url):
        ...     async with aiohttp.ClientSession(middlewares=(client_middleware(),)) as session:
        ...         async with session.get(url) as response:
        ...             return await response.text()
    """
    return _make_middleware(Options(**locals()))  # exactly the keyword arguments above
