"""HTTP behaviour over real servers: middleware order, retries, background tasks, body
errors, per-request middlewares, websocket closes, query and user agent, raise_for_status."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from asynctrace_contrib.aiohttp_client import (
    client_middleware,
    instrument_aiohttp_client,
    trace_config,
    uninstrument_aiohttp_client,
)
from asynctrace_contrib.fastapi import instrument_fastapi
from fastapi import BackgroundTasks, FastAPI, Request, WebSocket
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from opentelemetry.trace import SpanKind, StatusCode

import asynctrace as at
from asynctrace.testing import CapturedSpans, capture_spans

VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = int(VALID.split("-")[1], 16)
PARENT_ID = int(VALID.split("-")[2], 16)


def attrs(span: Any) -> dict[str, Any]:
    """A span's attributes as a dict."""
    return dict(span.attributes or {})


def wait_for(captured: CapturedSpans, kind: SpanKind, count: int) -> list[Any]:
    """The spans of *kind*, once *count* of them ended (servers end theirs after replying)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [s for s in captured.spans if s.kind is kind]
        if len(found) >= count:
            return found
        time.sleep(0.01)
    return [s for s in captured.spans if s.kind is kind]


# -- 1. the server span is outside every middleware ------------------------------------


def test_middlewares_added_after_instrumenting_are_inside_the_server_span(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """Middlewares added after ``instrument_fastapi`` (auth, CORS): a 401 from one, a
    crash in one and a CORS preflight each get a SERVER span with the status sent, and
    the spans those middlewares open are its children in the caller's trace."""
    app = FastAPI()
    instrument_fastapi(app)

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        with at.managed_span("reward", "auth.check"):
            pass
        if request.headers.get("x-key") != "ok":
            return JSONResponse({"detail": "unauthorized"}, status_code=401)
        if request.headers.get("x-crash"):
            raise RuntimeError("middleware bug")
        return await call_next(request)

    app.add_middleware(CORSMiddleware, allow_origins=["http://a.example"], allow_methods=["*"])
    base = asgi_server(app)
    cases = [
        ("GET", {"x-key": "ok"}, 200),
        ("GET", {}, 401),
        ("GET", {"x-key": "ok", "x-crash": "1"}, 500),
        ("OPTIONS", {"Origin": "http://a.example", "Access-Control-Request-Method": "GET"}, 200),
    ]

    async def main() -> list[int]:
        statuses = []
        async with aiohttp.ClientSession() as session:
            for method, headers, _ in cases:
                headers = {**headers, "traceparent": VALID}
                async with session.request(method, base + "/items/1", headers=headers) as r:
                    await r.read()
                    statuses.append(r.status)
        return statuses

    assert asyncio.run(main()) == [status for _, _, status in cases]
    servers = wait_for(spans, SpanKind.SERVER, 4)
    assert sorted(attrs(s)["http.response.status_code"] for s in servers) == [200, 200, 401, 500]
    for server in servers:
        assert server.context.trace_id == TRACE_ID
        assert server.parent.span_id == PARENT_ID
    (crashed,) = [s for s in servers if attrs(s)["http.response.status_code"] == 500]
    assert crashed.status.status_code is StatusCode.ERROR
    assert attrs(crashed)["error.type"] == "RuntimeError"
    assert any(e.name == "exception" for e in crashed.events)
    for server in servers:
        if attrs(server)["http.response.status_code"] != 500:
            assert server.status.status_code is StatusCode.UNSET
    checks = spans.by_name("auth.check")
    assert len(checks) == 3  # the preflight never reaches the auth middleware
    server_ids = {s.context.span_id for s in servers}
    for check in checks:
        assert check.context.trace_id == TRACE_ID
        assert check.parent.span_id in server_ids


