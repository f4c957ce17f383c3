"""FastAPI / ASGI server instrumentation: one SERVER span per request, per app.

:func:`instrument_fastapi` puts an ASGI middleware around one application's
whole middleware stack (no global class swap; importing this module changes
no framework state). Each
HTTP request becomes a SERVER span named ``"{METHOD} {route template}"``
(``GET /items/{item_id}``, never the raw path; ``HTTP`` for a method not
known, see :mod:`._http_values`), continuing the caller's W3C
context, covering the response to its last byte (not the background tasks
after it). Websocket connections get
one span each; lifespan events pass through untouched.

Server spans are gated on the ``http_server`` group, registered here as an
umbrella with per-item cardinality (one span per request), so it is not part
of ``per_step``: a server enables it in its own configuration, e.g.
``span_groups: "default,http_server"``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY as _SUPPRESS_HTTP
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

import asynctrace

from ._http import (
    DEFAULT_SECRET_KEYS,
    REDACTED,
    SecretKeys,
    callable_option,
    header_secrets,
    names_option,
    redact_url,
    url_secrets,
)
from ._http_values import KNOWN_METHODS, method_attributes, request_authority

try:
    from starlette.middleware.errors import ServerErrorMiddleware
    from starlette.requests import ClientDisconnect
    from starlette.routing import Host, Match, Mount
    from starlette.websockets import WebSocketDisconnect
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise asynctrace.MissingExtraError("fastapi", "starlette") from exc

__all__ = ["SERVER_GROUP", "AsyncTraceMiddleware", "instrument_fastapi", "uninstrument_fastapi"]

logger = logging.getLogger("asynctrace")

SERVER_GROUP = "http_server"
"""The span group of the SERVER spans: ``"http_server"``, one span per request or websocket.

