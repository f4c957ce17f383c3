"""Scope stamps on spans started straight through asynctrace's tracers: ``get_tracer()``'s
``start_span`` and ``start_as_current_span`` on both providers, OpenTelemetry's global
tracer and its aiohttp client instrumentation on the fast provider; the span's own
attribute over a stamp; the stamps kept past the attribute limit."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from aiohttp import web

import asynctrace as at
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]
PROVIDER_TRACERS = ["fast", "sdk"]
STAMPS = ("rl.iteration", "rl.task_id", "rl.session_id")


def _stamps(span: Any) -> dict[str, Any]:
    attributes = dict(span.attributes or {})
    return {key: attributes[key] for key in STAMPS if key in attributes}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_get_tracer_spans_carry_the_scope_stamps(provider: str) -> None:
    with capture_spans("all", provider=provider) as captured:
        tracer = at.get_tracer()
        with at.iteration_scope(4), at.task_scope(9), at.session_scope() as session:
            with tracer.start_as_current_span("current", attributes={"k": 1}):
                tracer.start_span("started").end()
        tracer.start_span("outside").end()
    spans = {span.name: span for span in captured}
    expected = {"rl.iteration": 4, "rl.task_id": 9, "rl.session_id": session}
    assert _stamps(spans["current"]) == expected
    assert _stamps(spans["started"]) == expected
    assert dict(spans["current"].attributes or {})["k"] == 1
    assert _stamps(spans["outside"]) == {}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_direct_span_keeps_its_own_iteration(provider: str) -> None:
    with capture_spans("all", provider=provider) as captured:
        with at.iteration_scope(2), at.task_scope("item-a"):
            at.get_tracer().start_span("own", attributes={"rl.iteration": 1}).end()
            with at.get_tracer().start_as_current_span("later") as span:
                span.set_attribute("rl.iteration", 0)
    spans = {span.name: span for span in captured}
    assert _stamps(spans["own"]) == {"rl.iteration": 1, "rl.task_id": "item-a"}
    assert _stamps(spans["later"])["rl.iteration"] == 0


def _limited(provider: str, limit: int, length: int | None = None) -> tuple[Any, Any, Any]:
    """A tracer of a *provider* holding at most *limit* attributes a span (as
    ``get_tracer()`` hands it out, the SDK provider with asynctrace's first span
    processor), the provider, and its in-memory exporter."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from asynctrace._fast import FastTracerProvider, SpanLimits
    from asynctrace._redacting_tracer import RedactingTracer
    from asynctrace.export._convert import Converter
    from asynctrace.export._lazy_memory import LazyMemoryExporter
    from asynctrace.export._open_spans import OpenSpanTracker

    limits = SpanLimits(max_attributes=limit, max_attribute_length=length)
    if provider == "fast":
        resource = Resource.create({})
        fast = FastTracerProvider(resource, limits=limits)
        memory: Any = LazyMemoryExporter(Converter(resource, limits))
        fast.add_queue(memory)
        return fast.get_tracer("direct"), fast, memory
    sdk = TracerProvider(span_limits=limits.to_sdk())
    memory = InMemorySpanExporter()
    sdk.add_span_processor(OpenSpanTracker())  # first, as configure() puts it: it stamps
    sdk.add_span_processor(SimpleSpanProcessor(memory))
    return RedactingTracer(sdk.get_tracer("direct")), sdk, memory


@pytest.mark.parametrize("provider", PROVIDERS)
def test_past_the_limit_a_direct_span_keeps_the_stamps(provider: str) -> None:
    tracer, owner, memory = _limited(provider, 4)
    with at.iteration_scope(5), at.task_scope(6):
        tracer.start_span("many", attributes={f"m{i}": i for i in range(10)}).end()
    owner.force_flush()
    (span,) = memory.get_finished_spans()
    owner.shutdown()
    attributes = dict(span.attributes or {})
    assert _stamps(span) == {"rl.iteration": 5, "rl.task_id": 6}
    assert set(attributes) == {"rl.iteration", "rl.task_id", "m8", "m9"}
    assert span.dropped_attributes == 8


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_length_limit_cuts_no_stamp_of_a_direct_span(provider: str) -> None:
    tracer, owner, memory = _limited(provider, 128, length=3)
    with at.task_scope("item-long"), at.session_scope() as session:
        tracer.start_span("cut", attributes={"note": "abcdef"}).end()
    owner.force_flush()
    (span,) = memory.get_finished_spans()
    owner.shutdown()
    assert _stamps(span) == {"rl.task_id": "item-long", "rl.session_id": session}
    assert dict(span.attributes or {})["note"] == "abc"


