"""FastAPI/ASGI server spans over a real uvicorn server, joined with the aiohttp client."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import aiohttp
import pytest
from asynctrace_contrib.aiohttp_client import trace_config
from asynctrace_contrib.fastapi import SERVER_GROUP, instrument_fastapi, uninstrument_fastapi
from fastapi import FastAPI, WebSocket
from fastapi.responses import StreamingResponse
from opentelemetry.trace import SpanKind, StatusCode

import asynctrace as at
from asynctrace.testing import CapturedSpans, capture_spans

VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def attrs(span: Any) -> dict[str, Any]:
    """A span's attributes as a dict."""
    return dict(span.attributes or {})


def server_spans(captured: CapturedSpans, name: str, count: int = 1) -> list[Any]:
    """The server spans called *name*, once *count* of them ended (the server ends its
    span after the last byte left, so the client may see the response first)."""
    deadline = time.monotonic() + 10
    while len(captured.by_name(name)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return captured.by_name(name)


def make_app(**options: Any) -> FastAPI:
    """A small Gym-style app, instrumented."""
    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, Any]:
        with at.managed_span("reward", "score"):
            return {"item": item_id}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("server bug")

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def body() -> Any:
            for _ in range(4):
                await asyncio.sleep(0.06)
                yield b"y" * 10

        return StreamingResponse(body())

    @app.get("/endless")
    async def endless() -> StreamingResponse:
        async def body() -> Any:
            while True:
                await asyncio.sleep(0.01)
                yield b"z"

        return StreamingResponse(body())

    @app.get("/healthz")
    async def healthz() -> str:
        return "ok"

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        for _ in range(3):
            await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    instrument_fastapi(app, **options)
    return app


def test_client_and_server_join_the_driver_trace(asgi_server: Any) -> None:
    """per_prompt on: driver → client → server; off: driver → server (header still sent)."""
    url = asgi_server(make_app()) + "/items/7"

    async def call() -> Any:
        with at.umbrella_span("job", "driver") as driver:
            async with aiohttp.ClientSession(trace_configs=[trace_config()]) as session:
                async with session.get(url) as response:
                    assert await response.json() == {"item": 7}
        return driver

    with capture_spans(f"job,per_prompt,reward,{SERVER_GROUP}") as captured:
        driver = asyncio.run(call())
        (server,) = server_spans(captured, "GET /items/{item_id}")  # ends after the response
    (client,) = captured.by_name("GET")
    (score,) = captured.by_name("score")
    trace_id = driver.get_span_context().trace_id
    assert {client.context.trace_id, server.context.trace_id, score.context.trace_id} == {trace_id}
    assert client.parent.span_id == driver.get_span_context().span_id  # type: ignore[union-attr]
    assert server.parent.span_id == client.context.span_id  # type: ignore[union-attr]
    assert score.parent.span_id == server.context.span_id  # type: ignore[union-attr]
    assert server.kind is SpanKind.SERVER
    assert attrs(server)["http.route"] == "/items/{item_id}"
    assert attrs(server)["url.path"] == "/items/7"
    assert attrs(server)["http.response.status_code"] == 200

    with capture_spans(f"job,{SERVER_GROUP}") as captured:
        driver = asyncio.run(call())
        (server,) = server_spans(captured, "GET /items/{item_id}")
    assert captured.by_name("GET") == []
    assert server.parent.span_id == driver.get_span_context().span_id  # type: ignore[union-attr]


async def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET *url*; status and body."""
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers=headers) as response:
            return response.status, await response.read()


def test_errors_are_recorded(asgi_server: Any, spans: CapturedSpans) -> None:
    """An unhandled exception: 500, ERROR, the exception recorded."""
    url = asgi_server(make_app()) + "/boom"
    status, _ = asyncio.run(fetch(url))
    assert status == 500
    (server,) = server_spans(spans, "GET /boom")
    assert server.status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in server.events)


def test_custom_error_handler_status_is_recorded(asgi_server: Any, spans: CapturedSpans) -> None:
    """An app's own handler for Exception answers with its status: that one is recorded."""
    from fastapi.responses import JSONResponse

    app = make_app()

    @app.exception_handler(Exception)
    async def unavailable(request: Any, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=503)

    status, _ = asyncio.run(fetch(asgi_server(app) + "/boom"))
    assert status == 503
    (server,) = server_spans(spans, "GET /boom")
    assert attrs(server)["error.type"] == "RuntimeError"
    assert attrs(server)["http.response.status_code"] == 503
    assert server.status.status_code is StatusCode.ERROR


