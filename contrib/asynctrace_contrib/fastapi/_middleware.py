"""The ASGI middleware: one SERVER span per request or websocket, in the caller's trace."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind

import asynctrace
from asynctrace_contrib._http import callable_option
from asynctrace_contrib._http_values import KNOWN_METHODS, method_attributes, request_authority

from ._asgi import ASGIApp, Receive, Scope, Send, ServerHook
from ._errors import RAISED
from ._exchange import Exchange, closed_normally
from ._group import SERVER_GROUP
from ._other_tracing import native_tracing, outer_server_span
from ._request import request_headers, request_path, request_query
from ._routes import excluded_pattern

__all__ = ["AsyncTraceMiddleware"]

logger = logging.getLogger("asynctrace")


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
        self._excluded = excluded_pattern(excluded_urls)
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
                native_tracing(scope.get("app"), enabled=False)
            except Exception as exc:  # an odd app object: its requests still run
                logger.warning("asynctrace: mounted apps not examined: %r", exc)
        if outer_server_span():
            # The server span is another layer's: only the caller's scopes are restored.
            carrier = request_headers(scope, trust=self.trust_incoming)
            carrier.pop("traceparent", None)
            carrier.pop("Traceparent", None)  # a repeat's second value (see request_headers)
            with asynctrace.remote_trace_context(carrier):
                await self.app(scope, receive, send)
            return
        if not asynctrace.is_span_group_enabled(SERVER_GROUP) or (
            self._excluded is not None and self._excluded.search(scope.get("path", ""))
        ):
            # No server span, but the handler's own spans still join the caller's trace.
            if self.trust_incoming:
                with asynctrace.remote_trace_context(request_headers(scope)):
                    await self.app(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        named: list[str | None] = [None, None, None, None]
        carrier = request_headers(scope, trust=self.trust_incoming, named=named)
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
                state = Exchange(span, scope)
                try:
                    await self.app(scope, state.wrap_receive(receive), state.wrap_send(send))
                except BaseException as exc:
                    # Raised after a complete response (a background task): the app's
                    # own; the request it answered is not changed by it.
                    if not state.ended and not (state.complete and closed_normally(exc)):
                        state.error = exc
                    raise
                finally:
                    if not state.ended:
                        state.finish()
                    scope.pop(RAISED, None)  # not left in a cycle with its traceback
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
            "url.path": request_path(scope),
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
            attributes["url.query"] = request_query(query)
        if self.trust_incoming or not remote.valid:
            span = asynctrace.start_span(  # request_path, request_query: the URL redacted
                SERVER_GROUP,
                method,
                kind=SpanKind.SERVER,
                attributes=attributes,
                urls_redacted=True,
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
                urls_redacted=True,
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


def _attach(span: Span) -> object:
    return otel_context.attach(trace.set_span_in_context(span))


def _detach(token: object) -> None:
    try:
        otel_context.detach(token)  # type: ignore[arg-type]
    except Exception:  # pragma: no cover - detach only logs
        pass
