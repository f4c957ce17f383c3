"""aiohttp client instrumentation: ``traceparent`` on every request, a span per request.

Every request carries the ambient W3C context (``traceparent``/``tracestate``),
whether or not a span is recorded, so a server downstream joins the caller's
trace. A CLIENT span per request is recorded only while the ``per_prompt``
group is enabled (checked per request, before any attribute work): HTTP calls
scale with prompts x turns x tool calls, which is the volume ``per_prompt``
exists to fence off. The span covers the response body: it ends when aiohttp
lets go of the connection — the body has been read, or the response is
released, closed or collected — or the connection is lost first (the session
closed); for a websocket, when it closes. In the middleware form, a redirect
hop or a retry is an attempt of its own, with ``http.request.resend_count``.

Two ways in, both reversible and without side effects on import:

- :func:`trace_config` for one session:
  ``aiohttp.ClientSession(trace_configs=[trace_config()])``;
- :func:`instrument_aiohttp_client` for every session created afterwards
  (sessions created before it are not covered); undone by
  :func:`uninstrument_aiohttp_client`.
"""

from __future__ import annotations

import asynctrace

try:
    import aiohttp  # noqa: F401  # the extra, checked before the modules that use it
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise asynctrace.MissingExtraError("aiohttp", "aiohttp") from exc

from asynctrace_contrib._http import DEFAULT_SECRET_KEYS

from ._install import instrument_aiohttp_client, uninstrument_aiohttp_client
from ._middleware import client_middleware
from ._options import RequestHook as RequestHook
from ._requests import GATE_GROUP as GATE_GROUP
from ._trace_config import trace_config

__all__ = [
    "DEFAULT_SECRET_KEYS",
    "client_middleware",
    "instrument_aiohttp_client",
    "trace_config",
    "uninstrument_aiohttp_client",
]
