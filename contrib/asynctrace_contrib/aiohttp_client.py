"""aiohttp client instrumentation: ``traceparent`` on every request, a span per request.

Every request carries the ambient W3C context (``traceparent``/``tracestate``),
whether or not a span is recorded, so a server downstream joins the caller's
trace. A CLIENT span per request is recorded only while the ``per_prompt``
group is enabled (checked per request, before any attribute work): HTTP calls
scale with prompts x turns x tool calls, which is the volume ``per_prompt``
exists to fence off. The span covers the response body: it ends when aiohttp
lets go of the connection — the body has been read, or the response is
released, closed or collected; for a websocket, when it closes.

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
import os
import sys
import threading
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY as _SUPPRESS_HTTP
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

import asynctrace

from ._http import (
    DEFAULT_SECRET_KEYS,
    SecretKeys,
    callable_option,
    header_attribute,
    header_secrets,
    names_option,
    recorded_header_values,
    redact_url,
    url_secrets,
)
from ._http_values import KNOWN_METHODS, method_attributes

try:
    import aiohttp
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise asynctrace.MissingExtraError("aiohttp", "aiohttp") from exc

__all__ = [
    "DEFAULT_SECRET_KEYS",
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
        "plain",
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
        callable_option("span_name", span_name, "(method, request) -> str")
        callable_option("request_hook", request_hook, "(span, request) -> None")
        callable_option("response_hook", response_hook, "(span, request) -> None")
        self.span_name = span_name
        self.secret_keys = SecretKeys(names_option("secret_keys", secret_keys, "query keys"))
        # An exception raised after the span ended (raise_for_status(), json()'s
        # ContentTypeError) names the URL too, and is recorded by spans that never
        # knew this request: its secret keys are secret-like names everywhere.
        try:
            asynctrace.register_secret_words(self.secret_keys)
        except asynctrace.ConfigurationError as error:  # too many words in the process
            raise asynctrace.ConfigurationError(f"secret_keys: {error}") from None
        self.record_request_headers = names_option(
            "record_request_headers", record_request_headers, "header names"
        )
        self.record_response_headers = names_option(
            "record_response_headers", record_response_headers, "header names"
        )
        self.request_hook = request_hook
        self.response_hook = response_hook
        self.warned: set[str] = set()
        # Nothing per request before the span starts: no custom name, no headers recorded.
        self.plain = span_name is None and not self.record_request_headers


def _run_hook(options: _Options, name: str, hook: RequestHook, span: Span, params: Any) -> None:
    """Call a user hook; a failure is logged once per hook of this config, never raised."""
    try:
        hook(span, params)
    except Exception:
        if name not in options.warned:
            options.warned.add(name)
            logger.warning("asynctrace: the aiohttp %s raised; ignored", name, exc_info=True)


def _custom_name(
    options: _Options, span_name: Callable[[str, Any], str], default: str, method: str, params: Any
) -> str:
    """*span_name*'s name for the request, or *default* if it raises or returns no str.

    Either is logged once per trace config, never raised.
    """
    try:
        name = span_name(method, params)
    except Exception:
        if "span_name" not in options.warned:
            options.warned.add("span_name")
            logger.warning(
                "asynctrace: the aiohttp span_name raised; using the default name", exc_info=True
            )
        return default
    if type(name) is str:
        return name
    if "span_name result" not in options.warned:
        options.warned.add("span_name result")
        logger.warning(
            "asynctrace: the aiohttp span_name returned a %s, not a str; using the default name",
            type(name).__name__,
        )
    return default


def _inject(headers: Any, carrier: dict[str, str]) -> None:
    own_parent = "traceparent" in headers  # a caller's own traceparent wins
    for key, value in carrier.items():
        if key == "baggage" and key in headers:
            _add_scope_baggage(headers, value)
        elif key == "tracestate" and own_parent:
            continue  # vendor data of our trace: it goes with our traceparent only (W3C)
        else:
            headers.setdefault(key, value)


def _add_scope_baggage(headers: Any, value: str) -> None:
    """Add asynctrace's scope members to the ``baggage`` headers the caller set.

    All of the caller's headers are kept, combined into one; the rules are
    :func:`asynctrace.merge_baggage`'s. Only requests whose caller set
    ``baggage`` come here.
    """
    try:
        values = headers.getall("baggage") if hasattr(headers, "getall") else [headers["baggage"]]
        merged = asynctrace.merge_baggage(values, value)
        if merged is not None:  # else the caller's headers go as they were set
            headers["baggage"] = merged
    except Exception:  # an odd headers object: the caller's headers stay as they are
        logger.debug("asynctrace: could not add the scopes to baggage", exc_info=True)


def _context_reader() -> Callable[[], Any]:
    """The current OpenTelemetry context's reader: its ContextVar's ``get`` when the runtime
    is OpenTelemetry's ContextVar one (not a subclass: one ``OTEL_PYTHON_CONTEXT`` names
    may keep its context elsewhere), two frames less per request than ``get_current()``."""
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    get = getattr(getattr(runtime, "_current_context", None), "get", None)
    if type(runtime) is ContextVarsRuntimeContext and callable(get):
        return get  # type: ignore[no-any-return]
    return otel_context.get_current


_get_current = _context_reader()
# The public names each request calls, looked up once.
_is_enabled = asynctrace.is_span_group_enabled
_start_span = asynctrace.start_span
_span_carrier = asynctrace.span_carrier
_current_carrier = asynctrace.current_trace_carrier
_end_span = asynctrace.end_span
_CLIENT = SpanKind.CLIENT


class _Handled:
    """The value of OpenTelemetry's suppression key while a trace config of ours handles a
    request: true, so the trace configs after ours stand aside; known to us, so a request
    made meanwhile (by a client middleware of the same request) is still ours to handle."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return True