Registered (under ``asynctrace_contrib``, no bucket, per item) when this module
is imported. ``all`` includes it; ``default`` and ``per_step`` do not: the
server names it in its own ``span_groups`` (``"default,http_server"``). Off, the
middleware records no SERVER span and still continues the incoming context.
"""
asynctrace.register_span_groups(
    "asynctrace_contrib",
    [
        asynctrace.SpanGroup(
            SERVER_GROUP,
            None,
            per_item=True,
            description="one SERVER span per HTTP request or websocket (ASGI middleware)",
        )
    ],
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ServerHook = Callable[[Span, Scope], None]
_SECRET_KEYS = SecretKeys(DEFAULT_SECRET_KEYS)


# The trace headers (0-2), the ones that name the server (3-5: see _http_values), and
# the client's name (6).
_TRACE_HEADERS = {"traceparent": 0, "tracestate": 1, "baggage": 2}
_ALL_HEADERS = {
    **_TRACE_HEADERS,
    "forwarded": 3,
    "x-forwarded-host": 4,
    "host": 5,
    "user-agent": 6,
}
_RAW_TRACE_HEADERS = {name.encode(): index for name, index in _TRACE_HEADERS.items()}
_RAW_ALL_HEADERS = {name.encode(): index for name, index in _ALL_HEADERS.items()}
_LONGEST = max(map(len, _ALL_HEADERS))


def _headers(
    scope: Scope, *, trust: bool = True, named: list[str | None] | None = None
) -> dict[str, str]:
    """The request's trace headers as one carrier, decoded without ever failing.

    Header names are matched case-insensitively. Repeated ``tracestate`` and
    ``baggage`` headers are combined in order, as HTTP combines repeated
    headers; a repeated ``traceparent`` is invalid (W3C: start a new trace):
    both go in, under two spellings of the name, so the carrier reader
    refuses it (and the ``tracestate`` that came with it) and counts it.
    Without *trust*, no ``baggage`` is read. Given *named* (four ``None``),
    the first ``Forwarded``, ``X-Forwarded-Host``, ``Host`` and ``User-Agent``
    values are stored in it.
    """
    raw_names, names = (
        (_RAW_TRACE_HEADERS, _TRACE_HEADERS) if named is None else (_RAW_ALL_HEADERS, _ALL_HEADERS)
    )
    found: tuple[list[str], list[str], list[str]] = ([], [], [])
    for raw_name, raw_value in scope.get("headers") or ():
        try:
            if raw_name.__class__ is bytes:  # servers give lower-case bytes (ASGI)
                index = raw_names.get(raw_name)
                if index is None:
                    if len(raw_name) > _LONGEST or raw_name.islower():
                        continue  # not ours; a name with capitals (or no letters) is lowered here
                    index = names.get(raw_name.decode("latin-1").lower())
            else:
                if len(raw_name) > _LONGEST:
                    continue
                index = names.get(bytes(raw_name).decode("latin-1").lower())
            if index is None:
                continue
            if index < 3:
                found[index].append(bytes(raw_value).decode("latin-1"))
            elif named is not None and named[index - 3] is None:  # the first one counts
                named[index - 3] = bytes(raw_value).decode("latin-1")
        except Exception:
            continue
    parents, states, bags = found
    carrier: dict[str, str] = {}
    if parents:
        carrier["traceparent"] = parents[0]
        if len(parents) > 1:  # invalid (W3C: a new trace): passed on as the repeat it is,
            carrier["Traceparent"] = parents[1]  # for the reader to refuse and count
        if states:
            carrier["tracestate"] = ",".join(states)
    if bags and trust:
        carrier["baggage"] = ",".join(bags)
    return carrier


def _outer_server_span() -> bool:
    """Whether another instrumentation already handles this request on the server side.

    OpenTelemetry's ASGI middleware (``opentelemetry-instrumentation-fastapi``)
    wraps the whole application and makes its SERVER span current, and any
    HTTP instrumentation may ask the ones below it to stand aside with
    OpenTelemetry's ``suppress_http_instrumentation`` context key.
    """
    current = otel_context.get_current()  # once: three reads of it follow
    if current.get(_SUPPRESS_HTTP) or current.get(_SUPPRESS):
        return True
    span = trace.get_current_span(current)
    return getattr(span, "kind", None) is SpanKind.SERVER and span.is_recording()


def _route_template(scope: Scope, root: str, app: Any) -> str | None:
    """The matched route's template, from the route objects alone.

    *root* is the ``root_path`` the request came with (the server's prefix, or
    the app's own ``root_path``), *app* the application it entered. A mount
    routing passed through (``app.mount("/tenants/{tenant}", sub)``) adds the
    matched path, as sent, to ``root_path``: its template stands in for it, so
    no path parameter's value ever becomes part of the name. ``None`` when no
    route matched, or the mounts cannot be told.
    """
    route = scope.get("route")
    path = getattr(route, "path", None)
    state = scope.get("fastapi")
    if state.__class__ is dict:
        path = _included_path(state, route) or path
    routed = scope.get("root_path") or ""
    if routed == root:  # no mount with a path of its own: the common case
        return root + path if isinstance(path, str) else None
    mounts = _mount_templates(scope, root, routed, app)
    if mounts is None:
        return None
    # A mount answering itself (an app that routes nothing, or a 404 inside it) is the
    # route; FastAPI's router sets no route for a mount at all.
    if route is None or isinstance(route, Mount):
        return root + mounts or None
    return root + mounts + path if isinstance(path, str) else None


def _included_path(state: dict[str, Any], route: object) -> str | None:
    """The template of *route* with the prefixes it was included under, when FastAPI
    keeps them apart: from 0.16x a router's routes are included as they are, so the
    route matched has its router's path only, and ``include_router(prefix=...)``'s
    part is in the request's route context."""
    context = state.get("effective_route_context")
    if getattr(context, "original_route", None) is not route:
        return None
    path = getattr(getattr(context, "starlette_route", None), "path", None)
    if not isinstance(path, str) or not path:
        path = getattr(context, "path", None)
    return path if isinstance(path, str) and path else None


def _mount_templates(scope: Scope, root: str, routed: Any, app: Any) -> str | None:
    """The templates of the mounts that took the request from ``root_path`` *root* to
    *routed*, joined, by routing the matched prefix again through *app*'s routes.

    ``None`` when the routing cannot be retraced (routes that are not Starlette's
    ``Mount`` or ``Host``, a path that no longer matches): the caller names the
    span by its method then.
    """
    if not isinstance(routed, str) or not routed.startswith(root):
        return None
    routes = getattr(app, "routes", None)
    if routes is None:
        routes = getattr(scope.get("router"), "routes", None)  # the outermost router
    probe: dict[str, Any] = {
        "type": scope.get("type"),
        "path": routed + "/",  # the prefix alone: a mount matches it as it matched the path
        "root_path": root,
        "headers": scope.get("headers") or [],
    }
    templates: list[str] = []
    for _ in range(8):  # mounts inside mounts, as deep as _native_tracing looks
        if probe["root_path"] == routed:
            return "".join(templates)
        for route in routes or ():
            if isinstance(route, (Mount, Host)):
                try:
                    match, child = route.matches(probe)
                except Exception:  # a convertor that refuses the prefix alone: untold
                    return None
                if match is Match.FULL:
                    break
        else:
            return None
        if isinstance(route, Mount):
            templates.append(route.path)
        probe.update(child)
        routes = route.routes
    return None


class AsyncTraceMiddleware:
    """The ASGI middleware behind :func:`instrument_fastapi` (usable on any ASGI app).

    A client that disconnects is seen only through the messages the app
    receives: an ``http.disconnect`` received before the response is complete
    (the app reading its body, ``request.is_disconnected()``, Starlette
    listening while it streams a response) ends the span as a cancellation. A
    plain response answered after the client left, with nothing received
    meanwhile, is recorded as sent: the server drops it without telling the
    app, and this middleware starts no task of its own to listen.

    Args:
        app: the wrapped ASGI application.
        trust_incoming: ``True`` (continue the incoming ``traceparent``) or
            ``False`` (start a new trace with a link to the incoming context).
        excluded_urls: regular expressions (or one comma-separated string)
            matched against the path; matching requests are not traced.
        server_request_hook: ``(span, scope)`` called when a recorded span
            starts; a hook that raises is logged once and ignored.

    Raises:
        asynctrace.ConfigurationError: an argument is not of the kind above
            (``trust_incoming="false"``, a pattern that does not compile, a
            hook that is not callable); the message names it.

    Example:
        >>> from starlette.applications import Starlette
        >>> app = AsyncTraceMiddleware(Starlette())
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        trust_incoming: bool = True,
        excluded_urls: str | Iterable[str] | None = None,
        server_request_hook: ServerHook | None = None,
    ) -> None:
        if type(trust_incoming) is not bool:
            raise asynctrace.ConfigurationError(
                f"trust_incoming: expected True or False, got {trust_incoming!r}"
            )
        callable_option("server_request_hook", server_request_hook, "(span, scope) -> None")
        self.app = app
        self.trust_incoming = trust_incoming
        self._excluded = _excluded_pattern(excluded_urls)
        self.server_request_hook = server_request_hook
        self._hook_warned = False
        self._mounts_seen = False  # apps mounted after instrument_fastapi(): at the first request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if not self._mounts_seen:
            self._mounts_seen = True
            try:
                _native_tracing(scope.get("app"), enabled=False)
            except Exception as exc:  # an odd app object: its requests still run
                logger.warning("asynctrace: mounted apps not examined: %r", exc)
        if _outer_server_span():
            # The server span is another layer's: only the caller's scopes are restored.
            carrier = _headers(scope, trust=self.trust_incoming)
            carrier.pop("traceparent", None)
            carrier.pop("Traceparent", None)  # a repeat's second value (see _headers)
            with asynctrace.remote_trace_context(carrier):
                await self.app(scope, receive, send)
            return
        if not asynctrace.is_span_group_enabled(SERVER_GROUP) or (
            self._excluded is not None and self._excluded.search(scope.get("path", ""))
        ):
            # No server span, but the handler's own spans still join the caller's trace.
            if self.trust_incoming:
                with asynctrace.remote_trace_context(_headers(scope)):
                    await self.app(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        named: list[str | None] = [None, None, None, None]
        carrier = _headers(scope, trust=self.trust_incoming, named=named)
        # The caller's scopes (per-prompt above all) decide the server span's gate too.
        with asynctrace.remote_trace_context(carrier) as remote:
            span = self._start(scope, remote, named)
            token = _attach(span)
            try:
                if not span.is_recording():
                    # Sampled out or gated off: the span still carries the trace id and
                    # flags on, so the app's own calls continue the caller's trace.
                    await self.app(scope, receive, send)
                    return
                state = _Exchange(span, scope)
                try:
                    await self.app(scope, state.wrap_receive(receive), state.wrap_send(send))
                except BaseException as exc:
                    # Raised after a complete response (a background task): the app's
                    # own; the request it answered is not changed by it.
                    if not state.ended and not (state.complete and _closed_normally(exc)):
                        state.error = exc
                    raise
                finally:
                    if not state.ended:
                        state.finish()
                    scope.pop(_RAISED, None)  # not left in a cycle with its traceback
            finally:
                _detach(token)

    def _start(
        self,
        scope: Scope,
        remote: asynctrace.remote_trace_context,
        named: list[str | None],
    ) -> Span:
        """Start the SERVER span inside the entered *remote* context.

        *named*: the request's ``Forwarded``, ``X-Forwarded-Host``, ``Host`` and
        ``User-Agent``.
        """
        scheme = str(scope.get("scheme", "http"))
        method = "GET" if scope.get("type") == "websocket" else str(scope.get("method", "GET"))
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.scheme": scheme,
            "url.path": _path(scope),
        }
        if method not in KNOWN_METHODS:
            method, known = method_attributes(method)
            attributes.update(known)
        elif scope.get("type") == "websocket":
            method = "WEBSOCKET"  # the span's name; its method is the handshake's
        forwarded, forwarded_host, host, agent = named
        authority = (
            request_authority(forwarded, forwarded_host, host, scheme)
            if forwarded is not None or forwarded_host is not None or host is not None
            else None
        )
        if authority is None:  # the request names no host: the socket's
            server = scope.get("server")
            if server and server[0]:
                authority = (str(server[0]), int(server[1]) if server[1] is not None else None)
        if authority is not None:
            attributes["server.address"] = authority[0]
            if authority[1] is not None:
                attributes["server.port"] = authority[1]
        client = scope.get("client")
        if client and client[0]:
            attributes["client.address"] = str(client[0])
        version = scope.get("http_version")
        if version:
            attributes["network.protocol.version"] = str(version)
        if agent:
            attributes["user_agent.original"] = agent
        query = scope.get("query_string")
        if query:
            attributes["url.query"] = _query(query)
        if self.trust_incoming or not remote.valid:
            span = asynctrace.start_span(
                SERVER_GROUP, method, kind=SpanKind.SERVER, attributes=attributes
            )
        else:
            incoming = trace.get_current_span().get_span_context()
            span = asynctrace.start_span(
                SERVER_GROUP,
                method,
                kind=SpanKind.SERVER,
                attributes=attributes,
                context=trace.set_span_in_context(trace.INVALID_SPAN),
                links=[Link(incoming)],
            )
        if self.server_request_hook is not None and span.is_recording():
            try:
                self.server_request_hook(span, scope)
            except Exception:
                if not self._hook_warned:
                    self._hook_warned = True
                    logger.warning(
                        "asynctrace: server_request_hook raised; ignored", exc_info=True
                    )
        return span


def _excluded_pattern(excluded_urls: str | Iterable[str] | None) -> re.Pattern[str] | None:
    """One pattern for *excluded_urls*, or :class:`asynctrace.ConfigurationError`."""
    if excluded_urls is None:
        return None
    if isinstance(excluded_urls, str):
        excluded_urls = [u.strip() for u in excluded_urls.split(",") if u.strip()]
    patterns = names_option("excluded_urls", excluded_urls, "regular expressions")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise asynctrace.ConfigurationError(
                f"excluded_urls: {pattern!r} is not a regular expression ({exc}); expected "
                "regular expressions (re syntax) matched against the path, or one "
                "comma-separated string of them"
            ) from None
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


def _attach(span: Span) -> object:
    return otel_context.attach(trace.set_span_in_context(span))


def _detach(token: object) -> None:
    try:
        otel_context.detach(token)  # type: ignore[arg-type]
    except Exception:  # pragma: no cover - detach only logs
        pass


# Websocket close codes of a close that went as planned (RFC 6455, 7.4.1): normal
# closure, going away. Not 1005: servers report a dropped connection with it too.
_NORMAL_CLOSE = frozenset({1000, 1001})


def _closed_normally(exc: BaseException) -> bool:
    """Whether *exc* is Starlette's ``WebSocketDisconnect`` for a normal close (a receive
    after the client closed the websocket as planned)."""
    return isinstance(exc, WebSocketDisconnect) and getattr(exc, "code", None) in _NORMAL_CLOSE


class _Exchange:
    """Observes one request's messages (never changes them) and ends its span.

    An HTTP response below 500 ends the span as soon as its last body message
    has been sent, so work the app does afterwards (``BackgroundTasks``) is
    outside it. Otherwise the span ends when the app returns or raises: a 5xx
    is often the error handler answering an exception that is raised next.
    A client's disconnect is known only from an ``http.disconnect`` the app
    receives: nothing here calls ``receive`` on its own (that would need a
    task per request), so a plain response sent after the client left, with
    nothing received meanwhile, is recorded as sent.
    """

    __slots__ = (
        "accepted",
        "app",
        "complete",
        "disconnected",
        "early",
        "ended",
        "error",
        "root",
        "scope",
        "span",
        "status",
    )

    def __init__(self, span: Span, scope: Scope) -> None:
        self.span = span
        self.scope = scope
        # Routing rewrites both: as the request came in, for the route template.
        root = scope.get("root_path") or ""
        self.root: str = root if root.__class__ is str else ""
        self.app: Any = scope.get("app")
        self.status: int | None = None
        self.complete = False
        self.disconnected = False
        self.accepted = False
        self.early = False
        self.ended = False
        self.error: BaseException | None = None

    def wrap_receive(self, receive: Receive) -> Receive:
        async def traced_receive() -> Message:
            message = await receive()
            kind = message.get("type")
            if kind == "http.disconnect":
                self.disconnected = True
            elif kind == "websocket.disconnect":
                # A websocket the client closes normally has ended, not been cut off.
                if self.accepted and message.get("code", 1005) in _NORMAL_CLOSE:
                    self.complete = True
                else:
                    self.disconnected = True
            return message

        return traced_receive

    def wrap_send(self, send: Send) -> Send:
        async def traced_send(message: Message) -> None:
            kind = message.get("type")
            # A websocket refused with an HTTP response (the denial extension) has a status too.
            if kind == "http.response.start" or kind == "websocket.http.response.start":
                status = message.get("status")
                if not self.disconnected:  # else the server drops it: never delivered
                    self.status = status
                self.early = type(status) is int and status < 500
                if not self.early and not self.ended:
                    raised = self.scope.pop(_RAISED, None)  # read once: the scope lets go of it
                    if isinstance(raised, Exception):
                        # The error handler answers an exception: the span ends before
                        # the client hears of it, as when the exception escaped us.
                        self.error = raised
                        self.finish()
            elif (
                kind == "websocket.close"
                and not self.accepted
                and self.status is None
                and not self.disconnected
            ):
                # Closed before it was accepted: the server refuses the handshake with 403.
                self.status = 403
            await send(message)
            if kind == "http.response.body":
                if not message.get("more_body", False):
                    # After a disconnect the server drops what is sent: not delivered.
                    self.complete = not self.disconnected
                    if self.early and not self.ended:
                        self.finish()
            elif kind == "websocket.accept":
                self.accepted = True
            elif kind == "websocket.close" or (
                kind == "websocket.http.response.body" and not message.get("more_body", False)
            ):
                self.complete = True

        return traced_send

    def finish(self) -> None:
        self.ended = True
        span = self.span
        scope = self.scope
        error = self.error
        cut_off = self.disconnected and not self.complete
        if self.disconnected and isinstance(error, _DISCONNECTS):
            # The client left and the app heard of it: Starlette's exception for that
            # (and its 500, which nobody receives) is the disconnect, not an error.
            error = None
            cut_off = True
        try:
            template = _route_template(scope, self.root, self.app)
            if template:
                method = scope.get("method")
                if scope.get("type") == "websocket":
                    method = "WEBSOCKET"
                elif method not in KNOWN_METHODS:
                    method = "HTTP"
                span.update_name(f"{method} {template}")
                span.set_attribute("http.route", template)
            if self.status is not None:
                span.set_attribute("http.response.status_code", self.status)
                if self.status >= 500:
                    span.set_attribute("error.type", str(self.status))
                    span.set_status(Status(StatusCode.ERROR))
            elif (
                isinstance(error, Exception)
                and scope.get("type") == "http"
                and not self.disconnected
                and not _custom_error_handler(scope)
            ):
                # No response started: the server (or, where this middleware was added
                # by hand inside Starlette's error handler, that handler) answers after
                # us: 500, unless the app installed its own handler for 500/Exception.
                span.set_attribute("http.response.status_code", 500)
            if isinstance(error, Exception):
                # Escaped the app, before or after a response (the error handler's
                # 500, a stream cut off): the exception names the error best.
                span.set_attribute("error.type", type(error).__qualname__)
        except Exception:  # pragma: no cover - a broken span must not break the response
            logger.debug("asynctrace: could not annotate the server span", exc_info=True)
        if error is None and cut_off:
            asynctrace.end_span(span, _ClientDisconnected())
            return
        if isinstance(error, Exception):
            # A handler's message may quote the request: its query values, its headers.
            asynctrace.end_span(span, error, secrets=_request_secrets(scope))
            return
        asynctrace.end_span(span, error)


def _request_secrets(scope: Scope) -> set[str]:
    """What of the request must not be recorded: secret-like query values, header values."""
    try:
        query = bytes(scope.get("query_string") or b"").decode("latin-1")
        found = url_secrets(f"http://h/?{query}", _SECRET_KEYS) if query else set()
        return found | header_secrets(scope.get("headers") or ())
    except Exception:  # a hostile scope: the default redaction still applies
        return set()


def _custom_error_handler(scope: Scope) -> bool:
    """Whether the app answers unhandled errors with its own handler (any status)."""
    handlers: Any = getattr(scope.get("app"), "exception_handlers", None)
    if not handlers:
        return False
    try:
        return 500 in handlers or Exception in handlers
    except TypeError:
        return True  # not a mapping we understand: claim nothing


class _ClientDisconnected(BaseException):
    """Marks a request whose client went away: a cancellation, not an error."""


# What Starlette raises in an app that receives the client's disconnect: reading the
# request body (``request.body()``, ``request.stream()``), or a websocket's next message.
_DISCONNECTS = (ClientDisconnect, WebSocketDisconnect)


def instrument_fastapi(
    app: Any,
    *,
    trust_incoming: bool = True,
    excluded_urls: str | Iterable[str] | None = None,
    server_request_hook: ServerHook | None = None,
) -> None:
    """Trace one FastAPI/Starlette *app* (before it starts), outside all its middleware.

    The tracing middleware goes around the app's whole middleware stack,
    whenever the other middlewares are added, so a request answered or
    failed by one of them (an authentication middleware's 401, a CORS
    preflight, a middleware that raises) has its server span too, and the
    spans they open are its children. Starlette's error handler is kept inside
    it, so the status the app's error handler answers with is the one
    recorded. Idempotent per app. See :class:`AsyncTraceMiddleware` for the
    arguments. On FastAPI versions with built-in telemetry, the app's own
    request tracing is turned off meanwhile, so each request has exactly one
    server span.

    Raises:
        RuntimeError: the application has already started serving (Starlette
            builds its middleware stack once).

    Example:
        >>> from fastapi import FastAPI
        >>> app = FastAPI()
        >>> instrument_fastapi(app, excluded_urls=["^/healthz$"])
        >>> uninstrument_fastapi(app)
    """
    state = app.__dict__
    if _BUILD_KEY in state:
        return
    if getattr(app, "middleware_stack", None) is not None:
        raise RuntimeError("Cannot add middleware after an application has started")
    options: dict[str, Any] = {
        "trust_incoming": trust_incoming,
        "excluded_urls": excluded_urls,
        "server_request_hook": server_request_hook,
    }
    AsyncTraceMiddleware(app, **options)  # bad options fail here, not at the first request
    build = app.build_middleware_stack
    active = [True]  # uninstrumented while another wrapper sits on ours: build plainly

    def build_middleware_stack() -> ASGIApp:
        stack: ASGIApp = build()
        return _outermost(stack, options) if active[0] else stack

    state[_BUILD_KEY] = (state.get("build_middleware_stack"), build_middleware_stack, active)
    app.build_middleware_stack = build_middleware_stack
    _native_tracing(app, enabled=False)


_BUILD_KEY = "asynctrace.build_middleware_stack"


def _outermost(stack: ASGIApp, options: dict[str, Any]) -> ASGIApp:
    """The app's built *stack* with the tracing middleware around it.

    Starlette's stack starts with its ``ServerErrorMiddleware`` (the app's
    handler for 500/``Exception``). It stays where it answers, inside the
    tracing middleware, which observes its response; at the top goes a
    pass-through one with the same handler, so a layer wrapping this stack
    afterwards and looking for one (OpenTelemetry's FastAPI instrumentation)
    still finds it. Where OpenTelemetry's instrumentation wrapped the stack
    first, the tracing middleware goes just inside its middleware, which owns
    the server span then.
    """
    if not isinstance(stack, ServerErrorMiddleware):  # an unknown shape: around it whole
        return AsyncTraceMiddleware(stack, **options)
    inner: Any = stack.app
    if type(inner).__name__ == "OpenTelemetryMiddleware" and hasattr(inner, "app"):
        inner.app = AsyncTraceMiddleware(inner.app, **options)
        return stack
    stack.app = _NoteRaised(inner)
    traced = AsyncTraceMiddleware(stack, **options)
    return _OuterErrors(traced, handler=stack.handler, debug=stack.debug)


class _OuterErrors(ServerErrorMiddleware):
    """The top of the stack, where Starlette's error handler was: it passes through.

    Starlette's own, inside the tracing middleware, has answered an exception
    already (and re-raised it for the server); answering again here would run
    the app's handler for ``500``/``Exception`` twice. It stays a
    ``ServerErrorMiddleware``, with the app's handler and ``debug``, for a
    layer that wraps the stack afterwards and looks for one. OpenTelemetry's
    instrumentation, applied after ``instrument_fastapi``, then adds an error
    handler of its own around this stack, and the app's handler runs twice
    for an unhandled exception: apply it first.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


_RAISED = "asynctrace.raised"  # the scope key of an exception on its way to the error handler


class _NoteRaised:
    """Just inside Starlette's error handler: notes an exception in the scope as it passes.

    The error handler answers it before it re-raises it; noted, the tracing
    middleware knows the exception when the answer starts.
    """

    __slots__ = ("app",)

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            scope[_RAISED] = exc
            raise


def uninstrument_fastapi(app: Any) -> None:
    """Stop tracing *app*; its middleware stack is rebuilt on the next request.

    Example:
        >>> from fastapi import FastAPI
        >>> uninstrument_fastapi(FastAPI())
    """
    state = app.__dict__
    installed = state.pop(_BUILD_KEY, None)
    if installed is None:
        return
    previous, ours, active = installed
    active[0] = False
    if state.get("build_middleware_stack") is ours:  # else wrapped since: ours stays, inert
        if previous is None:
            del state["build_middleware_stack"]
        else:
            state["build_middleware_stack"] = previous
    app.middleware_stack = None
    _native_tracing(app, enabled=True)


def _query(raw: Any) -> str:
    """``url.query``: the query string as sent, secret-like values redacted as in ``url.full``."""
    try:
        query = bytes(raw).decode("latin-1")
    except Exception:  # not bytes: nothing of it
        return REDACTED
    redacted = redact_url("?" + query, _SECRET_KEYS)
    return redacted[1:] if redacted.startswith("?") else redacted


def _path(scope: Scope) -> str:
    """The request's path, redacted: an absolute-form target (``GET http://u:p@h/x``), or a
    URL inside the path (``/proxy/http://u:p@h/x``), without userinfo; secret-like path
    parameters (``;token=...``) without their values."""
    path = str(scope.get("path", ""))
    if "@" not in path and ";" not in path and "?" not in path:
        return path  # nothing to strip: the common case
    path = redact_url(path)
    return asynctrace.redact_text(path) if "://" in path else path


_NATIVE_KEY = "asynctrace.native_tracing"


def _native_tracing(app: Any, *, enabled: bool, depth: int = 0) -> None:
    """Turn FastAPI's own request spans off while this middleware traces the app.

    FastAPI versions with built-in telemetry emit a server span (and spans per
    dependency, endpoint and serialization) for every request as soon as a
    global tracer provider exists, whatever the span groups say. With both, each
    request would have two server spans, and FastAPI's records the raw query
    string. The same holds for every app mounted under *app* (``app.mount``),
    whose requests this middleware traces too. The previous setting is
    restored by :func:`uninstrument_fastapi`.
    """
    config = getattr(app, "_telemetry", None)
    if isinstance(config, dict) and "tracing" in config:  # a FastAPI with built-in telemetry
        state = app.__dict__
        if not enabled:
            state.setdefault(_NATIVE_KEY, config["tracing"])
            config["tracing"] = False
        elif _NATIVE_KEY in state:
            config["tracing"] = state.pop(_NATIVE_KEY)
    if depth < 8:
        for route in getattr(app, "routes", None) or ():
            mounted = getattr(route, "app", None)  # a Mount's (or Host's) application
            if mounted is not None and mounted is not app and hasattr(mounted, "routes"):
                _native_tracing(mounted, enabled=enabled, depth=depth + 1)
