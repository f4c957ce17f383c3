"""Interoperability with the OpenTelemetry ecosystem, on both providers ("fast" and "sdk").

- As OpenTelemetry's global tracer provider (in a fresh process, see
  ``_interop_child.py``): OpenTelemetry's own aiohttp client instrumentation
  records client spans through asynctrace against real aiohttp and uvicorn
  servers on 127.0.0.1, nested under asynctrace spans and sent as the W3C
  ``traceparent``; plain ``trace.get_tracer(...)`` spans and asynctrace spans
  nest under each other both ways.
- The OpenTelemetry API works unchanged on asynctrace's spans:
  ``trace.use_span``, ``set_span_in_context`` with ``context.attach/detach``,
  the W3C propagator (``propagate.inject/extract``,
  ``TraceContextTextMapPropagator``), asynctrace's own carriers.
- SDK processors and exporters of the user's receive ``ReadableSpan`` objects,
  and a user's own SDK ``TracerProvider`` records asynctrace's spans and keeps
  running after ``telemetry.shutdown()``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import asynctrace
from asynctrace import Telemetry

pytest.importorskip("aiohttp")
pytest.importorskip("uvicorn")
pytest.importorskip("opentelemetry.instrumentation.aiohttp_client")

CHILD = Path(__file__).parent / "_interop_child.py"
PROVIDERS = ["fast", "sdk"]
W3C = TraceContextTextMapPropagator()
REMOTE_TRACE = 0x0AF7651916CD43DD8448EB211C80319C
REMOTE_SPAN = 0xB7AD6B7169203331


def memory_config(**extra: Any) -> dict[str, Any]:
    """A configuration that records every group into the in-memory exporter."""
    return {"enabled": True, "span_groups": "all", "exporters": ["memory"], **extra}


def traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """A version-00 W3C traceparent header."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def header_of(span: trace.Span) -> str:
    """The traceparent that names *span* as the parent."""
    ctx = span.get_span_context()
    return traceparent(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))


def finished(telemetry: Telemetry) -> dict[str, ReadableSpan]:
    """The finished spans of *telemetry*'s memory exporter, by name (names are unique)."""
    memory = telemetry.memory_exporter
    assert memory is not None
    spans = {span.name: span for span in memory.get_finished_spans()}
    assert len(spans) == len(memory.get_finished_spans()), "span names must be unique here"
    return spans


def parent_id(span: ReadableSpan) -> int | None:
    """The parent span id of a finished span (``None`` for a root)."""
    return span.parent.span_id if span.parent is not None else None


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    """Each test runs on the fast provider and on the SDK provider."""
    return str(request.param)


@pytest.fixture
def telemetry(provider: str) -> Iterator[Telemetry]:
    """A running in-memory configuration on *provider*, shut down after the test."""
    running = asynctrace.configure(memory_config(provider=provider))
    yield running
    running.shutdown(timeout_s=5.0)


# ---------------------------------------------------------------------------
# asynctrace as OpenTelemetry's global provider: in a fresh process.


