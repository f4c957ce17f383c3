"""Scopes across the HTTP hop (W3C baggage) and one span per layer next to OpenTelemetry's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from _server import wait_for
from asynctrace_contrib.aiohttp_client import (
    client_middleware,
    instrument_aiohttp_client,
    trace_config,
    uninstrument_aiohttp_client,
)
from asynctrace_contrib.fastapi import SERVER_GROUP, instrument_fastapi
from fastapi import FastAPI
from opentelemetry.trace import SpanKind

import asynctrace as at
from asynctrace.testing import CapturedSpans, capture_spans


def gym_app(**options: Any) -> FastAPI:
    """A Gym-style server: one step endpoint that opens a reward span."""
    app = FastAPI()

    @app.get("/step")
    async def step() -> dict[str, Any]:
        with at.managed_span("reward", "env.score"):
            return {
                "iteration": at.current_iteration(),
                "per_prompt": at.in_per_prompt_scope(),
                "task": at.current_task_id(),
                "session": at.current_session_id(),
                "bucket": at.current_bucket(),
            }

    instrument_fastapi(app, **options)
    return app


async def call(url: str, *, per_prompt: bool, **session: Any) -> Any:
    """GET *url* from inside a step's scopes (and a per-prompt scope when asked)."""
    session = session or {"middlewares": (client_middleware(),)}
    with (
        at.iteration_scope(5),
        at.task_scope(17),
        at.session_scope(),
        at.bucket_scope(at.Bucket.OVERHEAD),
        at.umbrella_span("job", "driver"),
    ):
        async with aiohttp.ClientSession(**session) as client:
            if per_prompt:
                with at.per_prompt_scope():
                    async with client.get(url) as response:
                        return await response.json()
            async with client.get(url) as response:
                return await response.json()


def test_server_spans_carry_the_callers_scopes(asgi_server: Any) -> None:
    """propagate_scopes on: the server span and handler spans carry rl.iteration, task, session."""
    url = asgi_server(gym_app()) + "/step"
    with capture_spans(f"job,reward,{SERVER_GROUP}", propagate_scopes=True) as captured:
        body = asyncio.run(call(url, per_prompt=False))
        (server,) = wait_for(captured, "GET /step")
    (score,) = captured.by_name("env.score")
    assert body["iteration"] == 5
    assert body["task"] == 17
    assert body["session"]
    assert body["bucket"] is None  # the bucket stays home
    for span in (server, score):
        attrs = dict(span.attributes or {})
        assert attrs["rl.iteration"] == 5, span.name
        assert attrs["rl.task_id"] == 17
        assert attrs["rl.session_id"] == body["session"]
        assert "rl.bucket" not in attrs or span is score  # score keeps its own group's bucket
    assert dict(score.attributes or {})["rl.bucket"] == "productive"


def test_scopes_stay_home_when_off(asgi_server: Any) -> None:
    """propagate_scopes off (the default): nothing of the scopes reaches the server."""
    url = asgi_server(gym_app()) + "/step"
    with capture_spans(f"job,reward,{SERVER_GROUP}") as captured:
        body = asyncio.run(call(url, per_prompt=True))
        (server,) = wait_for(captured, "GET /step")
    assert body == {
        "iteration": None,
        "per_prompt": False,
        "task": None,
        "session": None,
        "bucket": None,
    }
    assert "rl.iteration" not in dict(server.attributes or {})


@pytest.mark.parametrize("per_prompt_group", [False, True])
def test_per_prompt_requests_follow_the_per_prompt_gate(
    asgi_server: Any, per_prompt_group: bool
) -> None:
    """A per-prompt caller: the server span and the handler's spans are on only with per_prompt."""
    url = asgi_server(gym_app()) + "/step"
    spec = f"job,reward,{SERVER_GROUP}" + (",per_prompt" if per_prompt_group else "")
    with capture_spans(spec, propagate_scopes=True) as captured:
        body = asyncio.run(call(url, per_prompt=True))
        if per_prompt_group:
            wait_for(captured, "GET /step")
        else:
            time.sleep(0.2)
        names = sorted(captured.names())
        # A caller outside the per-prompt scope is traced under the server's own gates.
        asyncio.run(call(url, per_prompt=False))
        wait_for(captured, "GET /step", 2 if per_prompt_group else 1)
    assert body["per_prompt"] is True
    if per_prompt_group:
        assert names == ["GET", "GET /step", "driver", "env.score"]
    else:
        assert names == ["driver"]  # client, server and handler spans all off: per_prompt is off
    assert "env.score" in captured.names()


