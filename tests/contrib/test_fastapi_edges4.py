"""FastAPI server spans over a real uvicorn server: mounts with path parameters, and
clients that leave while the app still reads from them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from asynctrace_contrib.fastapi import AsyncTraceMiddleware, instrument_fastapi
from fastapi import FastAPI, Request, WebSocket
from opentelemetry.trace import StatusCode
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asynctrace.testing import CapturedSpans


def attrs(span: Any) -> dict[str, Any]:
    """A span's attributes as a dict."""
    return dict(span.attributes or {})


def wait_for(spans: CapturedSpans, count: int) -> list[Any]:
    """The finished spans, once *count* of them ended (the server ends its span after
    the client may have seen the response)."""
    deadline = time.monotonic() + 10
    while len(spans.spans) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return list(spans.spans)


def get_ok(url: str, *paths: str) -> None:
    """GET each of *paths* from the server at *url*, one after another: each answers 200."""

    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            for path in paths:
                async with session.get(url + path) as response:
                    assert response.status == 200

    asyncio.run(main())


@pytest.fixture
def quiet_uvicorn() -> Iterator[None]:
    """uvicorn logs the exception Starlette raises for a client that left: not ours."""
    log = logging.getLogger("uvicorn.error")
    level = log.level
    log.setLevel(logging.CRITICAL)
    yield
    log.setLevel(level)


def tenants_app() -> FastAPI:
    """A FastAPI app whose sub-apps are mounted under path parameters, two deep."""
    app = FastAPI()
    sub = FastAPI()
    deeper = FastAPI()

    @sub.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @sub.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.close()

    @deeper.get("/runs/{run}")
    async def run(run: str) -> str:
        return run

    sub.mount("/envs/{env}", deeper)
    app.mount("/tenants/{tenant}", sub)
    instrument_fastapi(app)
    return app


