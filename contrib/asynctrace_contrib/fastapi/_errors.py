"""Starlette's error handler and the tracing middleware: which answers, and what it saw.

Starlette's ``ServerErrorMiddleware`` answers an exception escaping the app
(with the app's handler for ``500``/``Exception``) and re-raises it. The tracing
middleware sits around it; :class:`NoteRaised`, just inside it, notes the
exception in the scope, and :class:`OuterErrors` takes its place at the top.
"""

from __future__ import annotations

from typing import Any

from ._asgi import ASGIApp, Receive, Scope, Send, ServerErrorMiddleware

__all__ = ["RAISED", "NoteRaised", "OuterErrors", "custom_error_handler"]

RAISED = "asynctrace.raised"  # the scope key of an exception on its way to the error handler


class NoteRaised:
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
            scope[RAISED] = exc
            raise


class OuterErrors(ServerErrorMiddleware):
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


def custom_error_handler(scope: Scope) -> bool:
    """Whether the app answers unhandled errors with its own handler (any status)."""
    handlers: Any = getattr(scope.get("app"), "exception_handlers", None)
    if not handlers:
        return False
    try:
        return 500 in handlers or Exception in handlers
    except TypeError:
        return True  # not a mapping we understand: claim nothing