@pytest.fixture(scope="module", params=PROVIDERS)
def as_global(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Run ``_interop_child.py`` once per provider and return what it printed."""
    done = subprocess.run(
        [sys.executable, str(CHILD), request.param],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["provider"] = request.param
    result["by_name"] = {}
    for span in result["spans"]:
        result["by_name"].setdefault(span["name"], []).append(span)
    return result


def test_configure_installs_the_global_provider(as_global: dict[str, Any]) -> None:
    """configure() owns the untouched global: it forwards to the provider asynctrace runs."""
    assert as_global["owns_global"] is True
    assert as_global["global_type"] == "SwitchingTracerProvider"
    expected = "FastTracerProvider" if as_global["provider"] == "fast" else "TracerProvider"
    assert as_global["target_type"] == expected
    assert as_global["flushed"] is True


def test_aiohttp_instrumentation_nests_under_asynctrace_spans(as_global: dict[str, Any]) -> None:
    """AioHttpClientInstrumentor's CLIENT spans are children of the current asynctrace span.

    One request runs inside a managed_span (under an umbrella), one directly
    under the umbrella; both land in the umbrella's trace with the right parent,
    and the instrumentation restores the current span after the request.
    """
    ids = as_global["ids"]
    (step,) = as_global["by_name"]["interop.step"]
    (generate,) = as_global["by_name"]["interop.generate"]
    clients = as_global["by_name"]["GET"]
    assert len(clients) == 2
    assert step["parent_id"] is None
    assert step["span_id"] == ids["step"]
    assert generate["parent_id"] == ids["step"]
    assert generate["span_id"] == ids["generate"]
    by_parent = {client["parent_id"]: client for client in clients}
    assert set(by_parent) == {ids["generate"], ids["step"]}
    for client in clients:
        assert client["trace_id"] == step["trace_id"]
        assert client["parent_remote"] is False
        assert client["kind"] == "CLIENT"
        assert client["scope"] == "opentelemetry.instrumentation.aiohttp_client"
        assert client["attributes"]["http.status_code"] == 200
        assert client["attributes"]["http.method"] == "GET"
    assert as_global["seen"]["after_request_current"] == ids["generate"]


def test_aiohttp_instrumentation_sends_the_client_span_as_traceparent(
    as_global: dict[str, Any],
) -> None:
    """Each server (aiohttp and uvicorn) got a traceparent naming the client span, sampled."""
    ids = as_global["ids"]
    by_parent = {client["parent_id"]: client for client in as_global["by_name"]["GET"]}
    for server, parent in (("aiohttp", ids["generate"]), ("uvicorn", ids["step"])):
        client = by_parent[parent]
        header = as_global["seen"][server]["traceparent"]
        version, trace_id, span_id, flags = header.split("-")
        assert (version, trace_id, span_id) == ("00", client["trace_id"], client["span_id"])
        assert int(flags, 16) & 0x01, f"{server} got an unsampled traceparent {header}"


def test_plain_tracer_and_asynctrace_spans_nest_both_ways(as_global: dict[str, Any]) -> None:
    """trace.get_tracer(...) spans record through asynctrace and nest with its spans.

    umbrella > OTel span > managed_span > OTel span of a tracer taken before
    configure(); and an umbrella under an OTel root span.
    """
    spans = {name: found[0] for name, found in as_global["by_name"].items()}
    outer, middle = spans["interop.outer"], spans["otel.middle"]
    inner, early = spans["interop.inner"], spans["otel.early"]
    assert outer["parent_id"] is None
    assert middle["parent_id"] == outer["span_id"]
    assert middle["span_id"] == as_global["ids"]["middle"]
    assert inner["parent_id"] == middle["span_id"]
    assert early["parent_id"] == inner["span_id"]
    assert {outer["trace_id"], middle["trace_id"], inner["trace_id"], early["trace_id"]} == {
        outer["trace_id"]
    }
    assert middle["scope"] == "interop.plain"
    assert early["scope"] == "interop.early"
    assert early["attributes"] == {"early.value": 7}
    assert inner["scope"] == outer["scope"] == "asynctrace"
    assert inner["attributes"]["rl.bucket"] == "productive"
    root, under = spans["otel.root"], spans["interop.under_otel"]
    assert root["parent_id"] is None
    assert under["parent_id"] == root["span_id"]
    assert under["trace_id"] == root["trace_id"]


# ---------------------------------------------------------------------------
# The OpenTelemetry context API and the W3C propagator on asynctrace's spans.


def test_use_span_makes_an_asynctrace_span_current(telemetry: Telemetry) -> None:
    """trace.use_span(span) on a span from asynctrace.start_span: current, parent, ended."""
    span = asynctrace.start_span("step", "manual")
    assert span.is_recording()
    with trace.use_span(span, end_on_exit=True) as used:
        assert used is span
        assert trace.get_current_span() is span
        with asynctrace.managed_span("reward", "under_manual"):
            pass
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert not span.is_recording()
    spans = finished(telemetry)
    assert parent_id(spans["under_manual"]) == span.get_span_context().span_id
    assert spans["under_manual"].context.trace_id == span.get_span_context().trace_id
    assert parent_id(spans["manual"]) is None


def test_use_span_records_the_exception(telemetry: Telemetry) -> None:
    """use_span's record_exception and set_status_on_exception work on asynctrace spans."""
    span = asynctrace.start_span("step", "failing")
    with pytest.raises(ValueError), trace.use_span(span, end_on_exit=True):
        raise ValueError("boom")
    failing = finished(telemetry)["failing"]
    assert failing.status.status_code is trace.StatusCode.ERROR
    assert [event.name for event in failing.events] == ["exception"]
    assert failing.events[0].attributes["exception.message"] == "boom"


def test_set_span_in_context_attach_detach(telemetry: Telemetry) -> None:
    """set_span_in_context + context.attach re-parents; detach restores the previous span."""
    with asynctrace.umbrella_span("step", "enclosing") as enclosing:
        detached = asynctrace.start_span("step", "handed")
        token = otel_context.attach(trace.set_span_in_context(detached))
        try:
            assert trace.get_current_span() is detached
            with asynctrace.managed_span("reward", "under_handed"):
                pass
            tracer = telemetry.provider.get_tracer("interop.ctx")  # type: ignore[union-attr]
            tracer.start_span("otel_under_handed").end()
        finally:
            otel_context.detach(token)
        assert trace.get_current_span() is enclosing
        explicit = trace.set_span_in_context(detached)
        asynctrace.start_span("reward", "explicit_context", context=explicit).end()
        detached.end()
    spans = finished(telemetry)
    handed_id = detached.get_span_context().span_id
    assert parent_id(spans["handed"]) == enclosing.get_span_context().span_id
    assert parent_id(spans["under_handed"]) == handed_id
    assert parent_id(spans["otel_under_handed"]) == handed_id
    assert spans["otel_under_handed"].instrumentation_scope.name == "interop.ctx"  # type: ignore[union-attr]
    assert parent_id(spans["explicit_context"]) == handed_id
    assert len({span.context.trace_id for span in spans.values()}) == 1


def test_w3c_inject_names_the_current_asynctrace_span(telemetry: Telemetry) -> None:
    """propagate.inject and TraceContextTextMapPropagator give the span's traceparent."""
    with asynctrace.umbrella_span("step", "outer") as outer:
        with asynctrace.managed_span("generation", "call") as call:
            via_global: dict[str, str] = {}
            propagate.inject(via_global)
            via_w3c: dict[str, str] = {}
            W3C.inject(via_w3c)
            explicit: dict[str, str] = {}
            W3C.inject(explicit, context=trace.set_span_in_context(outer))
            ours = asynctrace.current_trace_carrier()
    expected = header_of(call)
    assert via_global["traceparent"] == expected
    assert via_w3c == {"traceparent": expected}
    # Level 1: asynctrace sends the sampled flag only (OpenTelemetry passes on all eight).
    assert ours == {"traceparent": expected[:-2] + f"{int(expected[-2:], 16) & 1:02x}"}
    assert explicit == {"traceparent": header_of(outer)}
    spans = finished(telemetry)
    _, trace_id, span_id, flags = expected.split("-")
    assert int(trace_id, 16) == spans["call"].context.trace_id
    assert int(span_id, 16) == spans["call"].context.span_id
    assert int(flags, 16) & 0x01


@pytest.mark.parametrize("how", ["managed_span", "otel_tracer"])
def test_w3c_extract_gives_a_child_of_the_remote_parent(telemetry: Telemetry, how: str) -> None:
    """extract(carrier) + a span under it: a child of the remote parent (is_remote), in its
    trace, keeping its tracestate; inject inside it names the child."""
    carrier = {"traceparent": traceparent(REMOTE_TRACE, REMOTE_SPAN, 1), "tracestate": "vendor=v1"}
    extracted = propagate.extract(carrier)
    remote = trace.get_current_span(extracted).get_span_context()
    assert remote == trace.get_current_span(W3C.extract(carrier)).get_span_context()
    assert (remote.trace_id, remote.span_id, remote.is_remote) == (REMOTE_TRACE, REMOTE_SPAN, True)
    token = otel_context.attach(extracted)
    try:
        assert trace.get_current_span().get_span_context().is_remote
        if how == "managed_span":
            cm: Any = asynctrace.managed_span("reward", "server")
        else:
            tracer = telemetry.provider.get_tracer("interop.server")  # type: ignore[union-attr]
            cm = tracer.start_as_current_span("server", kind=SpanKind.SERVER)
        with cm as server:
            onward: dict[str, str] = {}
            propagate.inject(onward)
    finally:
        otel_context.detach(token)
    span = finished(telemetry)["server"]
    assert span.context.trace_id == REMOTE_TRACE
    assert span.parent is not None
    assert span.parent.span_id == REMOTE_SPAN
    assert span.parent.is_remote is True
    assert span.parent.trace_id == REMOTE_TRACE
    assert span.context.trace_state.to_header() == "vendor=v1"
    assert onward == {"traceparent": header_of(server), "tracestate": "vendor=v1"}
    assert server.get_span_context().span_id != REMOTE_SPAN


def test_w3c_extract_under_an_unsampled_parent(telemetry: Telemetry) -> None:
    """An unsampled remote parent: nothing recorded, the trace id still travels on, unsampled."""
    carrier = {"traceparent": traceparent(REMOTE_TRACE, REMOTE_SPAN, 0)}
    token = otel_context.attach(propagate.extract(carrier))
    try:
        with asynctrace.managed_span("reward", "unsampled") as span:
            assert not span.is_recording()
            onward: dict[str, str] = {}
            propagate.inject(onward)
    finally:
        otel_context.detach(token)
    assert finished(telemetry) == {}
    _, trace_id, _, flags = onward["traceparent"].split("-")
    assert int(trace_id, 16) == REMOTE_TRACE
    assert int(flags, 16) & 0x01 == 0


def test_asynctrace_carriers_round_trip(telemetry: Telemetry) -> None:
    """current_trace_carrier() → remote_trace_context(carrier) re-parents, also in a task."""
    with asynctrace.umbrella_span("step", "sender") as sender:
        carrier = asynctrace.current_trace_carrier()
    sent = header_of(sender)
    assert carrier == {"traceparent": sent[:-2] + f"{int(sent[-2:], 16) & 1:02x}"}
    with asynctrace.remote_trace_context(carrier) as remote:
        assert remote.valid
        assert asynctrace.current_trace_carrier() == carrier
        with asynctrace.managed_span("reward", "receiver"):
            pass

    async def in_task() -> None:
        async with asynctrace.remote_trace_context(carrier):
            async with asynctrace.managed_span("reward", "async_receiver"):
                await asyncio.sleep(0)

    asyncio.run(in_task())
    assert asynctrace.current_trace_carrier() == {}
    spans = finished(telemetry)
    sender_ctx = sender.get_span_context()
    for name in ("receiver", "async_receiver"):
        span = spans[name]
        assert span.context.trace_id == sender_ctx.trace_id
        assert span.parent is not None
        assert span.parent.span_id == sender_ctx.span_id
        assert span.parent.is_remote is True


# ---------------------------------------------------------------------------
# SDK processors and exporters of the user's.


class RecordingProcessor(SpanProcessor):
    """An SDK span processor that keeps what it was given (from any thread).

    ``on_start`` resolves the parent as a processor does: the span of
    *parent_context*, or of the current context when it is ``None`` (what the
    SDK passes when the span was started without an explicit context).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[tuple[Any, trace.SpanContext]] = []
        self.ended: list[ReadableSpan] = []
        self.shut_down = False

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        """Keep the span and the span context of its parent."""
        parent = trace.get_current_span(parent_context).get_span_context()
        with self.lock:
            self.started.append((span, parent))

    def on_end(self, span: ReadableSpan) -> None:
        """Keep the ended span."""
        with self.lock:
            self.ended.append(span)

    def shutdown(self) -> None:
        """Remember the shutdown."""
        self.shut_down = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered."""
        return True


class RecordingExporter(SpanExporter):
    """An SDK span exporter that keeps every batch."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[ReadableSpan] = []
        self.shut_down = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Keep the batch."""
        with self.lock:
            self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Remember the shutdown."""
        self.shut_down = True


def _emit_three(telemetry: Telemetry) -> None:
    """An umbrella, a leaf with attributes under it, and a third-party span under the leaf."""
    tracer = telemetry.provider.get_tracer("interop.lib")  # type: ignore[union-attr]
    with asynctrace.umbrella_span("step", "p.step", attributes={"rl.epoch": 1}):
        with asynctrace.managed_span("generation", "p.leaf", attributes={"n": 3}) as leaf:
            leaf.set_attribute("late", "yes")
            with tracer.start_as_current_span("p.lib", attributes={"lib": True}):
                pass


def test_user_span_processor_gets_every_span(telemetry: Telemetry, provider: str) -> None:
    """add_span_processor(proc) on telemetry.provider: on_start/on_end of every span by flush()."""
    processor = RecordingProcessor()
    telemetry.provider.add_span_processor(processor)  # type: ignore[union-attr]
    _emit_three(telemetry)
    assert telemetry.flush(5.0)
    with processor.lock:
        ended = {span.name: span for span in processor.ended}
        started = {span.name: (span, parent) for span, parent in processor.started}
    assert sorted(ended) == ["p.leaf", "p.lib", "p.step"]
    assert sorted(started) == ["p.leaf", "p.lib", "p.step"]
    step, leaf, lib = ended["p.step"], ended["p.leaf"], ended["p.lib"]
    for span in (step, leaf, lib):
        assert isinstance(span, ReadableSpan)
        assert span.end_time is not None
        assert span.start_time is not None
        assert span.end_time >= span.start_time
    assert parent_id(step) is None
    assert parent_id(leaf) == step.context.span_id
    assert parent_id(lib) == leaf.context.span_id
    assert dict(step.attributes or {}) == {"asynctrace.group": "step", "rl.epoch": 1}
    assert dict(leaf.attributes or {}) == {"rl.bucket": "productive", "n": 3, "late": "yes"}
    assert dict(lib.attributes or {}) == {"lib": True}
    assert lib.instrumentation_scope.name == "interop.lib"  # type: ignore[union-attr]
    assert leaf.instrumentation_scope.name == "asynctrace"  # type: ignore[union-attr]
    for name, (span, parent) in started.items():
        assert isinstance(span, ReadableSpan)
        assert span.context.span_id == ended[name].context.span_id
        assert (parent.span_id if parent.is_valid else None) == parent_id(ended[name])
    telemetry.shutdown()
    assert processor.shut_down


def test_user_batch_processor_is_flushed(telemetry: Telemetry) -> None:
    """The documented BatchSpanProcessor(my_exporter) on telemetry.provider: flush() reaches it."""
    exporter = RecordingExporter()
    telemetry.provider.add_span_processor(BatchSpanProcessor(exporter))  # type: ignore[union-attr]
    _emit_three(telemetry)
    assert telemetry.flush(5.0)
    with exporter.lock:
        names = sorted(span.name for span in exporter.spans)
    assert names == ["p.leaf", "p.lib", "p.step"], "telemetry.flush() left the user's processor"
    telemetry.shutdown()
    assert exporter.shut_down


def test_user_exporter_object_gets_readable_spans(provider: str) -> None:
    """exporters=[MyExporter()]: ReadableSpans with service.name and the asynctrace scope."""
    exporter = RecordingExporter()
    running = asynctrace.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "provider": provider,
            "service_name": "interop-svc",
            "exporters": [exporter],
        }
    )
    try:
        _emit_three(running)
        assert running.flush(5.0)
        with exporter.lock:
            spans = {span.name: span for span in exporter.spans}
        assert sorted(spans) == ["p.leaf", "p.lib", "p.step"]
        for span in spans.values():
            assert isinstance(span, ReadableSpan)
            assert span.resource.attributes["service.name"] == "interop-svc"
        assert spans["p.step"].instrumentation_scope.name == "asynctrace"  # type: ignore[union-attr]
        assert spans["p.leaf"].instrumentation_scope.name == "asynctrace"  # type: ignore[union-attr]
        assert spans["p.lib"].instrumentation_scope.name == "interop.lib"  # type: ignore[union-attr]
        assert parent_id(spans["p.leaf"]) == spans["p.step"].context.span_id
        assert dict(spans["p.leaf"].attributes or {})["late"] == "yes"
    finally:
        running.shutdown(timeout_s=5.0)
    assert exporter.shut_down


# ---------------------------------------------------------------------------
# A user's own SDK TracerProvider.


@pytest.fixture
def user_provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """An SDK provider the user built, with its own in-memory exporter."""
    exporter = InMemorySpanExporter()
    user = TracerProvider(shutdown_on_exit=False)
    user.add_span_processor(SimpleSpanProcessor(exporter))
    yield user, exporter
    user.shutdown()


def test_user_provider_records_asynctrace_spans(
    user_provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """provider=<user's TracerProvider>: the user's exporter sees asynctrace's spans."""
    user, exporter = user_provider
    running = asynctrace.configure(memory_config(provider=user))
    try:
        assert running.provider is user
        with asynctrace.umbrella_span("step", "u.step") as step:
            with asynctrace.managed_span("reward", "u.leaf"):
                pass
        names = [span.name for span in exporter.get_finished_spans()]
        assert names == ["u.leaf", "u.step"]
        assert [span.name for span in running.memory_exporter.get_finished_spans()] == names  # type: ignore[union-attr]
        leaf = exporter.get_finished_spans()[0]
        assert parent_id(leaf) == step.get_span_context().span_id
        assert leaf.instrumentation_scope.name == "asynctrace"  # type: ignore[union-attr]
    finally:
        assert running.shutdown(timeout_s=5.0)


def test_shutdown_leaves_the_user_provider_running(
    user_provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """telemetry.shutdown() does not shut the user's provider down: it still records."""
    user, exporter = user_provider
    running = asynctrace.configure(memory_config(provider=user))
    with asynctrace.managed_span("reward", "before"):
        pass
    assert running.shutdown(timeout_s=5.0)
    exporter.clear()
    with asynctrace.managed_span("reward", "asynctrace_after"):  # telemetry off: not recorded
        pass
    app = user.get_tracer("app")
    with app.start_as_current_span("user_after") as span:
        assert span.is_recording()
    assert [s.name for s in exporter.get_finished_spans()] == ["user_after"]


def test_shutdown_leaves_the_user_spans_alone(
    user_provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A span the user opened on their own provider survives telemetry.shutdown() untouched.

    asynctrace does not own this provider: its shutdown (also the implicit one
    of a second configure()) must not end the application's in-flight spans.
    """
    user, exporter = user_provider
    running = asynctrace.configure(memory_config(provider=user))
    app = user.get_tracer("app")
    span = app.start_span("user_long")
    assert running.shutdown(timeout_s=5.0)
    assert span.is_recording(), "asynctrace's shutdown ended the user's own span"
    span.end()
    (ended,) = exporter.get_finished_spans()
    assert ended.name == "user_long"
    assert "asynctrace.truncated" not in (ended.attributes or {})
