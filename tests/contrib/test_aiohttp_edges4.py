"""instrument_aiohttp_client stacked with OpenTelemetry's AioHttpClientInstrumentor: either
one uninstrumented, in every order, leaves the other working as it reports; repeated
instrument/uninstrument cycles never stack wrappers; outside any span only the scopes'
baggage is sent. Requests go to a real aiohttp server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from asynctrace_contrib.aiohttp_client import (
    client_middleware,
    instrument_aiohttp_client,
    uninstrument_aiohttp_client,
)
from opentelemetry.trace import SpanKind

import asynctrace as at
from asynctrace.testing import CapturedSpans, capture_spans

otel_aiohttp = pytest.importorskip("opentelemetry.instrumentation.aiohttp_client")

OURS = "asynctrace"
OTEL = "opentelemetry.instrumentation.aiohttp_client"


def echo_app() -> web.Application:
    """Echoes the ``traceparent`` the request carried (``null`` without one)."""

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"traceparent": request.headers.get("traceparent")})

    app = web.Application()
    app.router.add_get("/echo", echo)
    return app


def depth(method: Any) -> int:
    """How many wrappers sit on the method (``__wrapped__`` links down to the original)."""
    count = 0
    while getattr(method, "__wrapped__", None) is not None:
        method = method.__wrapped__
        count += 1
    return count


class Stack:
    """Both instrumentations, and what one request with a fresh session gets."""

    def __init__(self, url: str, captured: CapturedSpans) -> None:
        self.url = url
        self.captured = captured
        self.otel = otel_aiohttp.AioHttpClientInstrumentor()

    def otel_on(self) -> None:
        self.otel.instrument(tracer_provider=self.captured.provider)

    def otel_off(self) -> None:
        self.otel.uninstrument()

    def request(self) -> tuple[bool, list[str]]:
        """Whether a ``traceparent`` reached the server, and the CLIENT spans' recorders.

        The traceparent, when sent, names the one CLIENT span recorded.
        """
        self.captured.clear()

        async def main() -> str | None:
            async with aiohttp.ClientSession() as session:
                with at.umbrella_span("job", "driver"):
                    async with session.get(self.url) as response:
                        sent: str | None = (await response.json())["traceparent"]
                        return sent

        sent = asyncio.run(main())
        clients = [s for s in self.captured.spans if s.kind is SpanKind.CLIENT]
        if sent is not None and clients:
            assert len(clients) == 1, [s.instrumentation_scope.name for s in clients]  # type: ignore[union-attr]
            assert int(sent.split("-")[2], 16) == clients[0].context.span_id
        return sent is not None, [s.instrumentation_scope.name for s in clients]  # type: ignore[union-attr]

    def layers(self) -> tuple[int, int]:
        """asynctrace's and OpenTelemetry's layers on a new session."""

        async def main() -> tuple[int, int]:
            async with aiohttp.ClientSession() as session:
                layers = [*session._trace_configs, *getattr(session, "_middlewares", ())]
                ours = sum(1 for layer in layers if getattr(layer, "asynctrace", False))
                otel = sum(1 for c in layers if hasattr(c, "_is_instrumented_by_opentelemetry"))
                return ours, otel

        return asyncio.run(main())


@pytest.fixture
def stack(aiohttp_server: Any) -> Iterator[Stack]:
    """Both instrumentations off at the start; at the end both are turned off the public way
    (an asynctrace wrapper left beneath OpenTelemetry's is taken off by an instrument and
    uninstrument pair) and ``ClientSession`` must be as it was."""
    cls = aiohttp.ClientSession
    init, request = vars(cls)["__init__"], vars(cls)["_request"]
    url = aiohttp_server(echo_app()) + "/echo"
    with capture_spans("job,per_prompt") as captured:
        stacked = Stack(url, captured)
        try:
            yield stacked
        finally:
            if stacked.otel.is_instrumented_by_opentelemetry:
                stacked.otel_off()
            instrument_aiohttp_client()
            uninstrument_aiohttp_client()
            restored = vars(cls)["__init__"] is init and vars(cls)["_request"] is request
            cls.__init__ = init  # type: ignore[method-assign]  # the next tests start clean
            cls._request = request  # type: ignore[method-assign]
    assert restored, "ClientSession keeps a wrapper after both were uninstrumented"


def test_ours_then_otel_uninstrument_ours(stack: Stack) -> None:
    """OpenTelemetry's wrapper sits on ours: ours goes inert, OpenTelemetry's keeps working."""
    instrument_aiohttp_client()
    stack.otel_on()
    assert stack.request() == (True, [OURS])
    uninstrument_aiohttp_client()
    assert stack.otel.is_instrumented_by_opentelemetry
    assert stack.request() == (True, [OTEL])
    assert stack.layers() == (0, 1)
    instrument_aiohttp_client()  # turns ours back on beneath OpenTelemetry's: no second wrapper
    assert depth(vars(aiohttp.ClientSession)["__init__"]) == 2
    assert stack.request() == (True, [OURS])
    uninstrument_aiohttp_client()
    stack.otel_off()
    assert stack.request() == (False, [])
    assert stack.layers() == (0, 0)


def test_ours_then_otel_uninstrument_otel(stack: Stack) -> None:
    """OpenTelemetry unwraps itself off ours: ours keeps working, then comes off cleanly."""
    instrument_aiohttp_client()
    stack.otel_on()
    stack.otel_off()
    assert stack.request() == (True, [OURS])
    assert stack.layers() == (1, 0)
    uninstrument_aiohttp_client()
    assert stack.request() == (False, [])


def test_otel_then_ours_uninstrument_otel(stack: Stack) -> None:
    """OpenTelemetry's wrapper beneath ours cannot come off the class: ours steps over it, so
    its uninstrument() holds (no span of its own, no trace config on new sessions)."""
    stack.otel_on()
    instrument_aiohttp_client()
    assert stack.request() == (True, [OURS])
    stack.otel_off()
    assert not stack.otel.is_instrumented_by_opentelemetry
    assert stack.request() == (True, [OURS])
    assert stack.layers() == (1, 0)
    with capture_spans("job") as gated:  # per_prompt off: no CLIENT span, OpenTelemetry's neither
        stack.captured = gated
        assert stack.request() == (True, [])
    uninstrument_aiohttp_client()  # puts back the original, not OpenTelemetry's stale wrapper
    assert stack.layers() == (0, 0)
    assert depth(vars(aiohttp.ClientSession)["__init__"]) == 0


def test_otel_then_ours_uninstrument_ours(stack: Stack) -> None:
    """Ours is on top: it comes off and OpenTelemetry's is left as it was."""
    stack.otel_on()
    instrument_aiohttp_client()
    uninstrument_aiohttp_client()
    assert stack.request() == (True, [OTEL])
    assert stack.layers() == (0, 1)
    stack.otel_off()
    assert stack.request() == (False, [])


