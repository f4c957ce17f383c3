"""HTTP layers: a caller's own baggage, option checks, span_name, secret keys, edge exchanges."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

import aiohttp
import pytest
from _server import handshake_status, wait_for
from aiohttp import web
from asynctrace_contrib._http import DEFAULT_SECRET_KEYS, redact_url
from asynctrace_contrib.aiohttp_client import client_middleware, trace_config
from asynctrace_contrib.fastapi import AsyncTraceMiddleware, instrument_fastapi
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import PlainTextResponse
from multidict import CIMultiDict
from opentelemetry import baggage
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace import StatusCode

import asynctrace as at
from asynctrace._credential_names import CREDENTIAL_KEYS
from asynctrace.testing import CapturedSpans, capture_spans


def recorder() -> tuple[web.Application, list[list[tuple[str, str]]]]:
    """An aiohttp app that keeps every request's headers (each repeat separately)."""
    seen: list[list[tuple[str, str]]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(list(request.headers.items()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app, seen


def sent_baggage(headers: list[tuple[str, str]]) -> list[str]:
    """The ``baggage`` header values one request arrived with."""
    return [value for name, value in headers if name.lower() == "baggage"]


async def get(url: str, headers: Any = None, **session: Any) -> None:
    """GET *url* once with a fresh session."""
    async with aiohttp.ClientSession(**session) as client:
        async with client.get(url, headers=headers) as response:
            await response.read()


def test_every_baggage_header_the_caller_set_goes_out_with_the_scopes(
    traced: Any, aiohttp_server: Any
) -> None:
    """Two ``baggage`` headers of the caller's are both sent, combined, then the scopes."""
    app, seen = recorder()
    url = aiohttp_server(app) + "/x"
    with capture_spans("job", propagate_scopes=True):

        async def main() -> None:
            with at.umbrella_span("job", "driver"), at.iteration_scope(7):
                await get(url, CIMultiDict([("baggage", "a=1"), ("baggage", "b=2")]), **traced())

        asyncio.run(main())
    assert sent_baggage(seen[0]) == ["a=1,b=2,asynctrace.iteration=7"]


def test_scope_entries_never_take_a_callers_baggage_over_the_w3c_limit(
    traced: Any, aiohttp_server: Any
) -> None:
    """A valid 8,180-byte header goes out as set; the scope entries that do not fit are
    counted, and a receiver still reads every entry of the caller's."""
    app, seen = recorder()
    url = aiohttp_server(app) + "/x"
    own = ",".join(f"k{i}=" + "v" * 80 for i in range(95))
    own += ",pad=" + "p" * (8180 - len(own) - 5)
    assert len(own) == 8180
    before = at.carrier_stats()["baggage_entries_not_sent"]
    with capture_spans("job", propagate_scopes=True):

        async def main() -> None:
            with at.umbrella_span("job", "driver"), at.iteration_scope(7), at.task_scope(23):
                await get(url, {"baggage": own}, **traced())

        asyncio.run(main())
    (value,) = sent_baggage(seen[0])
    assert value == own
    assert at.carrier_stats()["baggage_entries_not_sent"] - before == 2
    assert len(baggage.get_all(W3CBaggagePropagator().extract({"baggage": value}))) == 96


def test_the_180th_member_is_the_last_one_sent(traced: Any, aiohttp_server: Any) -> None:
    """A caller's header of 179 members gets one scope entry, the first; the next is counted."""
    app, seen = recorder()
    url = aiohttp_server(app) + "/x"
    own = ",".join(f"k{i}=1" for i in range(179))
    before = at.carrier_stats()["baggage_entries_not_sent"]
    with capture_spans("job", propagate_scopes=True):

        async def main() -> None:
            with at.umbrella_span("job", "driver"), at.iteration_scope(7), at.task_scope(23):
                await get(url, {"baggage": own}, **traced())

        asyncio.run(main())
    assert sent_baggage(seen[0]) == [own + ",asynctrace.iteration=7"]
    assert at.carrier_stats()["baggage_entries_not_sent"] - before == 1


def test_a_callers_scope_key_wins_member_by_member(traced: Any, aiohttp_server: Any) -> None:
    """A key the caller set is not sent twice; the text "asynctrace." in a value is no key."""
    app, seen = recorder()
    url = aiohttp_server(app) + "/x"
    with capture_spans("job", propagate_scopes=True):

        async def main() -> None:
            with at.umbrella_span("job", "driver"), at.iteration_scope(7), at.task_scope(23):
                await get(
                    url, {"baggage": "note=asynctrace.x, asynctrace.iteration=3"}, **traced()
                )

        asyncio.run(main())
    assert sent_baggage(seen[0]) == [
        "note=asynctrace.x, asynctrace.iteration=3,asynctrace.task_id=23"
    ]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("record_request_headers", "x-request-id"),
        ("record_request_headers", [None]),
        ("record_request_headers", [b"x-request-id"]),
        ("record_response_headers", [3]),
        ("record_response_headers", [""]),
        ("secret_keys", None),
        ("secret_keys", "token"),
        ("span_name", "GET"),
        ("request_hook", 3),
        ("response_hook", "hook"),
    ],
)
def test_bad_client_options_fail_when_the_layer_is_made(option: str, value: Any) -> None:
    """A bad option raises ConfigurationError naming it and the value, in both forms."""
    for make in (client_middleware, trace_config):
        with pytest.raises(at.ConfigurationError, match=option) as caught:
            make(**{option: value})
        assert repr(value) in str(caught.value)


def test_span_name_that_raises_or_returns_no_str_gives_the_default_once(
    traced: Any, aiohttp_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """span_name raising, or returning None/42/bytes: the default name, one warning per layer."""
    app, _ = recorder()
    url = aiohttp_server(app) + "/x"

    def boom(method: str, request: Any) -> str:
        raise ZeroDivisionError

    for span_name in (boom, lambda m, r: None, lambda m, r: 42, lambda m, r: b"GET"):
        caplog.clear()
        session = traced(span_name=span_name)
        with capture_spans("job,per_prompt") as captured, caplog.at_level(logging.WARNING):

            async def main(session: dict[str, Any] = session) -> None:
                with at.umbrella_span("job", "driver"):
                    async with aiohttp.ClientSession(**session) as client:
                        for _ in range(4):
                            async with client.get(url) as response:
                                await response.read()

            asyncio.run(main())
        assert captured.names().count("GET") == 4
        assert len([r for r in caplog.records if "span_name" in r.getMessage()]) == 1


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("trust_incoming", "false"),
        ("trust_incoming", 0),
        ("excluded_urls", ["("]),
        ("excluded_urls", "^/ok$,["),
        ("excluded_urls", [None]),
        ("server_request_hook", "hook"),
    ],
)
def test_bad_server_options_fail_when_instrumenting(option: str, value: Any) -> None:
    """instrument_fastapi and the middleware refuse a bad option with ConfigurationError."""
    with pytest.raises(at.ConfigurationError, match=option):
        instrument_fastapi(FastAPI(), **{option: value})
    with pytest.raises(at.ConfigurationError, match=option):
        AsyncTraceMiddleware(FastAPI(), **{option: value})


