"""A benchmark server in its own process. Usage: python _http_server.py KIND PORT_FILE

KIND: aiohttp | fastapi-plain | fastapi-asynctrace (the fast provider) |
fastapi-asynctrace-sdk (the SDK provider) | fastapi-otel. Writes the bound port
to PORT_FILE once listening. SDK spans go to a SimpleSpanProcessor with a
discarding exporter, fast-provider spans to an export queue whose thread
discards them, so the figure is the instrumentation, not an exporter.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class Discard(SpanExporter):
    """Accepts every span and keeps nothing."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def provider() -> TracerProvider:
    """An SDK provider that discards what it records."""
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(Discard()))
    return p


class _DiscardSink:
    """An export queue's sink that keeps nothing."""

    def export(self, batch: list[Any]) -> tuple[int, int]:
        return len(batch), 0

    def flush(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def fast_provider() -> Any:
    """asynctrace's fast provider, its spans handed to a queue whose thread discards them."""
    from asynctrace import FastTracerProvider
    from asynctrace.export import QueuedSpanProcessor

    p = FastTracerProvider()
    p.add_queue(QueuedSpanProcessor(_DiscardSink(), name="discard"))
    return p


def main() -> None:
    kind, port_file = sys.argv[1], Path(sys.argv[2])
    if kind == "aiohttp":
        from aiohttp import web

        async def hello(request: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_get("/items/{item_id}", hello)

        async def on_startup(app: web.Application) -> None:
            pass

        import socket

        # proto=IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections;
        # without it, small keep-alive responses can stall ~40 ms (Nagle + delayed ACK).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        port_file.write_text(str(sock.getsockname()[1]))
        web.run_app(app, sock=sock, print=None)
        return
    import socket

    import uvicorn
    from fastapi import FastAPI

    fastapi_app = FastAPI()

    @fastapi_app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, Any]:
        return {"item": item_id}

    if kind in ("fastapi-asynctrace", "fastapi-asynctrace-sdk", "fastapi-asynctrace-scopes"):
        from asynctrace_contrib.fastapi import instrument_fastapi

        import asynctrace

        chosen = provider() if kind == "fastapi-asynctrace-sdk" else fast_provider()
        asynctrace.enable_telemetry(
            chosen,
            span_groups="http_server",
            propagate_scopes=kind == "fastapi-asynctrace-scopes",
        )
        instrument_fastapi(fastapi_app)
    elif kind == "fastapi-otel":
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(fastapi_app, tracer_provider=provider())
    # proto=IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections;
    # without it, small keep-alive responses can stall ~40 ms (Nagle + delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port_file.write_text(str(sock.getsockname()[1]))
    config = uvicorn.Config(fastapi_app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