def test_unknown_route_never_uses_the_raw_path(asgi_server: Any, spans: CapturedSpans) -> None:
    """A 404 is named by method only; the raw path never becomes the span name."""
    url = asgi_server(make_app()) + "/no/such/thing/123"
    assert asyncio.run(fetch(url))[0] == 404
    (server,) = server_spans(spans, "GET")
    assert server.status.status_code is not StatusCode.ERROR


async def _request(url: str, method: str, headers: dict[str, str] | None = None) -> int:
    """*method* on *url* (any token: aiohttp sends it as given); the status."""
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, headers=headers) as response:
            await response.read()
            return response.status


def test_a_method_nobody_knows_is_other_in_the_attribute_and_http_in_the_name(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """Semantic conventions: an unknown method is ``_OTHER`` (the original kept in
    ``http.request.method_original``) and the span name says ``HTTP``, so clients cannot
    make names or values unbounded; a known one is kept; a websocket's handshake is a GET."""
    app = make_app()

    @app.api_route("/brew/{pot}", methods=["BREW"])
    async def brew(pot: int) -> str:
        return "coffee"

    base = asgi_server(app)
    assert asyncio.run(_request(base + "/brew/1", "BREW")) == 200
    assert asyncio.run(_request(base + "/items/2", "FROB")) == 405  # routed, method refused
    assert asyncio.run(_request(base + "/items/3", "GET")) == 200
    (brewed,) = server_spans(spans, "HTTP /brew/{pot}")
    assert attrs(brewed)["http.request.method"] == "_OTHER"
    assert attrs(brewed)["http.request.method_original"] == "BREW"
    (frob,) = server_spans(spans, "HTTP /items/{item_id}")
    assert attrs(frob)["http.request.method_original"] == "FROB"
    (got,) = server_spans(spans, "GET /items/{item_id}")
    assert attrs(got)["http.request.method"] == "GET"
    assert "http.request.method_original" not in attrs(got)


def test_the_server_names_itself_as_the_request_does(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """``server.address``/``server.port`` come from ``Forwarded``'s host, else
    ``X-Forwarded-Host``, else ``Host`` (the port defaulting to the scheme's), else the
    socket; a value that does not parse is passed over."""
    base = asgi_server(make_app())
    port = int(base.rsplit(":", 1)[1])
    cases: list[tuple[dict[str, str], tuple[str, int]]] = [
        ({"Host": "api.example.com:8443"}, ("api.example.com", 8443)),
        ({"Host": "api.example.com"}, ("api.example.com", 80)),
        ({"Host": "[2001:db8::7]:9000"}, ("2001:db8::7", 9000)),
        (
            {"Host": "h.example", "X-Forwarded-Host": "edge.example:444, inner"},
            ("edge.example", 444),
        ),
        (
            {
                "X-Forwarded-Host": "edge.example",
                "Forwarded": 'for=1.2.3.4;host="front.example:8"',
            },
            ("front.example", 8),
        ),
        ({"Host": "bad host:99999"}, ("127.0.0.1", port)),  # no name in it: the socket's
    ]
    for number, (headers, _) in enumerate(cases):
        assert asyncio.run(_request(f"{base}/items/{number}", "GET", headers)) == 200
    found = server_spans(spans, "GET /items/{item_id}", len(cases))
    by_path = {attrs(span)["url.path"]: span for span in found}
    for number, (headers, expected) in enumerate(cases):
        got = attrs(by_path[f"/items/{number}"])
        assert (got["server.address"], got["server.port"]) == expected, headers


def test_an_error_after_the_response_started_has_an_error_type(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """A stream that raises after its first chunk: the span is an error with ``error.type``
    (the status line already said 200)."""
    app = make_app()

    @app.get("/cut")
    async def cut() -> StreamingResponse:
        async def body() -> Any:
            yield b"first"
            raise ValueError("the source went away")

        return StreamingResponse(body())

    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.get(asgi_server(app) + "/cut") as response:
                assert response.status == 200
                with pytest.raises(aiohttp.ClientPayloadError):
                    await response.read()

    asyncio.run(main())
    (server,) = server_spans(spans, "GET /cut")
    assert server.status.status_code is StatusCode.ERROR
    assert attrs(server)["error.type"] == "ValueError"
    assert attrs(server)["http.response.status_code"] == 200


def test_streaming_covered_to_the_last_byte(asgi_server: Any, spans: CapturedSpans) -> None:
    """A ~240 ms streaming response gives a server span of at least 200 ms."""
    url = asgi_server(make_app()) + "/stream"
    assert asyncio.run(fetch(url)) == (200, b"y" * 40)
    (server,) = server_spans(spans, "GET /stream")
    assert (server.end_time - server.start_time) / 1e9 >= 0.2  # type: ignore[operator]


def test_client_disconnect_is_a_cancellation(asgi_server: Any, spans: CapturedSpans) -> None:
    """A client that goes away mid-stream ends the span with asynctrace.cancelled=true."""
    url = asgi_server(make_app()) + "/endless"

    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            response = await session.get(url)
            await response.content.read(3)
            response.close()
        for _ in range(200):
            if spans.by_name("GET /endless"):
                return
            await asyncio.sleep(0.02)

    asyncio.run(main())
    (server,) = server_spans(spans, "GET /endless")
    assert attrs(server)["asynctrace.cancelled"] is True
    assert server.status.status_code is not StatusCode.ERROR


def raw_request(url: str, header_lines: list[bytes]) -> bytes:
    """Send a raw HTTP/1.1 GET with arbitrary header bytes; return the raw response."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    path = "/" + url.split("/", 3)[3]
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        request = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        conn.sendall(request + b"".join(line + b"\r\n" for line in header_lines) + b"\r\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    response = b"".join(chunks)
    head, _, body = response.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0] + b"|" + body


@pytest.mark.parametrize(
    "headers",
    [
        [b"traceparent: garbage"],
        [b"traceparent: " + VALID.encode(), b"tracestate: " + b"k=v," * 2048],
        [b"traceparent: \xff\xfe-not-utf8\x80"],
        [b"TraceParent: " + VALID.encode() + b"\xc3\x28"],
        [b"tracestate: only-state"],
    ],
    ids=["invalid", "8kb-tracestate", "non-utf8", "trailing-bytes", "state-only"],
)
def test_hostile_headers_never_change_the_response(
    asgi_server: Any, spans: CapturedSpans, headers: list[bytes]
) -> None:
    """Malformed or hostile trace headers: same response as without them, no error."""
    url = asgi_server(make_app()) + "/items/3"
    expected = raw_request(url, [])
    assert raw_request(url, headers) == expected
    assert b"200 OK" in expected
    for server in server_spans(spans, "GET /items/{item_id}", 2):
        assert server.status.status_code is not StatusCode.ERROR


def test_untrusted_incoming_context_is_a_link(asgi_server: Any, spans: CapturedSpans) -> None:
    """trust_incoming=False: a new trace, linked to the caller's context."""
    url = asgi_server(make_app(trust_incoming=False)) + "/items/1"
    asyncio.run(fetch(url, headers={"traceparent": VALID}))
    (server,) = server_spans(spans, "GET /items/{item_id}")
    assert server.parent is None
    assert format(server.context.trace_id, "032x") != VALID.split("-")[1]
    (link,) = server.links
    assert format(link.context.trace_id, "032x") == VALID.split("-")[1]


def test_trusted_incoming_context_is_continued(asgi_server: Any, spans: CapturedSpans) -> None:
    """By default the incoming traceparent is the parent."""
    url = asgi_server(make_app()) + "/items/1"
    asyncio.run(fetch(url, headers={"traceparent": VALID}))
    (server,) = server_spans(spans, "GET /items/{item_id}")
    assert format(server.context.trace_id, "032x") == VALID.split("-")[1]
    assert format(server.parent.span_id, "016x") == VALID.split("-")[2]  # type: ignore[union-attr]


def test_excluded_urls_and_gating(asgi_server: Any) -> None:
    """Excluded paths are not traced; with http_server off nothing is."""
    url = asgi_server(make_app(excluded_urls="^/healthz$"))
    with capture_spans(SERVER_GROUP) as captured:
        asyncio.run(fetch(url + "/healthz"))
        asyncio.run(fetch(url + "/items/2"))
        server_spans(captured, "GET /items/{item_id}")
        time.sleep(0.1)
    assert captured.names() == ["GET /items/{item_id}"]
    with capture_spans("default") as captured:
        asyncio.run(fetch(url + "/items/2"))
    assert captured.spans == []


def test_websocket_one_span_per_connection(asgi_server: Any, spans: CapturedSpans) -> None:
    """A websocket connection is one span, however many messages it carries."""
    url = asgi_server(make_app()).replace("http://", "ws://") + "/ws"

    async def main() -> list[str]:
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            replies = []
            for text in ("a", "b", "c"):
                await ws.send_str(text)
                replies.append((await ws.receive()).data)
            return replies

    assert asyncio.run(main()) == ["a", "b", "c"]
    (server,) = server_spans(spans, "WEBSOCKET /ws")
    assert server.kind is SpanKind.SERVER
    assert spans.names() == ["WEBSOCKET /ws"]


def test_instrument_is_idempotent_and_reversible(asgi_server: Any) -> None:
    """One middleware however often instrumented; none after uninstrument."""
    app = make_app()
    instrument_fastapi(app)

    def tracing_layers(stack: Any) -> int:
        count = 0
        while stack is not None:
            count += type(stack).__name__ == "AsyncTraceMiddleware"
            stack = getattr(stack, "app", None)
        return count

    assert tracing_layers(app.build_middleware_stack()) == 1
    assert app.user_middleware == []  # the app's own list is left alone
    uninstrument_fastapi(app)
    assert "build_middleware_stack" not in vars(app)
    assert tracing_layers(app.build_middleware_stack()) == 0
    url = asgi_server(app) + "/items/5"
    with capture_spans("all") as captured:
        assert asyncio.run(fetch(url))[0] == 200
    assert captured.by_name("GET /items/{item_id}") == []


def test_one_server_span_even_with_a_global_provider(asgi_server: Any, tmp_path: Any) -> None:
    """With OTel's global provider set (configure() claims it), FastAPI's built-in
    request tracing is turned off for an instrumented app: one server span per request."""
    app = make_app()
    telemetry = at.configure(
        {"enabled": True, "span_groups": f"{SERVER_GROUP}", "exporters": ["memory"]}
    )
    try:
        url = asgi_server(app) + "/items/4"
        assert asyncio.run(fetch(url))[0] == 200
        exporter = telemetry.memory_exporter
        assert exporter is not None
        deadline = time.monotonic() + 10
        while not exporter.get_finished_spans() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        names = [s.name for s in exporter.get_finished_spans()]
    finally:
        telemetry.shutdown()
    assert names == ["GET /items/{item_id}"]
    uninstrument_fastapi(app)
    native = getattr(app, "_telemetry", {"tracing": True})
    assert native["tracing"] is True


def test_gated_off_server_still_continues_the_trace(asgi_server: Any) -> None:
    """With http_server off there is no server span, but handler spans join the caller's trace."""
    url = asgi_server(make_app()) + "/items/8"
    with capture_spans("reward") as captured:
        asyncio.run(fetch(url, headers={"traceparent": VALID}))
        (score,) = server_spans(captured, "score")
    assert format(score.context.trace_id, "032x") == VALID.split("-")[1]
    assert captured.names() == ["score"]


def test_unhandled_exception_names_its_type(asgi_server: Any, spans: CapturedSpans) -> None:
    """An exception Starlette turns into a 500 outside the middleware: type and status kept."""
    url = asgi_server(make_app()) + "/boom"
    status, _ = asyncio.run(fetch(url))
    (server,) = server_spans(spans, "GET /boom")
    assert attrs(server)["error.type"] == "RuntimeError"
    assert attrs(server)["http.response.status_code"] == status == 500
