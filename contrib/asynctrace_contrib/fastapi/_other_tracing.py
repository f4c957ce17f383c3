"""Other tracing of the same requests, so each request has exactly one server span.

OpenTelemetry's ASGI middleware (or any HTTP instrumentation that asks the ones
below it to stand aside), and FastAPI's own built-in telemetry.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY as _SUPPRESS_HTTP
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS
from opentelemetry.trace import SpanKind

__all__ = ["native_tracing", "outer_server_span"]


def outer_server_span() -> bool:
    """Whether another instrumentation already handles this request on the server side.

    OpenTelemetry's ASGI middleware (``opentelemetry-instrumentation-fastapi``)
    wraps the whole application and makes its SERVER span current, and any
    HTTP instrumentation may ask the ones below it to stand aside with
    OpenTelemetry's ``suppress_http_instrumentation`` context key.
    """
    current = otel_context.get_current()  # once: three reads of it follow
    if current.get(_SUPPRESS_HTTP) or current.get(_SUPPRESS):
        return True
    span = trace.get_current_span(current)
    return getattr(span, "kind", None) is SpanKind.SERVER and span.is_recording()


_NATIVE_KEY = "asynctrace.native_tracing"


def native_tracing(app: Any, *, enabled: bool, depth: int = 0) -> None:
    """Turn FastAPI's own request spans off while this middleware traces the app.

    FastAPI versions with built-in telemetry emit a server span (and spans per
    dependency, endpoint and serialization) for every request as soon as a
    global tracer provider exists, whatever the span groups say. With both, each
    request would have two server spans, and FastAPI's records the raw query
    string. The same holds for every app mounted under *app* (``app.mount``),
    whose requests this middleware traces too. The previous setting is
    restored by :func:`uninstrument_fastapi`.
    """
    config = getattr(app, "_telemetry", None)
    if isinstance(config, dict) and "tracing" in config:  # a FastAPI with built-in telemetry
        state = app.__dict__
        if not enabled:
            state.setdefault(_NATIVE_KEY, config["tracing"])
            config["tracing"] = False
        elif _NATIVE_KEY in state:
            config["tracing"] = state.pop(_NATIVE_KEY)
    if depth < 8:
        for route in getattr(app, "routes", None) or ():
            mounted = getattr(route, "app", None)  # a Mount's (or Host's) application
            if mounted is not None and mounted is not app and hasattr(mounted, "routes"):
                native_tracing(mounted, enabled=enabled, depth=depth + 1)