_HANDLED = _Handled()


def _suppressed() -> bool:
    """Whether an outer layer asked HTTP instrumentations to stand aside (OpenTelemetry's key)."""
    current = _get_current()
    http = current.get(_SUPPRESS_HTTP)
    return bool((http and http is not _HANDLED) or current.get(_SUPPRESS))


class _Requests:
    """The per-request work shared by the middleware and the TraceConfig forms.

    Written flat on purpose: every Python call here shows in the per-request
    figure, so helpers are inlined on the recorded path.
    """

    __slots__ = ("_last", "options")

    def __init__(self, options: _Options) -> None:
        self.options = options
        # The last recorded request's URL object, method, attributes and default
        # name: yarl hands back the same (immutable) URL object for the same URL
        # string, so a pump that calls one endpoint again and again skips str(url),
        # the redaction check and the dict's construction.
        self._last: tuple[Any, str, dict[str, Any], str] = (None, "", {}, "")

    def begin(
        self, method: str, url: Any, headers: Any, params: Any, injected: str | None = None
    ) -> Span | None:
        """Inject the context; start the CLIENT span when per_prompt is on.

        A request whose ``traceparent`` is already set (by the caller, or by
        another HTTP instrumentation that ran first) names its parent already:
        a span of ours would not be the one the server sees, so none is
        started. The exception is *injected*, the ``traceparent`` this layer
        set on the same request object for an earlier attempt (a retry
        middleware sends one request again): it is replaced, and the attempt
        gets a span of its own. Inside OpenTelemetry's
        ``suppress_http_instrumentation``, nothing is done at all.
        """
        current = _get_current()
        http = current.get(_SUPPRESS_HTTP)
        if (http and http is not _HANDLED) or current.get(_SUPPRESS):
            return None
        if "traceparent" in headers:
            if injected is None or headers.get("traceparent") != injected:
                _inject(headers, _current_carrier())
                return None
            del headers["traceparent"]  # an earlier attempt's, ours: this one gets its own
        options = self.options
        last = self._last
        if last[0] is url and last[1] == method and options.plain:
            # The common case: the URL's attributes and the name as last time (start_span
            # keeps a merged copy, never the dict given), and start_span's own gate (a
            # disabled group gives a span that is not recording).
            span = _start_span(
                GATE_GROUP, last[3], kind=_CLIENT, attributes=last[2], urls_redacted=True
            )
        else:
            if not _is_enabled(GATE_GROUP):  # before any work for the URL, or a hook
                _inject(headers, _current_carrier())
                return None
            name = method if method in KNOWN_METHODS else "HTTP"
            if last[0] is url and last[1] == method:
                attrs = last[2]
            else:
                attrs = _url_attributes(method, url, options.secret_keys)
                self._last = (url, method, attrs, name)
            if options.span_name is not None:
                name = _custom_name(options, options.span_name, name, method, params)
            if options.record_request_headers:
                attrs = attrs.copy()  # the URL's are kept for the next request
                _record_request_headers(attrs, headers, options.record_request_headers)
            span = _start_span(
                GATE_GROUP, name, kind=_CLIENT, attributes=attrs, urls_redacted=True
            )
        if not span.is_recording():
            _inject(headers, _current_carrier())
            return None
        carrier = _span_carrier(span)
        if len(carrier) == 1:  # its traceparent alone, where none is set now (see above)
            headers["traceparent"] = carrier["traceparent"]
        else:
            _inject(headers, carrier)
        if options.request_hook is not None:
            _run_hook(options, "request_hook", options.request_hook, span, params)
        return span

    def response(self, span: Span, response: aiohttp.ClientResponse, params: Any) -> None:
        """Record the status; end the span when the response lets go of its connection.

        aiohttp releases the connection at the end of the body, on
        ``release()``, on ``close()`` and when an unreleased response is
        collected, and calls the connection's callbacks exactly once, so one
        callback covers every way a response ends. A response whose body
        arrived with its headers has released its connection already: the
        span ends here.
        """
        options = self.options
        status = response.status
        span.set_attribute("http.response.status_code", status)
        if options.record_response_headers:
            for header in options.record_response_headers:
                values = response.headers.getall(header, ())
                if values:
                    name = header_attribute("http.response.header", header)
                    span.set_attribute(name, recorded_header_values(header, list(values)))
        if status >= 400:
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))
        if options.response_hook is not None:
            _run_hook(options, "response_hook", options.response_hook, span, params)
        connection = response.connection
        if connection is None:
            _end_span(span)
            return
        try:
            # The body's stream, not the response: the response holds the connection,
            # and a callback holding the response would keep an abandoned one alive.
            connection.add_callback(functools.partial(_body_done, span, response.content))
        except Exception:  # an aiohttp without connection callbacks: end at the headers
            logger.warning("asynctrace: cannot follow the response body", exc_info=True)
            asynctrace.end_span(span)

    def failed(self, span: Span, exc: BaseException, url: Any, headers: Any) -> None:
        """The request raised (or was cancelled) before a response arrived.

        aiohttp's messages name the URL (``Connection timeout to host
        http://...?token=...``): what is recorded of the exception is redacted
        with this request's secrets, its userinfo, secret-like query values and
        header values, the ones the exception carries included.
        """
        if not isinstance(exc, Exception):
            asynctrace.end_span(span, exc)
            return
        status = exc.status if isinstance(exc, aiohttp.ClientResponseError) else None
        if type(status) is int and status > 0:
            # raise_for_status: a response arrived; its status is the request's.
            span.set_attribute("http.response.status_code", status)
        if type(status) is int and status >= 400:
            span.set_attribute("error.type", str(status))
        else:
            span.set_attribute("error.type", type(exc).__qualname__)
        keys = self.options.secret_keys
        secrets: set[str] = set()
        try:
            secrets |= url_secrets(str(url), keys)
            info = getattr(exc, "request_info", None)
            carried = getattr(exc, "headers", None) or ()
            secrets |= header_secrets(headers, carried, getattr(info, "headers", None) or ())
            for known in (getattr(info, "url", None), getattr(info, "real_url", None)):
                if known is not None:
                    secrets |= url_secrets(str(known), keys)
        except Exception:  # an odd exception object: the default redaction still applies
            logger.debug("asynctrace: could not read the failed request", exc_info=True)
        asynctrace.end_span(span, exc, secrets=secrets)


