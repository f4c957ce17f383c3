"""Run in a fresh process by tests/test_interop.py: asynctrace as OpenTelemetry's global provider.

Usage: python _interop_child.py PROVIDER  (``fast`` or ``sdk``)

OpenTelemetry's global tracer provider can be set once per process, so the
tests that need asynctrace to own it run here. The script takes a tracer from
the global before anything is configured (as a library does at import),
configures asynctrace, instruments aiohttp's client with OpenTelemetry's own
``AioHttpClientInstrumentor`` and then, on one event loop:

- requests a real aiohttp server and a real uvicorn server on 127.0.0.1 from
  inside asynctrace spans (each server echoes the ``traceparent`` it got);
- nests plain ``trace.get_tracer(...)`` spans and asynctrace spans both ways.

It flushes and prints one JSON line: every finished span (ids as hex), the
headers each server saw, and what the global provider is.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from opentelemetry import trace
from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

import asynctrace


def _load_servers() -> Any:
    """tests/contrib/conftest.py, whose real servers the suite already uses, loaded by path."""
    path = Path(__file__).parent / "contrib" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_contrib_servers", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


serve_asgi = _load_servers().serve_asgi

EARLY = trace.get_tracer("interop.early")  # taken before configure, as libraries do


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def _span_record(span: Any) -> dict[str, Any]:
    """The parts of a ReadableSpan the tests check, JSON-ready."""
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": _hex(span.context.trace_id, 32),
        "span_id": _hex(span.context.span_id, 16),
        "parent_id": _hex(parent.span_id, 16) if parent is not None else None,
        "parent_remote": parent.is_remote if parent is not None else None,
        "kind": span.kind.name,
        "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
    }


async def _echo(request: web.Request) -> web.Response:
    return web.json_response({"traceparent": request.headers.get("traceparent")})


async def _asgi_echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A raw ASGI app: answers every HTTP request with the traceparent it got."""
    if scope["type"] != "http":
        return
    headers = dict(scope["headers"])
    body = json.dumps({"traceparent": (headers.get(b"traceparent") or b"").decode()}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        return await response.json()


async def _scenario() -> dict[str, Any]:
    ids: dict[str, str] = {}
    seen: dict[str, Any] = {}

    app = web.Application()
    app.router.add_get("/echo", _echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    aiohttp_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/echo"  # type: ignore[union-attr]
    uvicorn = serve_asgi(_asgi_echo)
    uvicorn_url, stop_uvicorn = uvicorn.url, uvicorn.stop
    try:
        async with aiohttp.ClientSession() as session:
            # 1. HTTP client spans of the third-party instrumentation under asynctrace spans.
            with asynctrace.umbrella_span("step", "interop.step") as step:
                ids["step"] = _hex(step.get_span_context().span_id, 16)
                with asynctrace.managed_span("generation", "interop.generate") as gen:
                    ids["generate"] = _hex(gen.get_span_context().span_id, 16)
                    seen["aiohttp"] = await _get_json(session, aiohttp_url)
                    seen["after_request_current"] = _hex(
                        trace.get_current_span().get_span_context().span_id, 16
                    )
                seen["uvicorn"] = await _get_json(session, f"{uvicorn_url}/echo")

            # 2. A plain OpenTelemetry tracer nested both ways with asynctrace spans.
            plain = trace.get_tracer("interop.plain")
            with asynctrace.umbrella_span("step", "interop.outer"):
                with plain.start_as_current_span("otel.middle") as middle:
                    ids["middle"] = _hex(middle.get_span_context().span_id, 16)
                    with asynctrace.managed_span("reward", "interop.inner"):
                        with EARLY.start_as_current_span("otel.early") as early:
                            early.set_attribute("early.value", 7)
            with plain.start_as_current_span("otel.root"):
                with asynctrace.umbrella_span("step", "interop.under_otel"):
                    await asyncio.sleep(0)
    finally:
        stop_uvicorn()
        await runner.cleanup()
    return {"ids": ids, "seen": seen}


def main() -> None:
    """Configure, run the scenario, print the result as one JSON line."""
    provider = sys.argv[1]
    telemetry = asynctrace.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["memory"], "provider": provider}
    )
    instrumentor = AioHttpClientInstrumentor()
    instrumentor.instrument()
    try:
        result = asyncio.run(_scenario())
    finally:
        instrumentor.uninstrument()
    flushed = telemetry.flush(10.0)
    memory = telemetry.memory_exporter
    assert memory is not None
    result.update(
        {
            "flushed": flushed,
            "owns_global": telemetry.owns_global_provider,
            "global_type": type(trace.get_tracer_provider()).__name__,
            "target_type": type(getattr(trace.get_tracer_provider(), "target", None)).__name__,
            "spans": [_span_record(span) for span in memory.get_finished_spans()],
        }
    )
    telemetry.shutdown()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
