"""What this package takes from ASGI and Starlette: the ASGI types, and Starlette's names.

Starlette is the ``fastapi`` extra: without it, importing the package raises
:class:`asynctrace.MissingExtraError` here, before anything is registered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from opentelemetry.trace import Span

import asynctrace

try:
    from starlette.middleware.errors import ServerErrorMiddleware
    from starlette.requests import ClientDisconnect
    from starlette.routing import Host, Match, Mount
    from starlette.websockets import WebSocketDisconnect
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise asynctrace.MissingExtraError("fastapi", "starlette") from exc

__all__ = [
    "ASGIApp",
    "ClientDisconnect",
    "Host",
    "Match",
    "Message",
    "Mount",
    "Receive",
    "Scope",
    "Send",
    "ServerErrorMiddleware",
    "ServerHook",
    "WebSocketDisconnect",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ServerHook = Callable[[Span, Scope], None]