# What aiohttp puts in a response's body stream when the response is released or
# closed before its end: the caller let go, nothing failed.
_RELEASED = getattr(getattr(aiohttp, "client_reqrep", None), "_CONNECTION_CLOSED_EXCEPTION", None)


def _released(exc: Exception) -> bool:
    """Whether *exc* is what an early ``release()`` or ``close()`` leaves: aiohttp's shared
    exception, or before aiohttp 3.10.9 (no shared one) a new ``ClientConnectionError(
    "Connection closed")`` each time."""
    if _RELEASED is not None:
        return exc is _RELEASED
    return type(exc) is aiohttp.ClientConnectionError and exc.args == ("Connection closed",)


def _body_done(span: Span, content: Any) -> None:
    """End *span* when its response lets go of the connection.

    A body whose reading failed (the peer closed mid-body, a read timeout)
    ends the span in error with that exception; an early ``release()`` or
    ``close()`` does not.
    """
    try:
        exc = content.exception()
    except Exception:  # not a stream we know: the span still ends
        exc = None
    if not isinstance(exc, Exception) or _released(exc):  # None, or the caller let go
        asynctrace.end_span(span)
        return
    span.set_attribute("error.type", type(exc).__qualname__)
    asynctrace.end_span(span, exc)


def _url_attributes(method: str, url: Any, secret_keys: Any) -> dict[str, Any]:
    """The request's method (``_OTHER`` if unknown), redacted ``url.full``,
    ``server.address`` and ``server.port``."""
    full = str(url)
    if "?" in full or "@" in full or "#" in full or ";" in full:  # redact_url's fast path
        full = redact_url(full, secret_keys)
    _, attrs = method_attributes(method)
    attrs["url.full"] = full
    host, port = url.host, url.port
    if host:
        attrs["server.address"] = host
    if port:
        attrs["server.port"] = port
    return attrs


