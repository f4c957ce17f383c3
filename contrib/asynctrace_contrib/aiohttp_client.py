"""aiohttp client instrumentation: ``traceparent`` on every request, a span per request.

Every request carries the ambient W3C context (``traceparent``/``tracestate``),
whether or not a span is recorded, so a server downstream joins the caller's
trace. A CLIENT span per request is recorded only while the ``per_prompt``
group is enabled (checked per request, before any attribute work): HTTP calls
scale with prompts x turns x tool calls, which is the volume ``per_prompt``
exists to fence off. The span covers the response body: it ends when the body
has been read, or when the response is released or closed.

Two ways in, both reversible and without side effects on import:

- :func:`trace_config` for one session:
  ``aiohttp.ClientSession(trace_configs=[trace_config()])``;
- :func:`instrument_aiohttp_client` for every session created afterwards
  (sessions created before it are not covered); undone by
  :func:`uninstrument_aiohttp_client`.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

import asynctrace

from ._http import DEFAULT_SECRET_KEYS, SecretKeys, header_attribute, redact_url

try:
    import aiohttp
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise asynctrace.MissingExtraError("aiohttp", "aiohttp") from exc

__all__ = [
    "client_middleware",
    "instrument_aiohttp_client",
    "trace_config",
    "uninstrument_aiohttp_client",
]

logger = logging.getLogger("asynctrace")

GATE_GROUP = "per_prompt"
_HAS_MIDDLEWARES = "middlewares" in inspect.signature(aiohttp.ClientSession.__init__).parameters
RequestHook = Callable[[Span, Any], None]


class _Options:
    """What one trace config records."""

    __slots__ = (
        "record_request_headers",
        "record_response_headers",
        "request_hook",
        "response_hook",
        "secret_keys",
        "span_name",
        "warned",
    )

    def __init__(
        self,
        *,
        span_name: Callable[[str, Any], str] | None = None,
        secret_keys: Iterable[str] = DEFAULT_SECRET_KEYS,
        record_request_headers: Iterable[str] = (),
        record_response_headers: Iterable[str] = (),
        request_hook: RequestHook | None = None,
        response_hook: RequestHook | None = None,
    ) -> None:
        self.span_name = span_name
        self.secret_keys = SecretKeys(secret_keys)
        self.record_request_headers = tuple(record_request_headers)
        self.record_response_headers = tuple(record_response_headers)
        self.request_hook = request_hook
        self.response_hook = response_hook
        self.warned: set[str] = set()


def _run_hook(
    options: _Options, name: str, hook: RequestHook | None, span: Span, params: Any
) -> None:
    """Call a user hook; a failure is logged once per hook of this config, never raised."""
    if hook is None:
        return
    try:
        hook(span, params)
    except Exception:
        if name not in options.warned:
            options.warned.add(name)
            logger.warning("asynctrace: the aiohttp %s raised; ignored", name, exc_info=True)


def _inject(headers: Any, carrier: dict[str, str]) -> None:
    for key, value in carrier.items():
        if key not in headers:  # a caller's own traceparent wins
            headers[key] = value


def _end_when_body_done(response: aiohttp.ClientResponse, span: Span) -> None:
    """End *span* once: at end of body, on release()/close(), or when collected."""
    done = threading.Lock()

    def end() -> None:
        if done.acquire(blocking=False):  # the first caller ends it, later ones return
            asynctrace.end_span(span)

    try:
        response.content.on_eof(end)
    except Exception:  # no stream (e.g. an upgraded connection): end at release
        pass
    # Instance attributes shadow the methods for this one response only. They
    # reach the response through a weak reference: a strong one would make
    # every response a reference cycle, left for the garbage collector.
    cls = type(response)
    ref = weakref.ref(response)

    def release_and_end() -> Any:
        end()
        owner = ref()
        return cls.release(owner) if owner is not None else None

    def close_and_end() -> None:
        end()
        owner = ref()
        if owner is not None:
            cls.close(owner)

    response.release = release_and_end  # type: ignore[method-assign]
    response.close = close_and_end  # type: ignore[method-assign]
    weakref.finalize(response, end)  # never read, never released: end when collected


class _Requests:
    """The per-request work shared by the middleware and the TraceConfig forms."""

    __slots__ = ("options",)

    def __init__(self, options: _Options) -> None:
        self.options = options

    def begin(self, method: str, url: Any, headers: Any, params: Any) -> Span | None:
        """Inject the context; start the CLIENT span when per_prompt is on."""
        if not asynctrace.is_span_group_enabled(GATE_GROUP):
            _inject(headers, asynctrace.current_trace_carrier())
            return None
        options = self.options
        name = method
        if options.span_name is not None:
            try:
                name = options.span_name(method, params)
            except Exception:
                logger.warning("asynctrace: span_name raised; using %r", method, exc_info=True)
        span = asynctrace.start_span(
            GATE_GROUP,
            name,
            kind=SpanKind.CLIENT,
            attributes=_request_attributes(method, url, headers, options),
        )
        if not span.is_recording():
            _inject(headers, asynctrace.current_trace_carrier())
            return None
        _inject(headers, asynctrace.span_carrier(span))
        _run_hook(options, "request_hook", options.request_hook, span, params)
        return span

    def response(self, span: Span, response: aiohttp.ClientResponse, params: Any) -> None:
        """Record the status; end the span when the body is done."""
        status = response.status
        span.set_attribute("http.response.status_code", status)
        for header in self.options.record_response_headers:
            values = response.headers.getall(header, ())
            if values:
                span.set_attribute(header_attribute("http.response.header", header), list(values))
        if status >= 400:
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))
        _run_hook(self.options, "response_hook", self.options.response_hook, span, params)
        _end_when_body_done(response, span)

    @staticmethod
    def failed(span: Span, exc: BaseException) -> None:
        """The request raised (or was cancelled) before a response arrived."""
        if isinstance(exc, Exception):
            span.set_attribute("error.type", type(exc).__qualname__)
        asynctrace.end_span(span, exc)


def _make_middleware(options: _Options) -> Any:
    requests = _Requests(options)

    async def asynctrace_middleware(request: Any, handler: Any) -> aiohttp.ClientResponse:
        span = requests.begin(request.method, request.url, request.headers, request)
        if span is None:
            response: aiohttp.ClientResponse = await handler(request)
            return response
        try:
            response = await handler(request)
        except BaseException as exc:
            requests.failed(span, exc)
            raise
        requests.response(span, response, request)
        return response

    asynctrace_middleware.asynctrace = True  # type: ignore[attr-defined]  # marks ours
    return asynctrace_middleware


def _make_trace_config(options: _Options) -> aiohttp.TraceConfig:
    requests = _Requests(options)

    async def on_request_start(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        ctx.asynctrace_span = requests.begin(
            params.method.upper(), params.url, params.headers, params
        )

    async def on_request_end(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        span: Span | None = getattr(ctx, "asynctrace_span", None)
        if span is not None:
            ctx.asynctrace_span = None
            requests.response(span, params.response, params)

    async def on_request_exception(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        span: Span | None = getattr(ctx, "asynctrace_span", None)
        if span is not None:
            ctx.asynctrace_span = None
            requests.failed(span, params.exception)

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_request_start)
    config.on_request_end.append(on_request_end)
    config.on_request_exception.append(on_request_exception)
    config.asynctrace = True  # type: ignore[attr-defined]  # marks ours
    return config


def _request_attributes(method: str, url: Any, headers: Any, options: _Options) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "http.request.method": method,
        "url.full": redact_url(str(url), options.secret_keys),
    }
    host = getattr(url, "host", None)
    if host:
        attrs["server.address"] = host
    port = getattr(url, "port", None)
    if port:
        attrs["server.port"] = port
    for header in options.record_request_headers:
        values = headers.getall(header, ()) if hasattr(headers, "getall") else ()
        if values:
            attrs[header_attribute("http.request.header", header)] = list(values)
    return attrs


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
    return _make_middleware(_Options(**locals()))  # exactly the keyword arguments above


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
        span_name: ``(method, params) -> name``; default ``"{METHOD}"``.
        secret_keys: query keys whose values are redacted in ``url.full``
            (case-insensitive substrings).
        record_request_headers: request header names recorded as
            ``http.request.header.<name>``; none by default.
        record_response_headers: same for ``http.response.header.<name>``.
        request_hook: ``(span, TraceRequestStartParams)``, called for recorded spans.
        response_hook: ``(span, TraceRequestEndParams)``, called for recorded spans.
            A hook that raises is logged once and ignored.

    Example:
        >>> import aiohttp
        >>> async def fetch(url):
        ...     async with aiohttp.ClientSession(trace_configs=[trace_config()]) as session:
        ...         async with session.get(url) as response:
        ...             return await response.text()
    """
    return _make_trace_config(_Options(**locals()))  # exactly the keyword arguments above


