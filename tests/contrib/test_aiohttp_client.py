"""aiohttp client: propagation, per_prompt gating, body-covering spans, redaction, hooks."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from asynctrace_contrib._http import redact_url
from asynctrace_contrib.aiohttp_client import (
    instrument_aiohttp_client,
    trace_config,
    uninstrument_aiohttp_client,
)
from opentelemetry.trace import SpanKind, StatusCode

import asynctrace as at
from asynctrace.testing import CapturedSpans, capture_spans

VALID_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def attrs(span: Any) -> dict[str, Any]:
    """A span's attributes as a dict."""
    return dict(span.attributes or {})


def echo_app() -> web.Application:
    """Echoes the trace headers; streams slowly on /stream; sleeps on /slow; 404s on /missing."""

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(
            {k: request.headers.get(k) for k in ("traceparent", "tracestate", "x-request-id")}
        )

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(4):
            await asyncio.sleep(0.06)
            await response.write(b"x" * 100)
        await response.write_eof()
        return response

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/echo", echo)
    app.router.add_get("/stream", stream)
    app.router.add_get("/slow", slow)
    return app


async def get_json(url: str, **session_kwargs: Any) -> Any:
    """GET *url* with a fresh session and return the JSON body."""
    async with aiohttp.ClientSession(**session_kwargs) as session:
        async with session.get(url) as response:
            return await response.json()


def test_traceparent_always_sent_span_only_with_per_prompt(
    traced: Any, aiohttp_server: Any
) -> None:
    """The header carries the ambient context; a CLIENT span only while per_prompt is on."""
    url = aiohttp_server(echo_app()) + "/echo"
    with capture_spans("job") as captured:

        async def main() -> Any:
            with at.umbrella_span("job", "driver") as driver:
                body = await get_json(url, **traced())
            return driver, body

        driver, body = asyncio.run(main())
    assert captured.names() == ["driver"]
    trace_id = format(driver.get_span_context().trace_id, "032x")
    span_id = format(driver.get_span_context().span_id, "016x")
    assert body["traceparent"].split("-")[:3] == ["00", trace_id, span_id]

    with capture_spans("job,per_prompt") as captured:
        driver, body = asyncio.run(main())
    (client,) = captured.by_name("GET")
    assert client.kind is SpanKind.CLIENT
    assert client.parent is not None
    assert client.parent.span_id == driver.get_span_context().span_id
    assert body["traceparent"].split("-")[2] == format(client.context.span_id, "016x")
    assert attrs(client)["http.response.status_code"] == 200
    assert attrs(client)["http.request.method"] == "GET"
    assert "rl.bucket" not in attrs(client)


def test_a_callers_own_traceparent_gets_no_tracestate_of_another_trace(
    traced: Any, aiohttp_server: Any
) -> None:
    """A request whose caller set ``traceparent`` goes out with it, and without the ambient
    ``tracestate``: W3C ties a tracestate to the traceparent it came with. A request
    without its own carries the ambient pair."""
    url = aiohttp_server(echo_app()) + "/echo"
    incoming = {"traceparent": VALID_PARENT, "tracestate": "vendor=abc"}
    own = "00-11111111111111111111111111111111-2222222222222222-00"

    async def main() -> tuple[Any, Any]:
        with at.remote_trace_context(incoming):
            async with aiohttp.ClientSession(**traced()) as session:
                async with session.get(url, headers={"traceparent": own}) as response:
                    theirs = await response.json()
                async with session.get(url) as response:
                    ours = await response.json()
        return theirs, ours

    for groups in ("job", "job,per_prompt"):
        with capture_spans(groups):
            theirs, ours = asyncio.run(main())
        assert (theirs["traceparent"], theirs["tracestate"]) == (own, None)
        assert ours["traceparent"].split("-")[1] == VALID_PARENT.split("-")[1]
        assert ours["tracestate"] == "vendor=abc"


def test_a_method_nobody_knows_is_other(traced: Any, aiohttp_server: Any) -> None:
    """Semantic conventions: an unknown method is ``_OTHER``, the original in
    ``http.request.method_original``, and the span is named ``HTTP`` (aiohttp's server
    refuses the method: what is recorded of the request does not depend on the answer)."""
    url = aiohttp_server(echo_app()) + "/echo"

    async def main() -> int:
        async with aiohttp.ClientSession(**traced()) as session:
            async with session.request("BREW", url) as response:
                await response.read()
                return response.status

    with capture_spans("per_prompt") as captured:
        assert asyncio.run(main()) == 400
    (client,) = captured.by_name("HTTP")
    assert attrs(client)["http.request.method"] == "_OTHER"
    assert attrs(client)["http.request.method_original"] == "BREW"
    assert attrs(client)["http.response.status_code"] == 400


def test_no_context_no_header(traced: Any, aiohttp_server: Any) -> None:
    """Outside any span nothing is injected (and nothing breaks)."""
    url = aiohttp_server(echo_app()) + "/echo"
    body = asyncio.run(get_json(url, **traced()))
    assert body["traceparent"] is None