def test_untrusted_baggage_never_enters_a_scope(asgi_server: Any) -> None:
    """trust_incoming=False: a hostile caller's asynctrace.* baggage changes nothing."""
    url = asgi_server(gym_app(trust_incoming=False)) + "/step"

    async def hostile() -> Any:
        headers = {
            "baggage": "asynctrace.iteration=666,asynctrace.per_prompt=1,"
            "asynctrace.task_id=1,asynctrace.session_id=evil," + "x" * 9000,
        }
        async with aiohttp.ClientSession() as client:
            async with client.get(url, headers=headers) as response:
                return await response.json()

    with capture_spans(f"reward,{SERVER_GROUP}", propagate_scopes=True) as captured:
        body = asyncio.run(hostile())
        (server,) = wait_for(captured, "GET /step")
    assert body["iteration"] is None
    assert body["per_prompt"] is False
    assert body["session"] is None
    assert "rl.iteration" not in dict(server.attributes or {})


@pytest.fixture
def otel_aiohttp(spans: CapturedSpans) -> Iterator[Any]:
    """OpenTelemetry's aiohttp client instrumentation, recording into the captured provider."""
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

    instrumentor = AioHttpClientInstrumentor()

    def install() -> None:
        instrumentor.instrument(tracer_provider=spans.provider)

    yield install
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
    # asynctrace's wrapper, left inert beneath OpenTelemetry's (as documented), is the
    # outermost now: one more cycle takes it off, so later tests find the class as it was.
    instrument_aiohttp_client()
    uninstrument_aiohttp_client()


def one_client_one_server(captured: CapturedSpans) -> tuple[Any, Any]:
    """The request's one CLIENT and one SERVER span; the server is the client's child."""
    wait_for(captured, "GET /step")
    time.sleep(0.1)
    clients = [s for s in captured.spans if s.kind is SpanKind.CLIENT]
    servers = [s for s in captured.spans if s.kind is SpanKind.SERVER]
    assert len(clients) == 1, [(s.name, s.instrumentation_scope) for s in clients]
    assert len(servers) == 1, [(s.name, s.instrumentation_scope) for s in servers]
    (client,), (server,) = clients, servers
    assert server.parent is not None
    assert server.parent.span_id == client.context.span_id
    return client, server


@pytest.mark.parametrize("order", ["otel-first", "asynctrace-first"])
def test_one_client_span_with_otel_aiohttp_instrumentation(
    order: str, asgi_server: Any, otel_aiohttp: Any, spans: CapturedSpans
) -> None:
    """Both instrumented globally: asynctrace handles the request; OpenTelemetry's steps aside."""
    url = asgi_server(gym_app()) + "/step"
    try:
        if order == "otel-first":
            otel_aiohttp()
            instrument_aiohttp_client()
        else:
            instrument_aiohttp_client()
            otel_aiohttp()
        asyncio.run(call(url, per_prompt=False, trace_configs=[]))
    finally:
        uninstrument_aiohttp_client()
    client, _ = one_client_one_server(spans)
    assert client.instrumentation_scope.name == "asynctrace"


def test_otel_aiohttp_follows_the_per_prompt_gate(asgi_server: Any, otel_aiohttp: Any) -> None:
    """per_prompt off: no CLIENT span at all, not even OpenTelemetry's."""
    url = asgi_server(gym_app()) + "/step"
    otel_aiohttp()
    with capture_spans(f"job,{SERVER_GROUP}") as captured:
        asyncio.run(call(url, per_prompt=False, trace_configs=[trace_config()]))
        (server,) = wait_for(captured, "GET /step")
    assert [s for s in captured.spans if s.kind is SpanKind.CLIENT] == []
    (driver,) = captured.by_name("driver")
    assert server.parent.span_id == driver.context.span_id  # type: ignore[union-attr]


def test_session_middleware_defers_to_an_earlier_otel_span(
    asgi_server: Any, otel_aiohttp: Any, spans: CapturedSpans
) -> None:
    """OpenTelemetry's trace config runs before any middleware: its span is the one sent."""
    url = asgi_server(gym_app()) + "/step"
    otel_aiohttp()
    asyncio.run(call(url, per_prompt=False))
    client, _ = one_client_one_server(spans)
    assert client.instrumentation_scope.name.startswith("opentelemetry.instrumentation")


def test_one_server_span_with_otel_fastapi_instrumentation(
    asgi_server: Any, spans: CapturedSpans
) -> None:
    """FastAPIInstrumentor and instrument_fastapi on one app: one SERVER span, scopes restored."""
    pytest.importorskip("opentelemetry.instrumentation.fastapi")
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    app = gym_app()
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=spans.provider, exclude_spans=["receive", "send"]
    )
    try:
        url = asgi_server(app) + "/step"
        asyncio.run(call(url, per_prompt=False))
        _, server = one_client_one_server(spans)
    finally:
        FastAPIInstrumentor.uninstrument_app(app)
    (score,) = spans.by_name("env.score")
    assert score.parent.span_id == server.context.span_id  # type: ignore[union-attr]