@pytest.mark.parametrize("provider", PROVIDER_TRACERS)
def test_a_providers_own_tracer_is_stamped(provider: str) -> None:
    """A tracer taken from the provider itself (as an instrumentation given it does)."""
    with capture_spans("all", provider=provider) as captured:
        tracer = captured.provider.get_tracer("some.library")
        with at.iteration_scope(3), tracer.start_as_current_span("lib"):
            pass
    (span,) = captured
    assert _stamps(span) == {"rl.iteration": 3}


_GLOBAL_CHILD = """
import json, tempfile
import asynctrace as at
from opentelemetry import trace
t = at.configure({"enabled": True, "exporters": ["memory"], "output_dir": tempfile.mkdtemp()})
tracer = trace.get_tracer("third.party")
with at.iteration_scope(8), at.task_scope(11):
    with tracer.start_as_current_span("global.current"):
        tracer.start_span("global.started").end()
t.flush()
spans = t.memory_exporter.get_finished_spans()
t.shutdown()
print(json.dumps({s.name: [s.attributes.get("rl.iteration"), s.attributes.get("rl.task_id")]
                  for s in spans}))
"""


@pytest.mark.parametrize("provider", PROVIDER_TRACERS)
def test_the_global_providers_spans_carry_the_scope_stamps(provider: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTRACE_")}
    env["ASYNCTRACE_PROVIDER"] = provider
    done = subprocess.run(
        [sys.executable, "-c", _GLOBAL_CHILD], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"global.current": [8, 11], "global.started": [8, 11]}


async def _get_from_local_server() -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/hello", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        import aiohttp

        with at.iteration_scope(12), at.task_scope("item-7"):
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/hello") as response:
                    assert await response.text() == "ok"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("provider", PROVIDER_TRACERS)
def test_otel_aiohttp_client_spans_carry_the_scope_stamps(provider: str) -> None:
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

    instrumentor = AioHttpClientInstrumentor()
    with capture_spans("all", provider=provider) as captured:
        instrumentor.instrument(tracer_provider=captured.provider)
        try:
            asyncio.run(_get_from_local_server())
        finally:
            instrumentor.uninstrument()
    clients = [s for s in captured if s.name.startswith("GET")]
    assert len(clients) == 1, [s.name for s in captured]
    assert _stamps(clients[0]) == {"rl.iteration": 12, "rl.task_id": "item-7"}


def _one_limited_span(provider: str, limit: int, attributes: Any) -> tuple[Any, str]:
    tracer, owner, memory = _limited(provider, limit)
    with at.iteration_scope(5), at.task_scope(6), at.session_scope() as session:
        tracer.start_span("own", attributes=attributes).end()
    owner.force_flush()
    (span,) = memory.get_finished_spans()
    owner.shutdown()
    return span, session


@pytest.mark.parametrize("provider", PROVIDERS)
def test_past_the_limit_a_spans_own_stamp_key_is_kept_with_its_value(provider: str) -> None:
    """A stamp key the span was given counts as a stamp when the scope stamps overflow
    the limit: kept with the span's own value, the oldest other attributes evicted."""
    span, session = _one_limited_span(provider, 4, {"rl.task_id": "mine", "a": 1, "b": 2, "c": 3})
    assert dict(span.attributes or {}) == {
        "rl.iteration": 5,
        "rl.task_id": "mine",
        "rl.session_id": session,
        "c": 3,
    }
    assert span.dropped_attributes == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_limit_below_the_stamps_keeps_the_spans_own_stamp(provider: str) -> None:
    """More stamps than the limit: the span's own stamp key is one of those kept."""
    span, session = _one_limited_span(provider, 2, {"rl.task_id": "mine", "a": 1})
    attributes = dict(span.attributes or {})
    assert attributes == {"rl.task_id": "mine", "rl.session_id": session}
    assert span.dropped_attributes == 2


@pytest.mark.parametrize("many", [False, True])
def test_a_stamp_key_given_past_the_limit_is_kept_on_the_fast_provider(many: bool) -> None:
    """Given more attributes than the limit, the oldest of which is a stamp key: that
    key is kept, with the span's value over the scope's (a dict, and a mapping)."""
    from types import MappingProxyType

    given = {"rl.iteration": 1, "a": 1, "b": 2, "c": 3}
    span, session = _one_limited_span("fast", 3, MappingProxyType(given) if many else given)
    assert dict(span.attributes or {}) == {
        "rl.iteration": 1,
        "rl.task_id": 6,
        "rl.session_id": session,
    }
    assert span.dropped_attributes == 3  # a, b, c: 6 keys, 3 kept
