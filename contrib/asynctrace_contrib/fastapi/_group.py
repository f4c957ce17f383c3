"""The span group of the SERVER spans, registered when the package is imported."""

from __future__ import annotations

import asynctrace

__all__ = ["SERVER_GROUP"]

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