_install_lock = threading.Lock()
_original_init: Any = None


def instrument_aiohttp_client(**options: Any) -> None:
    """Trace every ``aiohttp.ClientSession`` created from now on.

    Idempotent: a second call changes nothing (call
    :func:`uninstrument_aiohttp_client` first to change options). Sessions
    created before this call are not covered. Takes the keyword arguments of
    :func:`trace_config`.

    Example:
        >>> instrument_aiohttp_client(record_request_headers=["x-request-id"])
        >>> uninstrument_aiohttp_client()
    """
    global _original_init
    with _install_lock:
        if _original_init is not None:
            return
        original = aiohttp.ClientSession.__init__
        if _HAS_MIDDLEWARES:
            middleware = client_middleware(**options)

            @functools.wraps(original)
            def __init__(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
                chain = tuple(kwargs.get("middlewares") or ())
                layers = (*chain, *(kwargs.get("trace_configs") or ()))
                if not any(getattr(layer, "asynctrace", False) for layer in layers):
                    kwargs["middlewares"] = (*chain, middleware)  # one layer of ours, at most
                original(self, *args, **kwargs)

        else:  # aiohttp < 3.12: no client middlewares
            config = trace_config(**options)

            @functools.wraps(original)
            def __init__(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
                configs = list(kwargs.get("trace_configs") or ())
                if not any(getattr(c, "asynctrace", False) for c in configs):
                    configs.append(config)
                kwargs["trace_configs"] = configs
                original(self, *args, **kwargs)

        _original_init = original
        aiohttp.ClientSession.__init__ = __init__  # type: ignore[method-assign]


def uninstrument_aiohttp_client() -> None:
    """Undo :func:`instrument_aiohttp_client`; nothing of asynctrace is left on the class.

    Sessions created while instrumented keep their trace config.

    Example:
        >>> uninstrument_aiohttp_client()
    """
    global _original_init
    with _install_lock:
        if _original_init is None:
            return
        aiohttp.ClientSession.__init__ = _original_init  # type: ignore[method-assign]
        _original_init = None
