"""The OTLP encoder of fast-provider spans: the same request OpenTelemetry's encoder makes.

Every request is decoded with opentelemetry-proto's ``ExportTraceServiceRequest``
and compared, field by field, with ``encode_spans`` of the same spans converted
to the SDK's ``ReadableSpan`` (what asynctrace sent before, and still sends for
exporters that take SDK spans).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.common")
import _fuzz
from _budget import examples
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceState
from opentelemetry.trace.status import Status, StatusCode

from asynctrace._fast import FastSpan, FastTracerProvider, SpanLimits
from asynctrace.export._convert import Converter
from asynctrace.export._otlp_wire import WireEncoder, request_bytes
from asynctrace.export._retry import RetryingSpanProcessor


class _Keep:
    """An export queue that keeps the provider's ended spans."""

    def __init__(self) -> None:
        self.spans: list[FastSpan] = []
        self.put = self.spans.append

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


RESOURCE = Resource.create({"service.name": "trainer", "asynctrace.rank": 3, "team": "rl"})


def _provider(limits: SpanLimits | None = None) -> tuple[FastTracerProvider, _Keep]:
    provider = FastTracerProvider(RESOURCE, limits=limits)
    kept = _Keep()
    provider.add_queue(kept)
    return provider, kept


def _both(spans: list[FastSpan], limits: SpanLimits) -> tuple[bytes, bytes, WireEncoder]:
    """(our bytes, OpenTelemetry's bytes, our encoder) for *spans*."""
    encoder = WireEncoder(RESOURCE, limits)
    ours = request_bytes([encoder.encode(span) for span in spans])
    converter = Converter(RESOURCE, limits)
    theirs = encode_spans([converter.readable(span) for span in spans]).SerializeToString()
    return ours, theirs, encoder


def _decoded(data: bytes) -> dict[str, Any]:
    return MessageToDict(ExportTraceServiceRequest.FromString(data))


@pytest.fixture
def quiet_otel_logs() -> Iterator[None]:
    """OpenTelemetry logs each value it drops or cannot encode; these tests make many.

    A new encoder per example logs its first unencodable value again, and a
    status description on an OK status is warned about each time: pytest keeps
    every record a test logs, 3 GB over 100,000 examples (``nox -s fuzz -- 100000``).
    """
    names = [
        "opentelemetry.attributes",
        "opentelemetry.exporter.otlp.proto.common._internal",
        "opentelemetry.trace.status",
        "asynctrace",
    ]
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def _rich_spans() -> tuple[list[FastSpan], SpanLimits]:
    limits = SpanLimits(max_attributes=6, max_events=2, max_links=1, max_event_attributes=2)
    provider, kept = _provider(limits)
    tracer = provider.get_tracer("asynctrace", "0.1.0", "https://opentelemetry.io/schemas/1.21")
    other = provider.get_tracer("other.lib", attributes={"lib.tags": ["a", "b"], "lib.n": 2})
    again = provider.get_tracer("other.lib", attributes={"lib.tags": ["a", "b"], "lib.n": 2})
    remote = SpanContext(
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=trace.TraceFlags(1),
        trace_state=TraceState([("vendor", "v1"), ("rank", "3")]),
    )
    parent = trace.set_span_in_context(NonRecordingSpan(remote))
    attributes = {
        "text": "productive",
        "flag": False,
        "count": -7,
        "int64.max": 2**63 - 1,
        "ratio": 0.25,
        "list": [1, 2, 3],
    }
    root = tracer.start_span("rl.step", parent, SpanKind.SERVER, attributes, start_time=1_000)
    root.set_attribute("strings", ("a", "bb"))  # one over the limit: the oldest goes
    root.add_event("first", {"a": 1}, timestamp=1_100)
    root.add_event("second", {"a": 1, "b": "x", "c": 2.5}, timestamp=1_200)  # c: over 2
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        root.record_exception(exc, timestamp=1_300)  # the third event: the first goes
    root.set_status(Status(StatusCode.ERROR, "boom"))
    with trace.use_span(root):
        child = other.start_span(
            "rl.generate",
            kind=SpanKind.CLIENT,
            links=[Link(remote, {"link.kind": "follows"}), Link(root.get_span_context())],
            start_time=2_000,
        )
        child.set_status(StatusCode.OK)
        child.end(3_000)
        grandchild = again.start_span("rl.score", kind=SpanKind.CONSUMER, start_time=2_500)
        grandchild.end(2_600)
        producer = tracer.start_span("", kind=SpanKind.PRODUCER, start_time=2_700)
        producer.end(2_800)
    root.end(9_000)
    return kept.spans, limits


