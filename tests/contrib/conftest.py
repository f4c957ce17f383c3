"""Real servers on 127.0.0.1: a uvicorn-served FastAPI app and an aiohttp web server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import uvicorn
from aiohttp import web
from asynctrace_contrib.aiohttp_client import client_middleware, trace_config


@dataclass
class Served:
    """A server running in its own thread and event loop."""

    url: str
    stop: Any


def serve_asgi(app: Any) -> Served:
    """Serve *app* with uvicorn on a free port; returns its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    started = threading.Event()
    port: list[int] = []

    def run() -> None:
        async def main() -> None:
            task = asyncio.create_task(server.serve())
            while not server.started:
                await asyncio.sleep(0.01)
            port.append(server.servers[0].sockets[0].getsockname()[1])
            started.set()
            await task

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(20), "uvicorn did not start"

    def stop() -> None:
        server.should_exit = True
        thread.join(10)

    return Served(f"http://127.0.0.1:{port[0]}", stop)


def serve_aiohttp(app: web.Application) -> Served:
    """Serve an aiohttp web app on a free port in its own thread."""
    started = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        # Handlers still running at stop (a test's slow response) are not waited for.
        runner = web.AppRunner(app, shutdown_timeout=0.2)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        holder["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(20)

    def stop() -> None:
        holder["loop"].call_soon_threadsafe(holder["loop"].stop)
        thread.join(10)

    return Served(f"http://127.0.0.1:{holder['port']}", stop)


@pytest.fixture
def asgi_server() -> Iterator[Any]:
    """A factory serving ASGI apps, stopped after the test."""
    servers: list[Served] = []

    def start(app: Any) -> str:
        served = serve_asgi(app)
        servers.append(served)
        return served.url

    yield start
    for served in servers:
        served.stop()


@pytest.fixture
def aiohttp_server() -> Iterator[Any]:
    """A factory serving aiohttp web apps, stopped after the test."""
    servers: list[Served] = []

    def start(app: web.Application) -> str:
        served = serve_aiohttp(app)
        servers.append(served)
        return served.url

    yield start
    for served in servers:
        served.stop()


@pytest.fixture(params=["middleware", "trace_config"])
def traced(request: pytest.FixtureRequest) -> Any:
    """Session keyword arguments for either client form, given the same options."""

    def make(**options: Any) -> dict[str, Any]:
        if request.param == "middleware":
            return {"middlewares": (client_middleware(**options),)}
        return {"trace_configs": [trace_config(**options)]}

    return make


@pytest.fixture(scope="module")
def areal() -> Any:
    """AReaL 1.0.4's own ``perf_tracer``, loaded without its training stack (else skip)."""
    from _areal_loader import AnchorMissing, load_perf_tracer

    try:
        return load_perf_tracer()
    except AnchorMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture
def areal_reset(areal: Any) -> Iterator[None]:
    """After the test, AReaL's tracer and the drop-in reset and asynctrace shut down; each
    test sees its own warnings (the drop-in logs each once)."""
    from asynctrace_contrib import areal as ours
    from asynctrace_contrib.areal import _values as ours_values

    import asynctrace as at

    ours_values._warned.clear()
    yield
    for mod in (areal, ours):
        mod.reset()
        mod.set_task_id(None)
        mod.set_session_id(None)
    at.shutdown()
