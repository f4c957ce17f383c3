"""Tracing one FastAPI/Starlette app: the middleware put outside its whole stack, and taken off."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._asgi import ASGIApp, ServerErrorMiddleware, ServerHook
from ._errors import NoteRaised, OuterErrors
from ._middleware import AsyncTraceMiddleware
from ._other_tracing import native_tracing

__all__ = ["instrument_fastapi", "uninstrument_fastapi"]


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
    native_tracing(app, enabled=False)


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
    stack.app = NoteRaised(inner)
    traced = AsyncTraceMiddleware(stack, **options)
    return OuterErrors(traced, handler=stack.handler, debug=stack.debug)


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
    native_tracing(app, enabled=True)