_INJECTED = "_asynctrace_traceparent"  # the traceparent this layer set on a ClientRequest


def _make_middleware(options: _Options) -> Any:
    requests = _Requests(options)

    async def asynctrace_middleware(request: Any, handler: Any) -> aiohttp.ClientResponse:
        headers = request.headers
        span = requests.begin(
            request.method, request.url, headers, request, getattr(request, _INJECTED, None)
        )
        if span is None:
            response: aiohttp.ClientResponse = await handler(request)
            return response
        # Remembered on the request: a retry middleware outside sends it again.
        setattr(request, _INJECTED, headers.get("traceparent"))
        try:
            response = await handler(request)
        except BaseException as exc:
            requests.failed(span, exc, request.url, request.headers)
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
        ctx.asynctrace_token = None
        if _suppressed():
            ctx.asynctrace_span = None
            return
        ctx.asynctrace_span = requests.begin(
            params.method.upper(), params.url, params.headers, params
        )
        # This request is handled: the trace configs after ours (OpenTelemetry's
        # aiohttp instrumentation) stand aside, as OpenTelemetry's own layers do. The
        # key stays set until the request ends, through the client middlewares: a
        # request one of them makes is still handled by a layer of ours (_HANDLED).
        ctx.asynctrace_token = otel_context.attach(
            otel_context.set_value(_SUPPRESS_HTTP, _HANDLED)
        )

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


def _record_request_headers(attrs: dict[str, Any], headers: Any, names: tuple[str, ...]) -> None:
    """Add ``http.request.header.<name>`` for the request headers asked for."""
    if not hasattr(headers, "getall"):
        return
    for header in names:
        values = headers.getall(header, ())
        if values:
            attrs[header_attribute("http.request.header", header)] = recorded_header_values(
                header, list(values)
            )


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
    return _make_trace_config(_Options(**locals()))  # exactly the keyword arguments above


