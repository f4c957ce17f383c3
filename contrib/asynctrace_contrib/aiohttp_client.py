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
import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

import asynctrace

from ._http import DEFAULT_SECRET_KEYS, header_attribute, redact_url

try:
    import aiohttp
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise asynctrace.MissingExtraError("aiohttp", "aiohttp") from exc

__all__ = ["instrument_aiohttp_client", "trace_config", "uninstrument_aiohttp_client"]

logger = logging.getLogger("asynctrace")

GATE_GROUP = "per_prompt"
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
        self.secret_keys = tuple(secret_keys)
        self.record_request_headers = tuple(record_request_headers)
        self.record_response_headers = tuple(record_response_headers)
        self.request_hook = request_hook
        self.response_hook = response_hook


_warned_hooks: set[str] = set()


def _run_hook(name: str, hook: RequestHook | None, span: Span, params: Any) -> None:
    if hook is None or not span.is_recording():
        return
    try:
        hook(span, params)
    except Exception:
        if name not in _warned_hooks:
            _warned_hooks.add(name)
            logger.warning("asynctrace: the aiohttp %s raised; ignored", name, exc_info=True)


def _inject(headers: Any, carrier: dict[str, str]) -> None:
    for key, value in carrier.items():
        if key not in headers:  # a caller's own traceparent wins
            headers[key] = value


def _end_when_body_done(response: aiohttp.ClientResponse, end: Callable[[], None]) -> None:
    """Call *end* once: at end of body, on release()/close(), or when collected."""
    try:
        response.content.on_eof(end)
    except Exception:  # no stream (e.g. an upgraded connection): end at release
        pass
    for method in ("release", "close"):
        original = getattr(response, method)

        @functools.wraps(original)
        def wrapped(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            end()
            return __original(*args, **kwargs)

        setattr(response, method, wrapped)
    weakref.finalize(response, end)


def _make_trace_config(options: _Options) -> aiohttp.TraceConfig:
    async def on_request_start(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        ctx.asynctrace_span = None
        if not asynctrace.is_span_group_enabled(GATE_GROUP):
            _inject(params.headers, asynctrace.current_trace_carrier())
            return
        method = params.method.upper()
        url = str(params.url)
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
            attributes=_request_attributes(method, params.url, url, params.headers, options),
        )
        ctx.asynctrace_span = span
        if span.is_recording():
            _inject(params.headers, _carrier_of(span))
        else:
            _inject(params.headers, asynctrace.current_trace_carrier())
        _run_hook("request_hook", options.request_hook, span, params)

    async def on_request_end(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        span: Span | None = getattr(ctx, "asynctrace_span", None)
        if span is None:
            return
        ctx.asynctrace_span = None
        response = params.response
        status = response.status
        span.set_attribute("http.response.status_code", status)
        for header in options.record_response_headers:
            values = response.headers.getall(header, ())
            if values:
                span.set_attribute(header_attribute("http.response.header", header), list(values))
        if status >= 400:
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))
        _run_hook("response_hook", options.response_hook, span, params)
        lock = threading.Lock()
        done = [False]

        def end() -> None:
            with lock:
                if done[0]:
                    return
                done[0] = True
            asynctrace.end_span(span)

        _end_when_body_done(response, end)

    async def on_request_exception(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any
    ) -> None:
        span: Span | None = getattr(ctx, "asynctrace_span", None)
        if span is None:
            return
        ctx.asynctrace_span = None
        exc = params.exception
        if isinstance(exc, Exception):
            span.set_attribute("error.type", type(exc).__qualname__)
        asynctrace.end_span(span, exc)

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_request_start)
    config.on_request_end.append(on_request_end)
    config.on_request_exception.append(on_request_exception)
    config.asynctrace = True  # type: ignore[attr-defined]  # marks ours
    return config


def _carrier_of(span: Span) -> dict[str, str]:
    """The W3C carrier naming *span* as the parent."""
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        return asynctrace.current_trace_carrier()
    finally:
        otel_context.detach(token)


def _request_attributes(
    method: str, url_obj: Any, url: str, headers: Any, options: _Options
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "http.request.method": method,
        "url.full": redact_url(url, options.secret_keys),
    }
    host = getattr(url_obj, "host", None)
    if host:
        attrs["server.address"] = host
    port = getattr(url_obj, "port", None)
    if port:
        attrs["server.port"] = port
    for header in options.record_request_headers:
        values = headers.getall(header, ()) if hasattr(headers, "getall") else ()
        if values:
            attrs[header_attribute("http.request.header", header)] = list(values)
    return attrs


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
    return _make_trace_config(
        _Options(
            span_name=span_name,
            secret_keys=secret_keys,
            record_request_headers=record_request_headers,
            record_response_headers=record_response_headers,
            request_hook=request_hook,
            response_hook=response_hook,
        )
    )


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
        config = trace_config(**options)
        original = aiohttp.ClientSession.__init__

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