@pytest.mark.usefixtures("quiet_otel_logs")
def test_the_request_is_the_one_opentelemetry_encodes() -> None:
    """Ids, parents, kinds, times, status, attributes, events, links, resource, scopes and
    dropped counts: decoded, every field equals OpenTelemetry's, and so do the bytes."""
    spans, limits = _rich_spans()
    ours, theirs, _ = _both(spans, limits)
    assert _decoded(ours) == _decoded(theirs)
    assert ours == theirs
    request = ExportTraceServiceRequest.FromString(ours)
    (resource_spans,) = request.resource_spans
    resource = {kv.key: kv.value for kv in resource_spans.resource.attributes}
    assert resource["service.name"].string_value == "trainer"
    assert resource["asynctrace.rank"].int_value == 3
    scopes = resource_spans.scope_spans
    assert [s.scope.name for s in scopes] == ["other.lib", "asynctrace"]  # equal scopes merged
    assert scopes[1].schema_url == "https://opentelemetry.io/schemas/1.21"
    assert scopes[1].scope.version == "0.1.0"
    generate, score = scopes[0].spans
    producer, root = scopes[1].spans
    assert root.parent_span_id == (0x00F067AA0BA902B7).to_bytes(8, "big")
    assert root.trace_state == "vendor=v1,rank=3"
    assert root.flags == 0x300  # the parent is remote
    assert (root.kind, root.start_time_unix_nano, root.end_time_unix_nano) == (2, 1_000, 9_000)
    assert (root.status.code, root.status.message) == (2, "boom")
    assert root.dropped_attributes_count == 1
    assert [e.name for e in root.events] == ["second", "exception"]
    assert root.dropped_events_count == 1
    assert root.events[0].dropped_attributes_count == 1
    exception = {kv.key: kv.value.string_value for kv in root.events[1].attributes}
    assert "RuntimeError: boom" in exception["exception.stacktrace"]  # two kept of four
    assert root.events[1].dropped_attributes_count == 2
    assert generate.parent_span_id == root.span_id
    assert generate.flags == 0x100
    assert generate.status.code == 1
    assert len(generate.links) == 1
    assert generate.dropped_links_count == 1
    assert generate.links[0].span_id == root.span_id  # the newest kept
    assert generate.links[0].flags == 0x100
    assert score.kind == 5
    assert producer.kind == 4
    assert producer.name == ""


def _odd_span(attributes: dict[Any, Any]) -> FastSpan:
    provider, kept = _provider()
    span = provider.get_tracer("odd").start_span("odd", start_time=5)
    span._attributes = dict(attributes)  # as recorded: the hot path checks nothing
    span.add_event("event", dict(attributes), timestamp=6)
    span.add_link(SpanContext(1, 2, False), dict(attributes))
    span.end(7)
    return kept.spans[0]


class _Opaque:
    """A value with neither ``__str__`` nor ``__repr__`` of its own."""


class _Named:
    def __str__(self) -> str:
        return "named"


ODD_VALUES: dict[str, tuple[Any, int]] = {  # value, how many of its attributes are left out
    "lone surrogate": ("a\ud800b", 1),
    "surrogate in a list": (["ok", "\udfff"], 1),
    "int above int64": (2**63, 1),
    "int below int64": (-(2**63) - 1, 1),
    "huge int in a list": ([1, 2**70], 1),
    "nested lists": ([[1, 2], [3]], 0),
    "None in a list": ([1, None, 3], 0),
    "None": (None, 0),
    "mixed list": ([1, "a", 2.5, True], 0),
    "empty list": ([], 0),
    "bytes": (b"\x00\xff", 0),
    "mapping": ({"k": 1, 2: "two"}, 0),
    "object with a str": (_Named(), 0),
    "object without one": (_Opaque(), 0),
    "int subclass": (StatusCode.ERROR, 0),
    "nan": (math.nan, 0),
    "set": ({1}, 0),
}


