"""FastAPI / ASGI server instrumentation: one SERVER span per request, per app.

:func:`instrument_fastapi` puts an ASGI middleware around one application's
whole middleware stack (no global class swap; importing this module changes
no framework state). Each
HTTP request becomes a SERVER span named ``"{METHOD} {route template}"``
(``GET /items/{item_id}``, never the raw path; ``HTTP`` for a method not
known, see :mod:`asynctrace_contrib._http_values`), continuing the caller's W3C
context, covering the response to its last byte (not the background tasks
after it). Websocket connections get
one span each; lifespan events pass through untouched.

Server spans are gated on the ``http_server`` group, registered here as an
umbrella with per-item cardinality (one span per request), so it is not part
of ``per_step``: a server enables it in its own configuration, e.g.
``span_groups: "default,http_server"``.
"""

from __future__ import annotations

from ._asgi import ASGIApp as ASGIApp
from ._asgi import Message as Message
from ._asgi import Receive as Receive
from ._asgi import Scope as Scope
from ._asgi import Send as Send
from ._asgi import ServerHook as ServerHook
from ._group import SERVER_GROUP
from ._install import instrument_fastapi, uninstrument_fastapi
from ._middleware import AsyncTraceMiddleware

__all__ = ["SERVER_GROUP", "AsyncTraceMiddleware", "instrument_fastapi", "uninstrument_fastapi"]