_install_lock = threading.Lock()


def _new_lock_in_child() -> None:
    """A lock another thread held at ``fork()`` would stay held in the child: a new one."""
    global _install_lock
    _install_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)

# What instrument_aiohttp_client put on aiohttp.ClientSession. A wrapper of ours stays
# installed, inert, when another instrumentation wrapped the method after it (taking it
# off would take theirs off too): the next instrument call turns it back on.
_layers: tuple[aiohttp.TraceConfig, Any] | None = None  # (trace config, middleware) while on
_installed_init: Any = None  # our __init__ wrapper, once installed
_original_init: Any = None  # what it wraps
_installed_request: Any = None  # our _request wrapper (aiohttp >= 3.12)
_original_request: Any = None

_OTEL_AIOHTTP = "opentelemetry.instrumentation.aiohttp_client"


def instrument_aiohttp_client(**options: Any) -> None:
    """Trace every ``aiohttp.ClientSession`` created from now on.

    Idempotent: a second call changes nothing (call
    :func:`uninstrument_aiohttp_client` first to change options). Sessions
    created before this call are not covered. On aiohttp >= 3.12, a request
    passing its own ``middlewares=`` keeps its session's asynctrace
    middleware, appended last. Takes the keyword arguments of
    :func:`trace_config`.

    Example:
        >>> instrument_aiohttp_client(record_request_headers=["x-request-id"])
        >>> uninstrument_aiohttp_client()
    """
    global _layers, _installed_init, _original_init, _installed_request, _original_request
    with _install_lock:
        if _layers is not None:
            return
        config = trace_config(**options)
        middleware = client_middleware(**options) if _HAS_MIDDLEWARES else None
        cls = aiohttp.ClientSession
        if not _in_chain(_own(cls, "__init__"), _installed_init):
            _original_init = _own(cls, "__init__")
            _installed_init = _session_init(_original_init)
            cls.__init__ = _installed_init  # type: ignore[method-assign]
        if _HAS_MIDDLEWARES and not _in_chain(_own(cls, "_request"), _installed_request):
            _original_request = _own(cls, "_request")
            _installed_request = _with_session_layer(_original_request)
            cls._request = _installed_request  # type: ignore[method-assign]
        _layers = (config, middleware)


def _own(cls: type, name: str) -> Any:
    """The attribute *name* as set on *cls* (a descriptor stays one), else as inherited."""
    return vars(cls).get(name, getattr(cls, name))


def _in_chain(method: Any, wrapper: Any) -> bool:
    """Whether *wrapper* is *method* or wrapped by it (``__wrapped__``, as functools and
    wrapt set it)."""
    if wrapper is None:
        return False
    for _ in range(100):  # a cycle of __wrapped__ would never end
        if method is wrapper:
            return True
        method = getattr(method, "__wrapped__", None)
        if method is None:
            return False
    return False


def _is_otel_init(method: Any) -> bool:
    """Whether *method* is OpenTelemetry's aiohttp ``ClientSession.__init__`` wrapper."""
    wrapper = getattr(method, "_self_wrapper", None)  # wrapt's, as OpenTelemetry wraps
    return getattr(wrapper, "__module__", None) == _OTEL_AIOHTTP


def _has_otel_config(configs: Iterable[Any]) -> bool:
    """Whether *configs* holds the trace config OpenTelemetry's instrumentor added."""
    return any(hasattr(c, "_is_instrumented_by_opentelemetry") for c in configs)


