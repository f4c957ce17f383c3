"""FastAPI middleware: a websocket closed before accept records 403; a session id received in
baggage is redacted on the spans and in the baggage sent on."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from _server import handshake_status, wait_for
from asynctrace_contrib.fastapi import SERVER_GROUP, instrument_fastapi
from fastapi import FastAPI, WebSocket
from opentelemetry.trace import StatusCode

import asynctrace as at
from asynctrace.testing import CapturedSpans, capture_spans

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_websocket_closed_before_accept_records_403(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """close() before accept(): the server refuses the handshake with 403, and so says the span."""
    app = FastAPI()

    @app.websocket("/ws")
    async def refuse(websocket: WebSocket) -> None:
        await websocket.close(code=1008)

    instrument_fastapi(app)
    url = asgi_server(app).replace("http://", "ws://") + "/ws"

    assert handshake_status(url) == 403
    (server,) = wait_for(spans, "WEBSOCKET /ws")
    attrs = dict(server.attributes or {})
    assert attrs["http.response.status_code"] == 403
    assert server.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs


def test_an_accepted_websocket_the_app_closes_records_no_status(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """After accept(), close() ends the connection: no HTTP status is sent, none recorded."""
    app = FastAPI()

    @app.websocket("/ws")
    async def hello(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.close(code=1000)

    instrument_fastapi(app)
    url = asgi_server(app).replace("http://", "ws://") + "/ws"

    async def main() -> None:
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            await ws.receive()

    asyncio.run(main())
    (server,) = wait_for(spans, "WEBSOCKET /ws")
    assert "http.response.status_code" not in dict(server.attributes or {})


def test_a_received_session_id_is_redacted(asgi_server: Any) -> None:
    """A session id in received baggage is redacted as a text task id is: on the SERVER span,
    the handler's spans, and the baggage the handler's own calls send on."""
    app = FastAPI()

    @app.get("/x")
    async def handler() -> dict[str, Any]:
        with at.managed_span("reward", "leaf"):
            pass
        return {"session": at.current_session_id(), "carrier": at.current_trace_carrier()}

    instrument_fastapi(app)
    url = asgi_server(app) + "/x"
    secret = "http://u:SECRETPW@h/?token=SECRETTOK"
    encoded = "http%3A%2F%2Fu%3ASECRETPW%40h%2F%3Ftoken%3DSECRETTOK"

    async def main() -> Any:
        headers = {"traceparent": TRACEPARENT, "baggage": f"asynctrace.session_id={encoded}"}
        async with aiohttp.ClientSession() as client:
            async with client.get(url, headers=headers) as response:
                return await response.json()

    with capture_spans(f"reward,{SERVER_GROUP}", propagate_scopes=True) as captured:
        body = asyncio.run(main())
        (server,) = wait_for(captured, "GET /x")
    (leaf,) = captured.by_name("leaf")
    assert body["session"] == at.redact_text(secret)
    for span in (server, leaf):
        session = dict(span.attributes or {})["rl.session_id"]
        assert "SECRETPW" not in session, span.name
        assert "SECRETTOK" not in session, span.name
        assert session.startswith("http://h/"), session
    sent = body["carrier"]["baggage"]
    assert "asynctrace.session_id=" in sent
    assert "SECRETPW" not in sent
    assert "SECRETTOK" not in sent


def test_a_plain_received_session_id_is_kept() -> None:
    """An ordinary session id (what asynctrace sends) arrives as it was sent."""
    with capture_spans("reward", propagate_scopes=True):
        with at.session_scope():
            sent = at.current_session_id()
            carrier = at.current_trace_carrier()
        carrier["baggage"] += ",asynctrace.iteration=1"  # not the fast path's order: parsed
        with at.remote_trace_context(carrier):
            assert at.current_session_id() == sent