def test_mount_path_parameters_never_reach_the_span_name(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """Each mount contributes its template, not the path it matched: one name per route."""
    url = asgi_server(tenants_app())

    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            for tenant in ("acme", "globex", "secret-customer-42"):
                async with session.get(f"{url}/tenants/{tenant}/items/7") as response:
                    assert response.status == 200
            async with session.get(f"{url}/tenants/acme/envs/gym-3/runs/r9") as response:
                assert response.status == 200
            ws_url = url.replace("http://", "ws://") + "/tenants/initech/ws"
            async with session.ws_connect(ws_url) as ws:
                await ws.receive()

    asyncio.run(main())
    finished = wait_for(spans, 5)
    assert sorted(s.name for s in finished) == [
        "GET /tenants/{tenant}/envs/{env}/runs/{run}",
        "GET /tenants/{tenant}/items/{item_id}",
        "GET /tenants/{tenant}/items/{item_id}",
        "GET /tenants/{tenant}/items/{item_id}",
        "WEBSOCKET /tenants/{tenant}/ws",
    ]
    for span in finished:
        assert attrs(span)["http.route"] == span.name.split(" ", 1)[1]
    for value in ("acme", "globex", "secret-customer-42", "gym-3", "r9", "initech"):
        assert not any(value in s.name or value in attrs(s)["http.route"] for s in finished)


def test_the_servers_own_prefix_stays_and_a_mounted_app_is_named_by_its_mount(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """The root_path the server gives (outside the app) prefixes the name as sent; a mounted
    app that routes nothing itself is named by its mount's template."""

    async def page(request: Request) -> PlainTextResponse:
        return PlainTextResponse("page")

    traced = AsyncTraceMiddleware(
        Starlette(
            routes=[
                Mount("/t/{tenant}", routes=[Route("/pages/{page}", page)]),
                Mount("/files/{owner}", app=PlainTextResponse("file")),
            ]
        )
    )

    async def behind_proxy(scope: Any, receive: Any, send: Any) -> None:
        # What a server configured with root_path="/pre" passes on.
        if scope["type"] in ("http", "websocket"):
            scope = dict(scope, root_path="/pre", path="/pre" + scope["path"])
        await traced(scope, receive, send)

    url = asgi_server(behind_proxy)

    get_ok(url, "/t/acme/pages/9", "/files/secret-owner/a.txt")
    names = sorted(s.name for s in wait_for(spans, 2))
    assert names == ["GET /pre/files/{owner}", "GET /pre/t/{tenant}/pages/{page}"]


def test_a_cut_off_upload_is_a_cancellation(
    asgi_server: Any, spans: CapturedSpans, quiet_uvicorn: None
) -> None:
    """A client that leaves while the handler reads its body: Starlette's ClientDisconnect
    (and the 500 nobody receives) is the disconnect, not an error; no status recorded."""
    app = FastAPI()

    @app.post("/body")
    async def body(request: Request) -> dict[str, int]:
        return {"size": len(await request.body())}

    @app.post("/stream")
    async def stream(request: Request) -> dict[str, int]:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        return {"size": size}

    @app.post("/json")
    async def json_body(payload: dict[str, Any]) -> dict[str, int]:
        return {"keys": len(payload)}

    instrument_fastapi(app)
    url = asgi_server(app)
    port = int(url.rsplit(":", 1)[1])

    async def upload_and_leave(path: str, count: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            'Content-Length: 100000\r\n\r\n{"a":'.encode()
        )
        await writer.drain()
        await asyncio.sleep(0.1)  # the handler is reading the body
        writer.close()
        for _ in range(500):  # the span ends once the server has seen the disconnect
            if len(spans.spans) >= count:
                return
            await asyncio.sleep(0.01)

    async def main() -> None:
        for count, path in enumerate(("/body", "/stream", "/json"), 1):
            await upload_and_leave(path, count)

    asyncio.run(main())
    finished = wait_for(spans, 3)
    assert sorted(s.name for s in finished) == ["POST /body", "POST /json", "POST /stream"]
    for span in finished:
        assert attrs(span).get("asynctrace.cancelled") is True, span.name
        assert span.status.status_code is StatusCode.UNSET, span.name
        assert "error.type" not in attrs(span), span.name
        assert "http.response.status_code" not in attrs(span), span.name  # never delivered


def echo_app() -> FastAPI:
    """The canonical websocket echo loop: the disconnect's exception escapes it."""
    app = FastAPI()

    @app.websocket("/ws")
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        while True:
            await websocket.send_text(await websocket.receive_text())

    instrument_fastapi(app)
    return app


def test_a_dropped_websocket_is_a_cancellation(
    asgi_server: Any, spans: CapturedSpans, quiet_uvicorn: None
) -> None:
    """A connection dropped without a close frame: the WebSocketDisconnect the handler lets
    escape is the client leaving, not an error."""
    url = asgi_server(echo_app()).replace("http://", "ws://") + "/ws"

    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(url)
            await ws.send_str("hi")
            assert (await ws.receive()).data == "hi"
            ws._response.connection.transport.abort()  # type: ignore[union-attr]  # no close frame
            for _ in range(500):
                if spans.spans:
                    break
                await asyncio.sleep(0.01)
            await ws.close()

    asyncio.run(main())
    (server,) = wait_for(spans, 1)
    assert server.name == "WEBSOCKET /ws"
    assert attrs(server).get("asynctrace.cancelled") is True
    assert server.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(server)


def test_a_websocket_closed_normally_ends_plainly_though_the_handler_raises(
    asgi_server: Any, spans: CapturedSpans, quiet_uvicorn: None
) -> None:
    """A close with code 1000 ends the websocket: neither cancelled nor an error, though
    the loop above lets WebSocketDisconnect(1000) escape."""
    url = asgi_server(echo_app()).replace("http://", "ws://") + "/ws"

    async def main() -> None:
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            await ws.send_str("hi")
            assert (await ws.receive()).data == "hi"
            await ws.close(code=1000)

    asyncio.run(main())
    (server,) = wait_for(spans, 1)
    assert "asynctrace.cancelled" not in attrs(server)
    assert server.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(server)


def test_a_routers_include_prefix_is_in_the_span_name(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """``include_router(router, prefix="/api")``: the route matched may keep its router's
    path only (FastAPI from 0.16x); the name is the whole template all the same."""
    from fastapi import APIRouter

    app = FastAPI()
    router = APIRouter(prefix="/r/{ver}")

    @router.get("/x/{a}")
    async def x(a: str, ver: str) -> int:
        return 1

    @router.websocket("/ws/{room}")
    async def ws(websocket: WebSocket, room: str, ver: str) -> None:
        await websocket.accept()
        await websocket.close()

    app.include_router(router, prefix="/api")
    sub = FastAPI()
    sub.include_router(router, prefix="/v")
    app.mount("/tenants/{tenant}", sub)
    instrument_fastapi(app)
    url = asgi_server(app)

    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/api/r/v1/x/5") as response:
                assert response.status == 200
            async with session.get(f"{url}/tenants/acme/v/r/v2/x/6") as response:
                assert response.status == 200
            async with session.ws_connect(url.replace("http", "ws") + "/api/r/v1/ws/9") as conn:
                await conn.receive()

    asyncio.run(main())
    assert sorted(s.name for s in wait_for(spans, 3)) == [
        "GET /api/r/{ver}/x/{a}",
        "GET /tenants/{tenant}/v/r/{ver}/x/{a}",
        "WEBSOCKET /api/r/{ver}/ws/{room}",
    ]


def test_a_plain_app_mounted_on_fastapi_is_named_by_its_mount(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """FastAPI's router sets no ``route`` for a mount: an app mounted on it that routes
    nothing itself (a plain ASGI app) is named by the mount's template all the same."""
    app = FastAPI()
    app.mount("/static", PlainTextResponse("file"))
    app.mount("/owners/{owner}", PlainTextResponse("theirs"))
    instrument_fastapi(app)
    url = asgi_server(app)

    get_ok(url, "/static/secret-file.txt", "/owners/secret-owner/x")
    finished = wait_for(spans, 2)
    assert sorted(s.name for s in finished) == ["GET /owners/{owner}", "GET /static"]
    for span in finished:
        assert attrs(span)["http.route"] == span.name.split(" ", 1)[1]