@pytest.mark.parametrize("key", sorted({*CREDENTIAL_KEYS, "jsessionid", "PHPSESSID"}))
def test_url_full_hides_every_credential_name_by_default(key: str) -> None:
    """Every name asynctrace treats as a credential, and session ids, are secret query keys."""
    assert redact_url(f"http://h/x?{key}=s3cr3t&n=1") == f"http://h/x?{key}=REDACTED&n=1"
    assert "s3cr3t" not in redact_url(f"http://h/x;{key}=s3cr3t")
    assert set(DEFAULT_SECRET_KEYS) >= {"pwd", "jwt", "passphrase", "jsessionid"}


def test_a_request_a_middleware_makes_in_the_trace_config_window_is_traced(
    aiohttp_server: Any,
) -> None:
    """With trace_config, a request made by a client middleware of another request (an
    auth token fetch) still carries traceparent and gets its CLIENT span."""
    app, seen = recorder()
    url = aiohttp_server(app)

    async def main() -> None:
        async with aiohttp.ClientSession(trace_configs=[trace_config()]) as inner:

            async def fetch_token(request: Any, handler: Any) -> Any:
                async with inner.get(url + "/token") as response:
                    await response.read()
                return await handler(request)

            async with aiohttp.ClientSession(
                trace_configs=[trace_config()], middlewares=(fetch_token,)
            ) as client:
                with at.umbrella_span("job", "driver"):
                    async with client.get(url + "/x") as response:
                        await response.read()

    with capture_spans("job,per_prompt") as captured:
        asyncio.run(main())
    assert all(any(n.lower() == "traceparent" for n, _ in headers) for headers in seen)
    assert len(seen) == 2
    assert captured.names().count("GET") == 2


def test_a_refused_websocket_records_its_status(asgi_server: Any, spans: CapturedSpans) -> None:
    """A websocket refused with an HTTP response (denial extension) records that status."""
    app = FastAPI()

    @app.websocket("/ws")
    async def refuse(websocket: WebSocket) -> None:
        await websocket.send_denial_response(PlainTextResponse("no", status_code=403))

    instrument_fastapi(app)
    url = asgi_server(app).replace("http://", "ws://") + "/ws"

    assert handshake_status(url) == 403
    (server,) = wait_for(spans, "WEBSOCKET /ws")
    assert dict(server.attributes)["http.response.status_code"] == 403
    assert server.status.status_code is StatusCode.UNSET


def disconnect_app(ask: bool, started: threading.Event) -> FastAPI:
    """/slow answers a plain response 0.5 s in; with *ask*, it checks for its client first.
    *started* is set when the handler runs."""
    app = FastAPI()

    @app.get("/slow")
    async def slow(request: Request) -> dict[str, bool]:
        started.set()
        await asyncio.sleep(0.5)
        if ask:
            await request.is_disconnected()
        return {"late": True}

    instrument_fastapi(app)
    return app


async def give_up(url: str, started: threading.Event) -> None:
    """GET *url*, giving up (closing the connection) once the handler has started: not
    before, however slowly a loaded host gets the request to it."""
    async with aiohttp.ClientSession() as session:

        async def fetch() -> None:
            async with session.get(url) as response:
                await response.read()

        request = asyncio.ensure_future(fetch())
        deadline = time.monotonic() + 10
        while not started.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await request


def test_a_disconnect_the_app_receives_is_a_cancellation(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """A handler that asks ``is_disconnected()`` after its client left: span cancelled."""
    started = threading.Event()
    asyncio.run(give_up(asgi_server(disconnect_app(True, started)) + "/slow", started))
    (server,) = wait_for(spans, "GET /slow")
    assert dict(server.attributes)["asynctrace.cancelled"] is True
    assert server.status.status_code is StatusCode.UNSET


def test_a_plain_response_after_an_unseen_disconnect_is_recorded_as_sent(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """Nothing received after the client left: the span records the response (documented)."""
    started = threading.Event()
    asyncio.run(give_up(asgi_server(disconnect_app(False, started)) + "/slow", started))
    (server,) = wait_for(spans, "GET /slow")
    assert dict(server.attributes)["http.response.status_code"] == 200
    assert "asynctrace.cancelled" not in dict(server.attributes)