@pytest.mark.usefixtures("quiet_otel_logs")
@pytest.mark.parametrize("case", list(ODD_VALUES))
def test_odd_values_are_encoded_as_opentelemetry_encodes_them(case: str) -> None:
    """Surrogates, ints beyond int64, nested sequences, None, bytes, mappings, objects:
    encoded as OpenTelemetry's encoder does, or left out and counted, never raising."""
    value, left_out = ODD_VALUES[case]
    span = _odd_span({"plain": "kept", "odd": value, "after": 1})
    ours, theirs, encoder = _both([span], SpanLimits())
    assert ours == theirs
    assert encoder.skipped == 3 * left_out  # the span's, the event's and the link's
    decoded = ExportTraceServiceRequest.FromString(ours).resource_spans[0].scope_spans[0]
    keys = [kv.key for kv in decoded.spans[0].attributes]
    assert keys[0] == "plain"
    assert keys[-1] == "after"


@pytest.mark.usefixtures("quiet_otel_logs")
def test_bad_keys_are_cleaned_as_the_sdk_cleans_them() -> None:
    """An empty key is dropped and counted, a non-string key becomes its str, as in the SDK."""
    span = _odd_span({"": 1, 7: "seven", "ok": True, _Opaque(): 2})
    ours, theirs, _ = _both([span], SpanLimits())
    assert ours == theirs
    decoded = ExportTraceServiceRequest.FromString(ours).resource_spans[0].scope_spans[0]
    assert [kv.key for kv in decoded.spans[0].attributes] == ["7", "ok"]
    assert decoded.spans[0].dropped_attributes_count == 2


@pytest.mark.usefixtures("quiet_otel_logs")
@pytest.mark.parametrize("max_attributes", [None, 5])
def test_bad_keys_set_below_the_limit_are_counted_as_the_sdk_counts_them(
    max_attributes: int | None,
) -> None:
    """set_attribute with an empty or a None key, on a span below its limit (or without
    one): dropped_attributes_count is what the SDK's provider sends for the same calls."""
    from opentelemetry.sdk.trace import SpanLimits as SdkLimits
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    def calls(span: Any) -> None:
        span.set_attribute("", 1)
        span.set_attribute(None, 2)
        span.set_attribute("ok", 3)
        span.end(2)

    limits = SpanLimits(max_attributes=max_attributes)
    provider, kept = _provider(limits)
    calls(provider.get_tracer("keys").start_span("s", start_time=1))
    ours, theirs, _ = _both(kept.spans, limits)
    assert ours == theirs
    sdk = TracerProvider(
        resource=RESOURCE, span_limits=SdkLimits(max_span_attributes=max_attributes)
    )
    memory = InMemorySpanExporter()
    sdk.add_span_processor(SimpleSpanProcessor(memory))
    calls(sdk.get_tracer("keys").start_span("s", start_time=1))
    sdk_request = encode_spans(memory.get_finished_spans())
    (expected,) = sdk_request.resource_spans[0].scope_spans[0].spans
    (span,) = ExportTraceServiceRequest.FromString(ours).resource_spans[0].scope_spans[0].spans
    assert [kv.key for kv in span.attributes] == [kv.key for kv in expected.attributes] == ["ok"]
    assert span.dropped_attributes_count == expected.dropped_attributes_count == 2


def test_string_limits_cut_values_and_the_cache_keeps_them_cut() -> None:
    """max_attribute_length cuts strings (in lists too), the same on every span."""
    limits = SpanLimits(max_attribute_length=3)
    provider, kept = _provider(limits)
    tracer = provider.get_tracer("limits")
    for _ in range(3):
        tracer.start_span("s", attributes={"k": "abcdef", "l": ["abcdef", "x"]}).end()
    ours, theirs, _ = _both(kept.spans, limits)
    assert ours == theirs
    spans = ExportTraceServiceRequest.FromString(ours).resource_spans[0].scope_spans[0].spans
    assert {span.attributes[0].value.string_value for span in spans} == {"abc"}


