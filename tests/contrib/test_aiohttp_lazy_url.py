"""aiohttp client: a request's URL attributes (redacted ``url.full``, ``server.address``,
``server.port``) are computed by an export thread, not on the event loop, and every
exporter still records them; a request hook reading the span's attributes sees them.
Requests go to a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from asynctrace_contrib.aiohttp_client import _attributes, client_middleware

import asynctrace as at
from asynctrace.export import read_chrome_trace


def app() -> web.Application:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    application = web.Application()
    application.router.add_get("/{tail:.*}", ok)
    return application


@pytest.fixture
def threads_computing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads the client's URL attributes are computed on, one entry per call."""
    seen: list[str] = []
    real = _attributes.server_attributes

    def noted(url: Any, keys: Any) -> dict[str, Any]:
        seen.append(threading.current_thread().name)
        return real(url, keys)

    monkeypatch.setattr(_attributes, "server_attributes", noted)
    return seen


@pytest.fixture
def telemetry(tmp_path: Path) -> Iterator[Any]:
    """The fast provider with the chrome and memory exporters."""
    handle = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome", "memory"],
            "output_dir": str(tmp_path),
            "provider": "fast",
            "schedule_delay_millis": 60_000,  # the export threads run on flush() only
        }
    )
    try:
        yield handle
    finally:
        handle.shutdown()


def test_url_attributes_are_computed_off_the_loop(
    aiohttp_server: Any, telemetry: Any, threads_computing: list[str]
) -> None:
    """Three requests (two to one URL, whose attributes are computed once): no URL
    attribute is computed on the loop's thread, and the chrome file and the memory
    exporter both hold them, redacted."""
    base = aiohttp_server(app())
    loop_thread: list[str] = []

    async def main() -> None:
        loop_thread.append(threading.current_thread().name)
        async with aiohttp.ClientSession(middlewares=(client_middleware(),)) as session:
            for path in ("/a?token=abc", "/a?token=abc", "/b"):
                async with session.get(base + path) as response:
                    await response.read()
        assert threads_computing == []  # none while the loop ran

    asyncio.run(main())
    assert telemetry.flush(5.0)
    assert len(threads_computing) == 2  # the repeated URL's: computed once
    assert threads_computing
    assert loop_thread[0] not in threads_computing
    host, port = base.removeprefix("http://").split(":")
    expected = [
        {
            "http.request.method": "GET",
            "url.full": base + path,
            "server.address": host,
            "server.port": int(port),
            "http.response.status_code": 200,
        }
        for path in ("/a?token=REDACTED", "/a?token=REDACTED", "/b")
    ]
    memory = [dict(s.attributes) for s in telemetry.memory_exporter.get_finished_spans()]
    assert memory == expected
    events = read_chrome_trace(telemetry.trace_file).events
    chrome = [e["args"] for e in events if e.get("ph") == "X" and e["name"] == "GET"]
    assert [{k: args[k] for k in expected[0]} for args in chrome] == expected


def test_a_request_hook_sees_the_url_attributes(
    aiohttp_server: Any, telemetry: Any, threads_computing: list[str]
) -> None:
    """A hook reading ``span.attributes`` gets them then (computed on its thread)."""
    base = aiohttp_server(app())
    seen: list[Any] = []

    def hook(span: Any, params: Any) -> None:
        seen.append(span.attributes.get("url.full"))

    async def main() -> None:
        middleware = client_middleware(request_hook=hook)
        async with aiohttp.ClientSession(middlewares=(middleware,)) as session:
            async with session.get(base + "/c") as response:
                await response.read()

    asyncio.run(main())
    assert seen == [base + "/c"]
    assert threads_computing == [threading.main_thread().name]
