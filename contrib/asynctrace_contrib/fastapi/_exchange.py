"""One request's messages, observed (never changed), and the end of its span.

When the span ends (a response's last byte, the app returning or raising), its
name (the route template), its status, and a client's disconnect, told apart
from an error.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

import asynctrace
from asynctrace_contrib._http_values import KNOWN_METHODS

from ._asgi import ClientDisconnect, Message, Receive, Scope, Send, WebSocketDisconnect
from ._errors import RAISED, custom_error_handler
from ._request import request_secrets
from ._routes import route_template

__all__ = ["Exchange", "closed_normally"]

logger = logging.getLogger("asynctrace")

# Websocket close codes of a close that went as planned (RFC 6455, 7.4.1): normal
# closure, going away. Not 1005: servers report a dropped connection with it too.
_NORMAL_CLOSE = frozenset({1000, 1001})


def closed_normally(exc: BaseException) -> bool:
    """Whether *exc* is Starlette's ``WebSocketDisconnect`` for a normal close (a receive
    after the client closed the websocket as planned)."""
    return isinstance(exc, WebSocketDisconnect) and getattr(exc, "code", None) in _NORMAL_CLOSE


class Exchange:
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
        """*receive*, noting a disconnect and a websocket's normal close."""

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
        """*send*, noting the status, the response's end and when the span may end."""

        async def traced_send(message: Message) -> None:
            kind = message.get("type")
            # A websocket refused with an HTTP response (the denial extension) has a status too.
            if kind == "http.response.start" or kind == "websocket.http.response.start":
                status = message.get("status")
                if not self.disconnected:  # else the server drops it: never delivered
                    self.status = status
                self.early = type(status) is int and status < 500
                if not self.early and not self.ended:
                    raised = self.scope.pop(RAISED, None)  # read once: the scope lets go of it
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
        """End the span with the route, status and error the exchange saw."""
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
            template = route_template(scope, self.root, self.app)
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
                and not custom_error_handler(scope)
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
            asynctrace.end_span(span, error, secrets=request_secrets(scope))
            return
        asynctrace.end_span(span, error)


class _ClientDisconnected(BaseException):
    """Marks a request whose client went away: a cancellation, not an error."""


# What Starlette raises in an app that receives the client's disconnect: reading the
# request body (``request.body()``, ``request.stream()``), or a websocket's next message.
_DISCONNECTS = (ClientDisconnect, WebSocketDisconnect)