def test_a_span_that_cannot_be_encoded_fails_alone() -> None:
    """A span name with a lone surrogate fails that span (counted), not its batch."""
    provider, kept = _provider()
    tracer = provider.get_tracer("t")
    for name in ("good", "bad\ud800", "good too"):
        tracer.start_span(name).end()
    encoder = WireEncoder(RESOURCE, provider.limits)
    sent: list[bytes] = []

    class Exporter:
        def export(self, items: list[Any]) -> None:
            sent.append(request_bytes(items))

        def shutdown(self) -> None:
            pass

    processor = RetryingSpanProcessor(Exporter(), name="otlp", convert=encoder.encode)
    for span in kept.spans:
        processor.on_end(span)  # type: ignore[arg-type]
    assert not processor.force_flush(5_000)  # a span failed since the last flush
    assert processor.shutdown_within(5.0)
    stats = processor.stats()
    assert (stats.exported, stats.failed) == (2, 1)
    names = [
        span.name
        for data in sent
        for rs in ExportTraceServiceRequest.FromString(data).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    assert names == ["good", "good too"]


# -- property: any attributes, any limits -------------------------------------------------

_text = st.one_of(st.text(max_size=6), st.sampled_from(["\ud800", "x\udfffy", "é" * 4]))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**66), 2**66),
    st.floats(allow_nan=True, allow_infinity=True),
    _text,
    st.binary(max_size=4),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(_text, st.integers(0, 3)), inner, max_size=2),
    ),
    max_leaves=6,
)
_attributes = st.dictionaries(st.one_of(_text, st.integers(0, 3)), _values, max_size=5)
_limit = st.one_of(st.none(), st.integers(0, 4))
_limits = st.builds(
    SpanLimits,
    max_attributes=_limit,
    max_attribute_length=_limit,
    max_events=_limit,
    max_links=_limit,
    max_event_attributes=_limit,
    max_link_attributes=_limit,
)
_span = st.fixed_dictionaries(
    {
        "name": st.text(max_size=5),
        "kind": st.sampled_from(list(SpanKind)),
        "attributes": _attributes,
        "later": _attributes,
        "events": st.lists(st.tuples(st.text(max_size=3), _attributes), max_size=3),
        "links": st.lists(st.tuples(st.booleans(), _attributes), max_size=2),
        "status": st.sampled_from([None, StatusCode.OK, StatusCode.ERROR]),
        "child": st.booleans(),
    }
)


def _record(limits: SpanLimits, specs: list[dict[str, Any]]) -> list[FastSpan]:
    provider, kept = _provider(limits)
    tracers: list[Callable[[], Any]] = [
        lambda: provider.get_tracer("a"),
        lambda: provider.get_tracer("b", "1.0", "https://schema", {"s": [1, 2]}),
    ]
    previous: Any = None
    for number, spec in enumerate(specs):
        tracer = tracers[number % 2]()
        context = trace.set_span_in_context(previous) if spec["child"] and previous else None
        links = [
            Link(SpanContext(number + 1, number + 2, remote), attributes)
            for remote, attributes in spec["links"]
        ]
        span = tracer.start_span(
            spec["name"], context, spec["kind"], spec["attributes"], links, start_time=number + 1
        )
        span.set_attributes(spec["later"])
        for event_name, attributes in spec["events"]:
            span.add_event(event_name, attributes, timestamp=number + 2)
        if spec["status"] is not None:
            span.set_status(spec["status"], "why")
        span.end(number + 3)
        previous = span
    return kept.spans


@pytest.mark.fuzz
@pytest.mark.usefixtures("quiet_otel_logs")
@_fuzz.target
@settings(
    max_examples=examples(60, 1_000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(_limits, st.lists(_span, min_size=1, max_size=4))
def test_any_spans_under_any_limits_encode_as_opentelemetry_encodes_them(
    limits: SpanLimits, specs: list[dict[str, Any]]
) -> None:
    """Random attributes (every type, nested, odd), events, links, statuses and limits:
    the bytes equal OpenTelemetry's encoding of the same spans converted to the SDK's."""
    spans = _record(limits, specs)
    ours, theirs, _ = _both(spans, limits)
    assert ours == theirs