def test_span_covers_the_streamed_body(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """A body streamed over ~240 ms gives a span of at least 200 ms."""
    url = aiohttp_server(echo_app()) + "/stream"

    async def main() -> int:
        async with aiohttp.ClientSession(**traced()) as session:
            async with session.get(url) as response:
                return len(await response.read())

    assert asyncio.run(main()) == 400
    (client,) = spans.by_name("GET")
    assert (client.end_time - client.start_time) / 1e9 >= 0.2  # type: ignore[operator]


def test_released_early_ends_once(traced: Any, aiohttp_server: Any, spans: CapturedSpans) -> None:
    """A response released before its body is read still ends the span, exactly once."""
    url = aiohttp_server(echo_app()) + "/stream"

    async def main() -> None:
        async with aiohttp.ClientSession(**traced()) as session:
            response = await session.get(url)
            response.release()
            response.close()

    asyncio.run(main())
    assert len(spans.by_name("GET")) == 1


def test_span_ends_at_release_close_or_body_end(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """An unread streamed body: the span ends at release(), at close(), or, for a
    response dropped unread, when its body has arrived (nobody reading it)."""
    url = aiohttp_server(echo_app()) + "/stream"

    async def main() -> list[int]:
        ended_by = []
        async with aiohttp.ClientSession(**traced()) as session:
            for how in ("release", "close", "drop"):
                response = await session.get(url)
                assert len(spans.by_name("GET")) == len(ended_by)  # body still streaming
                if how == "release":
                    response.release()
                elif how == "close":
                    response.close()
                else:
                    del response
                    gc.collect()
                    await asyncio.sleep(0.5)
                ended_by.append(time.time_ns())
        return ended_by

    ended_by = asyncio.run(main())
    clients = spans.by_name("GET")
    assert len(clients) == 3
    durations = []
    for client, deadline in zip(clients, ended_by, strict=True):
        assert client.end_time is not None
        assert client.start_time is not None
        assert client.end_time <= deadline  # ended then, not at session close
        durations.append((client.end_time - client.start_time) / 1e9)
    assert durations[0] < 0.2  # released before the body
    assert durations[1] < 0.2  # closed before the body
    assert durations[2] >= 0.2  # with the body


def test_cancelled_request_is_not_an_error(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """Cancelling a request ends its span with asynctrace.cancelled=true, status not ERROR."""
    url = aiohttp_server(echo_app()) + "/slow"

    async def main() -> None:
        async with aiohttp.ClientSession(**traced()) as session:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(session.get(url), 0.2)

    asyncio.run(main())
    (client,) = spans.by_name("GET")
    assert attrs(client)["asynctrace.cancelled"] is True
    assert client.status.status_code is not StatusCode.ERROR


def test_websocket_span_lasts_as_long_as_the_connection(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """ws_connect(): the GET span covers the websocket until it closes, and ends once."""

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            await ws.send_str(message.data)
        return ws

    app = web.Application()
    app.router.add_get("/ws", echo)
    url = aiohttp_server(app) + "/ws"

    async def main() -> tuple[str, int, int]:
        async with aiohttp.ClientSession(**traced()) as session:
            async with session.ws_connect(url) as ws:
                await ws.send_str("ping")
                reply = await ws.receive_str()
                await asyncio.sleep(0.3)
                open_spans = len(spans.by_name("GET"))
            return reply, open_spans, len(spans.by_name("GET"))

    reply, while_open, after_close = asyncio.run(main())
    assert (reply, while_open, after_close) == ("ping", 0, 1)
    (client,) = spans.by_name("GET")
    assert attrs(client)["http.response.status_code"] == 101
    assert (client.end_time - client.start_time) / 1e9 >= 0.3  # type: ignore[operator]


def test_errors(traced: Any, aiohttp_server: Any, spans: CapturedSpans) -> None:
    """Status >= 400 is ERROR; a connection failure is ERROR with the exception."""
    base = aiohttp_server(echo_app())

    async def main() -> None:
        async with aiohttp.ClientSession(**traced()) as session:
            async with session.get(base + "/missing") as response:
                assert response.status == 404
            with pytest.raises(aiohttp.ClientConnectionError):
                await session.get("http://127.0.0.1:1/")

    asyncio.run(main())
    missing, refused = spans.by_name("GET")
    assert missing.status.status_code is StatusCode.ERROR
    assert attrs(missing)["error.type"] == "404"
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.events[0].name == "exception"


def test_url_redaction_and_no_header_values(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """No userinfo, secret-like query values redacted, no header values unless asked."""
    base = aiohttp_server(echo_app())
    url = base.replace("http://", "http://user:pw@") + "/echo?api_key=abc&Token=t&n=1&X-Sig=s"

    async def main() -> None:
        async with aiohttp.ClientSession(
            **traced(record_request_headers=["x-request-id"])
        ) as session:
            async with session.get(url, headers={"x-request-id": "r-1", "x-api-key": "s"}):
                pass

    asyncio.run(main())
    (client,) = spans.spans
    recorded = attrs(client)
    assert (
        recorded["url.full"] == base + "/echo?api_key=REDACTED&Token=REDACTED&n=1&X-Sig=REDACTED"
    )
    assert recorded["http.request.header.x-request-id"] == ("r-1",)
    assert not any("x-api-key" in key for key in recorded)
    assert "user" not in recorded["url.full"]


def test_repeated_urls_each_get_their_own_attributes(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """The last request's URL attributes are reused only for the same URL and method.

    Headers are read per request, the redaction holds on reuse, and a span's
    attributes set later never reach the next request's span.
    """
    base = aiohttp_server(echo_app())
    secret = base + "/echo?token=abc&n=1"
    plain = base + "/echo?n=2"

    async def main() -> None:
        async with aiohttp.ClientSession(
            **traced(record_request_headers=["x-request-id"])
        ) as session:
            calls = [("GET", secret), ("GET", secret), ("GET", plain), ("POST", plain)]
            calls += [("GET", secret)]
            for index, (method, url) in enumerate(calls):
                headers = {"x-request-id": f"r-{index}"}
                async with session.request(method, url, headers=headers):
                    pass

    asyncio.run(main())
    got = [
        (
            attrs(s)["http.request.method"],
            attrs(s)["url.full"],
            attrs(s)["http.request.header.x-request-id"],
            attrs(s)["http.response.status_code"],
        )
        for s in spans.spans
    ]
    redacted = base + "/echo?token=REDACTED&n=1"
    assert got == [
        ("GET", redacted, ("r-0",), 200),
        ("GET", redacted, ("r-1",), 200),
        ("GET", plain, ("r-2",), 200),
        ("POST", plain, ("r-3",), 405),
        ("GET", redacted, ("r-4",), 200),
    ]
    assert all(attrs(s)["server.address"] == "127.0.0.1" for s in spans.spans)
    assert "error.type" not in attrs(spans.spans[4])  # the POST's 405 stayed on its own span


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h/run?n=1", "http://h/run?n=1"),
        ("http://h/run", "http://h/run"),
        ("http://h/run?%74oken=abc&n=1", "http://h/run?%74oken=REDACTED&n=1"),
        ("http://u:p@h/run", "http://h/run"),
        ("http://h/run?a=1#frag", "http://h/run?a=1#REDACTED"),
        ("http://h/run?SIGNATURE=x", "http://h/run?SIGNATURE=REDACTED"),
        ("http://h/run?q=a%20b&pct=100%", "http://h/run?q=a%20b&pct=100%"),  # left as sent
        ("http://h/run?a=1;token=x", "http://h/run?a=1;token=REDACTED"),
        ("http://h/run?token=x&a=\ud800", "REDACTED"),  # cannot be re-encoded: nothing of it
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    """Userinfo dropped, fragments and secret-like values redacted, percent-encoded keys too."""
    assert redact_url(url) == expected


def test_a_raising_hook_is_contained(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    """A request hook that raises is logged; the request succeeds and the span ends."""
    url = aiohttp_server(echo_app()) + "/echo"

    def hook(span: Any, params: Any) -> None:
        raise RuntimeError("hook bug")

    config = traced(request_hook=hook, response_hook=hook)
    with caplog.at_level(logging.WARNING, "asynctrace"):
        for _ in range(2):
            body = asyncio.run(get_json(url, **config))
            assert "traceparent" in body
    assert len(spans.by_name("GET")) == 2
    assert any("hook" in r.getMessage() for r in caplog.records)


def test_instrument_uninstrument_instrument_one_layer(aiohttp_server: Any) -> None:
    """Global instrumentation is idempotent and reversible: exactly one layer, then none."""
    original = aiohttp.ClientSession.__init__
    url = aiohttp_server(echo_app()) + "/echo"

    def ours(session: aiohttp.ClientSession) -> int:
        layers = [*session._trace_configs, *session._middlewares]
        return sum(1 for layer in layers if getattr(layer, "asynctrace", False))

    async def count() -> int:
        async with aiohttp.ClientSession() as session:
            return ours(session)

    try:
        instrument_aiohttp_client()
        instrument_aiohttp_client()
        assert asyncio.run(count()) == 1
        uninstrument_aiohttp_client()
        assert aiohttp.ClientSession.__init__ is original
        assert asyncio.run(count()) == 0
        instrument_aiohttp_client()
        assert asyncio.run(count()) == 1
        with capture_spans("job"):

            async def main() -> Any:
                with at.umbrella_span("job", "driver"):
                    return await get_json(url)

            assert asyncio.run(main())["traceparent"] is not None
    finally:
        uninstrument_aiohttp_client()
    assert aiohttp.ClientSession.__init__ is original


def test_global_instrumentation_never_doubles_a_traced_session(aiohttp_server: Any) -> None:
    """A session that brings its own trace_config gets no second layer from the global one."""
    url = aiohttp_server(echo_app()) + "/echo"
    try:
        instrument_aiohttp_client()
        with capture_spans("job,per_prompt") as captured:
            asyncio.run(get_json(url, trace_configs=[trace_config()]))
    finally:
        uninstrument_aiohttp_client()
    assert captured.names() == ["GET"]