def test_the_apps_own_error_handler_status_is_recorded(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """An app's own handler for ``Exception`` answers 503: that status is on the span, and
    the handler ran once, as without asynctrace (its side effects, an error report, too)."""
    app = FastAPI()
    instrument_fastapi(app)
    handled: list[str] = []

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("server bug")

    @app.exception_handler(Exception)
    async def unavailable(request: Any, exc: Exception) -> JSONResponse:
        handled.append(type(exc).__name__)
        return JSONResponse({"error": "down"}, status_code=503)

    async def main() -> int:
        async with aiohttp.ClientSession() as session:
            async with session.get(asgi_server(app) + "/boom") as response:
                return response.status

    assert asyncio.run(main()) == 503
    (server,) = wait_for(spans, SpanKind.SERVER, 1)
    assert attrs(server)["http.response.status_code"] == 503
    assert attrs(server)["error.type"] == "RuntimeError"
    assert server.status.status_code is StatusCode.ERROR
    assert handled == ["RuntimeError"]


# -- 2. a retry middleware: one span per attempt ----------------------------------------


async def _retry(request: Any, handler: Any) -> Any:
    """aiohttp's documented retry pattern: the same request sent again on a 5xx."""
    for _ in range(3):
        response = await handler(request)
        if response.status < 500:
            return response
        response.release()
    return response


@pytest.mark.parametrize("form", ["explicit", "global"])
def test_each_retry_attempt_gets_its_own_client_span(
    asgi_server: Any, spans: CapturedSpans, form: str
) -> None:
    """A retry middleware outside asynctrace's: three attempts (503, 503, 200) are three
    CLIENT spans, and each server attempt is the child of its own client span."""
    attempts: list[int] = []
    app = FastAPI()
    instrument_fastapi(app)

    @app.get("/flaky")
    async def flaky() -> JSONResponse:
        attempts.append(1)
        return JSONResponse({}, status_code=200 if len(attempts) % 3 == 0 else 503)

    url = asgi_server(app) + "/flaky"

    async def main() -> int:
        if form == "global":
            instrument_aiohttp_client()
            options: dict[str, Any] = {"middlewares": (_retry,)}
        else:
            options = {"middlewares": (_retry, client_middleware())}
        try:
            with at.umbrella_span("job", "driver"):
                async with aiohttp.ClientSession(**options) as session:
                    async with session.get(url) as response:
                        return response.status
        finally:
            uninstrument_aiohttp_client()

    assert asyncio.run(main()) == 200
    clients = [s for s in spans.spans if s.kind is SpanKind.CLIENT]
    assert [attrs(c)["http.response.status_code"] for c in clients] == [503, 503, 200]
    servers = wait_for(spans, SpanKind.SERVER, 3)
    by_parent = {s.parent.span_id: s for s in servers}
    for client in clients:
        server = by_parent[client.context.span_id]
        status = attrs(client)["http.response.status_code"]
        assert attrs(server)["http.response.status_code"] == status


def test_a_callers_own_traceparent_still_wins_on_a_retry(aiohttp_server: Any) -> None:
    """A request with the caller's own ``traceparent``: every attempt sends it, no span."""
    seen: list[str | None] = []

    async def flaky(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        return web.Response(status=503 if len(seen) < 3 else 200)

    app = web.Application()
    app.router.add_get("/", flaky)
    url = aiohttp_server(app) + "/"

    async def main() -> int:
        session = aiohttp.ClientSession(middlewares=(_retry, client_middleware()))
        async with session, session.get(url, headers={"traceparent": VALID}) as response:
            return response.status

    with capture_spans("all") as captured:
        assert asyncio.run(main()) == 200
    assert seen == [VALID] * 3
    assert [s for s in captured.spans if s.kind is SpanKind.CLIENT] == []


# -- 3. background tasks are outside the server span ------------------------------------


def test_background_tasks_run_after_the_server_span_ended(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """The span ends once the response is sent; a background task's own spans still nest
    under it; a task that fails leaves the 200 as it was, and its exception still
    escapes the app unchanged."""
    finished: list[int] = []
    escaped: list[BaseException] = []
    failure = ConnectionError("log sink down")
    app = FastAPI()
    instrument_fastapi(app)

    @app.post("/step")
    async def step(tasks: BackgroundTasks) -> dict[str, float]:
        async def upload_logs() -> None:
            with at.managed_span("reward", "upload"):
                await asyncio.sleep(0.3)
            finished.append(time.time_ns())

        tasks.add_task(upload_logs)
        return {"reward": 1.0}

    @app.post("/step_bad_bg")
    async def step_bad(tasks: BackgroundTasks) -> dict[str, float]:
        async def flaky() -> None:
            raise failure

        tasks.add_task(flaky)
        return {"reward": 1.0}

    async def outer(scope: Any, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        except BaseException as exc:
            escaped.append(exc)
            raise

    base = asgi_server(outer)

    async def main() -> list[int]:
        statuses = []
        async with aiohttp.ClientSession() as session:
            for path in ("/step", "/step_bad_bg"):
                async with session.post(base + path) as response:
                    assert await response.json() == {"reward": 1.0}
                    statuses.append(response.status)
        return statuses

    assert asyncio.run(main()) == [200, 200]
    servers = wait_for(spans, SpanKind.SERVER, 2)
    deadline = time.monotonic() + 10
    while not (finished and escaped) and time.monotonic() < deadline:
        time.sleep(0.01)
    (good,) = [s for s in servers if s.name == "POST /step"]
    (bad,) = [s for s in servers if s.name == "POST /step_bad_bg"]
    assert good.end_time < finished[0]
    (upload,) = spans.by_name("upload")
    assert upload.parent.span_id == good.context.span_id
    assert escaped == [failure]
    assert bad.status.status_code is StatusCode.UNSET
    assert attrs(bad)["http.response.status_code"] == 200
    assert "error.type" not in attrs(bad)
    assert not bad.events


# -- 4. a body that fails while it is read ----------------------------------------------


def _body_app() -> web.Application:
    async def truncated(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b"x" * 10)
        assert request.transport is not None
        request.transport.close()  # the server goes away mid-body
        return response

    async def stall(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"x" * 10)
        await asyncio.sleep(2)
        return response

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(20):
            await response.write(b"y" * 100)
            await asyncio.sleep(0.02)
        return response

    app = web.Application()
    app.router.add_get("/truncated", truncated)
    app.router.add_get("/stall", stall)
    app.router.add_get("/stream", stream)
    return app


def _session_options(form: str, **options: Any) -> dict[str, Any]:
    if form == "middleware":
        return {"middlewares": (client_middleware(**options),)}
    return {"trace_configs": [trace_config(**options)]}


@pytest.mark.parametrize("form", ["middleware", "trace_config"])
def test_a_body_that_fails_while_read_ends_the_span_in_error(
    aiohttp_server: Any, spans: CapturedSpans, form: str
) -> None:
    """A truncated body and a read timeout end the CLIENT span ERROR with the exception's
    class in ``error.type``; a response the caller releases early stays unset."""
    base = aiohttp_server(_body_app())

    async def main() -> list[str]:
        raised = []
        async with aiohttp.ClientSession(**_session_options(form)) as session:
            for path, timeout in (
                ("/truncated", None),
                ("/stall", aiohttp.ClientTimeout(sock_read=0.3)),
            ):
                try:
                    async with session.get(base + path, timeout=timeout) as response:
                        await response.read()
                except aiohttp.ClientError as exc:
                    raised.append(type(exc).__qualname__)
            async with session.get(base + "/stream") as response:
                await response.content.read(10)
                response.release()
        return raised

    raised = asyncio.run(main())
    truncated, stalled, released = [s for s in spans.spans if s.kind is SpanKind.CLIENT]
    for span, name in ((truncated, raised[0]), (stalled, raised[1])):
        assert span.status.status_code is StatusCode.ERROR
        assert attrs(span)["error.type"] == name
        assert attrs(span)["http.response.status_code"] == 200
        assert any(e.name == "exception" for e in span.events)
    assert released.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(released)


# -- 5. a request's own middlewares= keep the global layer -------------------------------


def _echo_app() -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        return web.json_response(
            {k: request.headers.get(k) for k in ("traceparent", "x-request-id")}
        )

    app = web.Application()
    app.router.add_get("/echo", echo)
    return app


def test_a_requests_own_middlewares_keep_the_global_layer(
    aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """Under ``instrument_aiohttp_client()``, a request passing ``middlewares=`` still
    carries ``traceparent`` and gets its span, once even when it passes ours too."""
    url = aiohttp_server(_echo_app()) + "/echo"

    async def add_request_id(request: Any, handler: Any) -> Any:
        request.headers["X-Request-Id"] = "42"
        return await handler(request)

    async def main() -> list[Any]:
        instrument_aiohttp_client()
        try:
            bodies = []
            async with aiohttp.ClientSession() as session:
                with at.umbrella_span("job", "driver"):
                    for chain in ((add_request_id,), (), (add_request_id, client_middleware())):
                        async with session.get(url, middlewares=chain) as response:
                            bodies.append(await response.json())
            return bodies
        finally:
            uninstrument_aiohttp_client()

    bodies = asyncio.run(main())
    clients = [s for s in spans.spans if s.kind is SpanKind.CLIENT]
    assert len(clients) == 3
    for body, client in zip(bodies, clients, strict=True):
        assert body["traceparent"].split("-")[2] == format(client.context.span_id, "016x")
    assert [b["x-request-id"] for b in bodies] == ["42", None, "42"]
    assert not hasattr(aiohttp.ClientSession._request, "__wrapped__")  # uninstrumented


# -- 6. a websocket the client closes normally -------------------------------------------


def _ws_app() -> FastAPI:
    app = FastAPI()
    instrument_fastapi(app)

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        async for text in websocket.iter_text():
            await websocket.send_text(text)

    @app.websocket("/ws_receive")
    async def ws_receive(websocket: WebSocket) -> None:
        await websocket.accept()
        while True:  # ends with WebSocketDisconnect when the client closes
            await websocket.send_text(await websocket.receive_text())

    return app


@pytest.mark.parametrize("path", ["/ws", "/ws_receive"])
def test_a_websocket_closed_normally_is_not_cancelled(
    asgi_server: Any, spans: CapturedSpans, path: str
) -> None:
    """A client's close with code 1000: the span ends normally, not cancelled, not ERROR."""
    url = asgi_server(_ws_app()).replace("http://", "ws://") + path

    async def main() -> None:
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            await ws.send_str("hi")
            assert await ws.receive_str() == "hi"
            await ws.close(code=1000)

    asyncio.run(main())
    (server,) = wait_for(spans, SpanKind.SERVER, 1)
    assert "asynctrace.cancelled" not in attrs(server)
    assert server.status.status_code is StatusCode.UNSET


def test_a_websocket_dropped_without_a_close_is_cancelled(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """A client whose connection drops without a close frame: cancelled."""
    base = asgi_server(_ws_app())
    host, port = base.removeprefix("http://").split(":")
    key = base64.b64encode(os.urandom(16))
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        assert conn.recv(4096).startswith(b"HTTP/1.1 101")
    (server,) = wait_for(spans, SpanKind.SERVER, 1)
    assert attrs(server)["asynctrace.cancelled"] is True
    assert server.status.status_code is StatusCode.UNSET


# -- 7. url.query and user_agent.original -----------------------------------------------


def test_the_server_span_records_the_redacted_query_and_user_agent(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """``url.query`` as sent with secret-like values redacted (a URL inside a value too);
    ``user_agent.original`` from the header; neither when absent."""
    app = FastAPI()
    instrument_fastapi(app)

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    base = asgi_server(app)
    secret_query = "q=1&api_key=SECRETKEY1&next=http%3A%2F%2Fu%3ASECRETPW1%40h%2Fx"

    async def main() -> None:
        async with aiohttp.ClientSession(headers={"User-Agent": "ua-test/1"}) as session:
            for query in ("?q=1&n=2", "?" + secret_query, ""):
                async with session.get(f"{base}/items/1{query}") as response:
                    await response.read()

    asyncio.run(main())
    servers = wait_for(spans, SpanKind.SERVER, 3)
    queries = [attrs(s).get("url.query") for s in servers]
    assert queries[0] == "q=1&n=2"
    assert queries[2] is None
    recorded = queries[1]
    assert recorded is not None
    assert recorded.startswith("q=1&api_key=REDACTED&next=")
    assert "SECRET" not in recorded
    assert {attrs(s)["user_agent.original"] for s in servers} == {"ua-test/1"}
    for server in servers:
        assert "SECRET" not in str(attrs(server))


# -- 8. raise_for_status in the trace-config form ---------------------------------------


@pytest.mark.parametrize("form", ["middleware", "trace_config"])
def test_raise_for_status_records_the_status_in_both_forms(
    aiohttp_server: Any, spans: CapturedSpans, form: str
) -> None:
    """``raise_for_status=True`` on a 404: ``http.response.status_code=404`` and
    ``error.type="404"``, whichever form."""

    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404, text="no")

    app = web.Application()
    app.router.add_get("/missing", missing)
    url = aiohttp_server(app) + "/missing"

    async def main() -> None:
        async with aiohttp.ClientSession(**_session_options(form)) as session:
            with pytest.raises(aiohttp.ClientResponseError):
                async with session.get(url, raise_for_status=True) as response:
                    await response.read()

    asyncio.run(main())
    (client,) = [s for s in spans.spans if s.kind is SpanKind.CLIENT]
    assert attrs(client)["http.response.status_code"] == 404
    assert attrs(client)["error.type"] == "404"
    assert client.status.status_code is StatusCode.ERROR


@pytest.mark.parametrize("shared", [True, False], ids=["aiohttp>=3.10.9", "older aiohttp"])
def test_an_early_release_is_no_error_whatever_the_aiohttp_version(
    monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    """An early ``release()`` leaves its stream with "Connection closed": aiohttp's shared
    exception object since 3.10.9, a new ``ClientConnectionError`` each time before. Either
    ends the span unset; a real failure of the body still ends it in error."""
    from asynctrace_contrib.aiohttp_client import _body

    if not shared:  # the older aiohttp: no shared object to compare with
        monkeypatch.setattr(_body, "_RELEASED", None)

    async def ended_with(exc: BaseException) -> Any:
        stream = aiohttp.StreamReader(
            aiohttp.client_proto.ResponseHandler(asyncio.get_running_loop()),
            2**16,
            loop=asyncio.get_running_loop(),
        )
        stream.set_exception(exc)
        span = at.start_span("per_prompt", "GET", kind=SpanKind.CLIENT)
        _body.body_done(span, stream)
        return span

    released = _body._RELEASED if shared else aiohttp.ClientConnectionError("Connection closed")
    with capture_spans("per_prompt") as captured:
        asyncio.run(ended_with(released))
        asyncio.run(ended_with(aiohttp.ClientPayloadError("Response payload is not completed")))
    early, failed = captured.spans
    assert early.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "ClientPayloadError"
