"""The end of a response's span: its body read, released early, or failed."""

from __future__ import annotations

from typing import Any

import aiohttp
from opentelemetry.trace import Span

import asynctrace

__all__ = ["body_done"]

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