def _session_init(original: Any) -> Any:
    """The ``ClientSession.__init__`` wrapper: one layer of ours on every new session.

    When *original* is OpenTelemetry's wrapper and its instrumentor was turned
    off since (it can only take its wrapper off the class when that wrapper is
    on top, and ours is), it is stepped over: OpenTelemetry's ``uninstrument()``
    takes effect. So it is too when OpenTelemetry's instrumentor, turned on
    again, wrapped ours and has added its trace config already.
    """
    otel_beneath = _is_otel_init(original)

    @functools.wraps(original)
    def __init__(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        init = original
        if otel_beneath:
            while _is_otel_init(init) and (
                not _otel_aiohttp_active() or _has_otel_config(kwargs.get("trace_configs") or ())
            ):
                init = init.__wrapped__
        layers = _layers
        if layers is not None:
            config, middleware = layers
            chain = tuple(kwargs.get("middlewares") or ())
            configs = list(kwargs.get("trace_configs") or ())
            if not any(getattr(layer, "asynctrace", False) for layer in (*chain, *configs)):
                if middleware is not None and not configs and not _otel_aiohttp_active():
                    kwargs["middlewares"] = (*chain, middleware)  # one layer of ours, at most
                else:
                    # Other trace configs run before any middleware: ours goes first among
                    # them, so the request is handled once (OpenTelemetry's stands aside).
                    kwargs["trace_configs"] = [config, *configs]
        init(self, *args, **kwargs)

    return __init__


def _with_session_layer(original: Any) -> Any:
    """Wrap ``ClientSession._request`` so a request's own ``middlewares=`` keep ours.

    aiohttp runs a request's ``middlewares=`` instead of the session's, so a
    session's asynctrace layer is appended to them (last, as on the session),
    unless they hold one already. A plain function returning the coroutine:
    a request without ``middlewares=`` pays one call and one lookup. Only a
    session that has an asynctrace middleware is affected, so the wrapper
    needs no switch when left installed, inert.
    """

    @functools.wraps(original)
    def _request(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> Any:
        chain = kwargs.get("middlewares")
        if chain is not None:
            kwargs["middlewares"] = _keep_session_layer(self, tuple(chain))
        return original(self, *args, **kwargs)

    return _request


def _keep_session_layer(session: aiohttp.ClientSession, chain: tuple[Any, ...]) -> Any:
    """*chain*, with the session's asynctrace middleware appended if it has one and *chain* not."""
    if any(getattr(layer, "asynctrace", False) for layer in chain):
        return chain
    for layer in getattr(session, "_middlewares", None) or ():
        if getattr(layer, "asynctrace", False):
            return (*chain, layer)
    return chain


def _otel_aiohttp_active() -> bool:
    """Whether OpenTelemetry's aiohttp instrumentation adds its trace config to new sessions."""
    module = sys.modules.get(_OTEL_AIOHTTP)
    if module is None:
        return False
    try:
        return bool(module.AioHttpClientInstrumentor().is_instrumented_by_opentelemetry)
    except Exception:
        return False


def uninstrument_aiohttp_client() -> None:
    """Undo :func:`instrument_aiohttp_client`: new sessions get no layer of asynctrace's.

    The original ``__init__`` (and ``_request``) is put back when asynctrace's
    wrapper is still the outermost. When another instrumentation (OpenTelemetry's
    ``AioHttpClientInstrumentor``) wrapped it since, putting the original back
    would remove that one too: asynctrace's wrapper stays beneath it, passing
    sessions through untouched, and the next :func:`instrument_aiohttp_client`
    turns it back on. Sessions created while instrumented keep their layer.

    Example:
        >>> uninstrument_aiohttp_client()
    """
    global _layers, _installed_init, _original_init, _installed_request, _original_request
    with _install_lock:
        if _layers is None:
            return
        _layers = None
        cls = aiohttp.ClientSession
        if _installed_init is not None and vars(cls).get("__init__") is _installed_init:
            original = _original_init
            # OpenTelemetry's wrapper beneath ours, its instrumentor off since: what its
            # uninstrument() would have put back, had ours not been on top.
            while _is_otel_init(original) and not _otel_aiohttp_active():
                original = original.__wrapped__
            cls.__init__ = original  # type: ignore[method-assign]
            _installed_init = _original_init = None
        if _installed_request is not None and vars(cls).get("_request") is _installed_request:
            cls._request = _original_request  # type: ignore[method-assign]
            _installed_request = _original_request = None
