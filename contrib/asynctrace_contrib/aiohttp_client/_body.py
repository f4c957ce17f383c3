"""The end of a response's span: its body read, released early, or failed."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from opentelemetry.trace import Span

import asynctrace

__all__ = ["BodyWatch", "body_done"]

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


def body_done(span: Span, content: Any) -> None:
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


def _retrieve(closed: Any) -> None:
    """Read a closed connection's outcome, so that asyncio does not log it as never read."""
    if not closed.cancelled():
        closed.exception()


class BodyWatch:
    """Ends a streamed response's span once: when the response lets go of its connection
    (the connection's release callback), or when the connection is lost first (the
    session closed, the peer went away) with the response still holding it: aiohttp
    then leaves the response to the cyclic garbage collector and calls no callback.

    The watch is both callbacks itself (called without an argument on release, with the
    connection's ``closed`` future on its loss): no bound method to make per response.
    """

    __slots__ = ("closed", "content", "span")

    def __init__(self, span: Span, content: Any, connection: Any) -> None:
        self.span: Span | None = span
        self.content = content
        self.closed: asyncio.Future[None] | None = None
        connection.add_callback(self)  # first: one that raises leaves no watch
        # The connection's "closed" future (aiohttp >= 3.11), created on first use: ours
        # to read, as asyncio logs a future whose exception nobody read.
        closed = getattr(connection.protocol, "closed", None)
        if isinstance(closed, asyncio.Future):
            closed.remove_done_callback(_retrieve)  # once per connection
            closed.add_done_callback(_retrieve)
            closed.add_done_callback(self)
            self.closed = closed

    def __call__(self, *lost: Any) -> None:
        """Released (no argument), or the connection lost (its ``closed`` future)."""
        span = self.span
        if span is not None:
            self.span = None
            closed = self.closed
            if closed is not None and not lost:
                closed.remove_done_callback(self)
            body_done(span, self.content)