ORDERS = {
    "ours-otel-unours-unotel": ("ours", "otel", "-ours", "-otel"),
    "ours-otel-unotel-unours": ("ours", "otel", "-otel", "-ours"),
    "otel-ours-unotel-unours": ("otel", "ours", "-otel", "-ours"),
    "otel-ours-unours-unotel": ("otel", "ours", "-ours", "-otel"),
    "ours-otel-unours-ours-unotel-unours": ("ours", "otel", "-ours", "ours", "-otel", "-ours"),
    "otel-ours-unotel-otel-unours-unotel": ("otel", "ours", "-otel", "otel", "-ours", "-otel"),
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_repeated_cycles_do_not_stack_wrappers(order: str, stack: Stack) -> None:
    """Each cycle of the order leaves as many wrappers as the one before, and a new session
    gets one layer of each instrumentation that is on, none of one that is off."""
    steps = {
        "ours": instrument_aiohttp_client,
        "-ours": uninstrument_aiohttp_client,
        "otel": stack.otel_on,
        "-otel": stack.otel_off,
    }
    on = {"ours": False, "otel": False}
    depths = []
    for _ in range(5):
        for step in ORDERS[order]:
            steps[step]()
            on[step.lstrip("-")] = not step.startswith("-")
            assert stack.layers() == (int(on["ours"]), int(on["otel"])), step
        depths.append(
            (
                depth(vars(aiohttp.ClientSession)["__init__"]),
                depth(vars(aiohttp.ClientSession)["_request"]),
            )
        )
    assert len(set(depths)) == 1, depths
    # At most ours, left inert, over OpenTelemetry's that was beneath it when turned off.
    assert depths[0][0] <= 2
    instrument_aiohttp_client()
    stack.otel_on()
    assert stack.request() == (True, [OURS])
    assert stack.layers() == (1, 1)


def test_outside_any_span_only_the_scopes_baggage_is_sent(aiohttp_server: Any) -> None:
    """No span current (none recorded by the client: per_prompt off), a scope entered,
    ``propagate_scopes`` on: the carrier and the request hold the scopes' ``baggage`` and
    no ``traceparent``."""
    got: list[dict[str, str]] = []

    async def echo(request: web.Request) -> web.Response:
        got.append({k.lower(): v for k, v in request.headers.items()})
        return web.Response()

    app = web.Application()
    app.router.add_get("/", echo)
    url = aiohttp_server(app) + "/"

    async def main() -> dict[str, str]:
        async with aiohttp.ClientSession(middlewares=(client_middleware(),)) as session:
            with at.iteration_scope(3), at.per_prompt_scope():
                carrier = at.current_trace_carrier()
                async with session.get(url) as response:
                    await response.read()
        return carrier

    with capture_spans("job", propagate_scopes=True) as captured:  # no CLIENT span either
        carrier = asyncio.run(main())
    assert list(carrier) == ["baggage"]
    assert "asynctrace.iteration=3" in carrier["baggage"]
    assert "traceparent" not in got[0]
    assert got[0]["baggage"] == carrier["baggage"]
    assert captured.spans == []
    with capture_spans("job") as captured:  # propagate_scopes off: nothing at all
        carrier = asyncio.run(main())
    assert carrier == {}
    assert "traceparent" not in got[1]
    assert "baggage" not in got[1]
