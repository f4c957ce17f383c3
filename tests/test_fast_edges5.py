"""Fast provider edges: values OTLP cannot carry, drop counts under threads and past the limit.

Every export here goes through ``asynctrace.configure`` with the OTLP exporter
to a real receiver on 127.0.0.1 (``tests/_otlp_receiver.py``), which parses
each request with opentelemetry-proto's protobuf runtime; the drop counts are
read from the requests as they arrived.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext

import asynctrace as at
from asynctrace._fast import FastTracerProvider, SpanLimits

sys.path.insert(0, str(Path(__file__).parent))
from _otlp_receiver import OtlpReceiver, ReceivedSpan


class _Receiver(OtlpReceiver):
    """Keeps each span's drop counts and its events' and links' attributes too."""

    def __init__(self) -> None:
        super().__init__("http/protobuf")
        self.details: dict[str, dict[str, Any]] = {}

    def _accept(
        self, request: ExportTraceServiceRequest, headers: dict[str, str], **kw: Any
    ) -> list[ReceivedSpan]:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.details[span.name] = {
                        "attributes": [kv.key for kv in span.attributes],
                        "dropped": span.dropped_attributes_count,
                        "dropped_events": span.dropped_events_count,
                        "dropped_links": span.dropped_links_count,
                        "events": [
                            ([kv.key for kv in e.attributes], e.dropped_attributes_count)
                            for e in span.events
                        ],
                        "links": [
                            ([kv.key for kv in li.attributes], li.dropped_attributes_count)
                            for li in span.links
                        ],
                    }
        return super()._accept(request, headers, **kw)


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Receiver]:
    running = _Receiver()
    with running:
        for key, value in running.env(timeout_s=5.0).items():
            monkeypatch.setenv(key, value)
        yield running
    at.shutdown(timeout_s=2.0)


def _configure(**extra: Any) -> at.Telemetry:
    return at.configure(
        {"enabled": True, "provider": "fast", "exporters": ["otlp"], "span_groups": "all", **extra}
    )


def _exported(receiver: _Receiver, telemetry: at.Telemetry, count: int) -> None:
    assert telemetry.shutdown(timeout_s=10.0)
    assert receiver.wait_for(count, timeout_s=10.0), receiver.details.keys()
    stats = telemetry.stats()["otlp"]
    assert (stats.exported, stats.failed) == (count, 0)


# -- values nested deeper than protobuf parsers read ---------------------------------------


def _nested(kind: str, levels: int, leaf: Any) -> Any:
    """*levels* lists or dicts, one inside the other, the innermost holding *leaf*."""
    value = leaf
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    return value


def _fill(value: AnyValue, kind: str, levels: int) -> None:
    """The same value built as opentelemetry-proto messages, in place (no copies)."""
    for _ in range(levels):
        if kind == "list":
            value = value.array_value.values.add()
        else:
            pair = value.kvlist_value.values.add()
            pair.key = "k"
            value = pair.value
    value.int_value = 1


def _parses(place: str, kind: str, levels: int) -> bool:
    """Whether a request holding the value at *place* is one protobuf's parser reads."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    if place == "span":
        pair = span.attributes.add()
    elif place == "event":
        pair = span.events.add().attributes.add()
    else:
        pair = span.links.add().attributes.add()
    pair.key = "v"
    _fill(pair.value, kind, levels)
    try:
        ExportTraceServiceRequest.FromString(request.SerializeToString())
    except Exception:
        return False
    return True


PLACES = ["span", "event", "link"]
KINDS = ["list", "dict"]


def test_a_value_nested_too_deeply_is_left_out_at_protobufs_exact_limit(
    receiver: _Receiver,
) -> None:
    """Around the limit, a value is kept exactly when a request holding it parses; a
    deeper one is left out and counted as dropped, and no span of its batch is lost."""
    telemetry = _configure()
    tracer = trace.get_tracer("edges5")
    expected: dict[str, bool] = {}
    for place in PLACES:
        for kind in KINDS:
            around = range(26, 36) if kind == "dict" else range(42, 52)
            for levels in around:
                name = f"{place}-{kind}-{levels}"
                expected[name] = _parses(place, kind, levels)
                value = {"v": _nested(kind, levels, 1), "ok": 1}
                span = tracer.start_span(name)
                if place == "span":
                    span.set_attributes(value)
                elif place == "event":
                    span.add_event("e", value)
                else:
                    span.add_link(SpanContext(1, 2, False), value)
                span.end()
    assert set(expected.values()) == {True, False}  # the range holds the limit
    _exported(receiver, telemetry, len(expected))
    for name, parses in expected.items():
        got = receiver.details[name]
        keys, dropped = {
            "span": (got["attributes"], got["dropped"]),
            "event": got["events"][0] if got["events"] else ([], -1),
            "link": got["links"][0] if got["links"] else ([], -1),
        }[name.split("-")[0]]
        assert (keys, dropped) == ((["v", "ok"], 0) if parses else (["ok"], 1)), name


def test_a_self_referential_value_or_a_str_that_raises_fails_only_itself(
    receiver: _Receiver,
) -> None:
    class BadStr:
        def __str__(self) -> str:
            raise ValueError("no text")

    looped: list[Any] = []
    looped.append(looped)
    mapping: dict[str, Any] = {}
    mapping["me"] = mapping
    telemetry = _configure()
    tracer = trace.get_tracer("edges5")
    values: dict[str, Any] = {"looped-list": looped, "looped-dict": mapping, "bad-str": BadStr()}
    for name, value in values.items():
        span = tracer.start_span(name)
        span.set_attribute("ok", 1)
        span.set_attribute("v", value)
        span.add_event("e", {"v": value, "ok": 2})
        span.add_link(SpanContext(1, 2, False), {"v": value, "ok": 3})
        span.end()
    with at.managed_span("generation", "good"):
        pass
    _exported(receiver, telemetry, len(values) + 1)
    for name in values:
        got = receiver.details[name]
        assert (got["attributes"], got["dropped"]) == (["ok"], 1), name
        assert got["events"] == [(["ok"], 1)], name
        assert got["links"] == [(["ok"], 1)], name


# -- drop counts ---------------------------------------------------------------------------


def test_drop_counts_are_exact_when_threads_share_a_span(receiver: _Receiver) -> None:
    """Kept plus dropped is what was recorded, for attributes (set_attribute and
    set_attributes past the limit), events and links, from several threads at once."""
    limit, per_thread, threads = 16, 3000, 3
    telemetry = _configure(
        span_limits={"max_attributes": limit, "max_events": limit, "max_links": limit}
    )
    span = trace.get_tracer("edges5").start_span("shared")
    start = threading.Barrier(threads)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def work(tag: int) -> None:
        start.wait()
        for i in range(per_thread):
            span.set_attribute(f"{tag}.{i}", i)
            if i % 10 == 0:  # past the limit: replaces the span's attributes
                span.set_attributes({f"{tag}.{i}.{j}": j for j in range(limit + 2)})
            span.add_event("e")
            span.add_link(SpanContext(1, i + 1, False))

    try:
        workers = [threading.Thread(target=work, args=(tag,)) for tag in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(old)
    span.end()
    _exported(receiver, telemetry, 1)
    got = receiver.details["shared"]
    written = threads * (per_thread + per_thread // 10 * (limit + 2))
    assert len(got["attributes"]) + got["dropped"] == written
    assert len(got["events"]) + got["dropped_events"] == threads * per_thread
    assert len(got["links"]) + got["dropped_links"] == threads * per_thread


def _sdk_counts(limit: int, calls: list[tuple[str, Any]]) -> tuple[list[str], int]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_attributes=limit).to_sdk())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("edges5").start_span("s")
    for method, argument in calls:
        getattr(span, method)(*argument)
    span.end()
    (done,) = exporter.get_finished_spans()
    return list(done.attributes or ()), done.dropped_attributes


CALLS: dict[str, tuple[int, list[tuple[str, Any]]]] = {
    "re-set-evicted-first": (
        1,
        [("set_attribute", ("a", 0)), ("set_attributes", ({"d": 1, "b": 2, "a": 3},))],
    ),
    "re-set-kept": (
        2,
        [
            ("set_attribute", ("a", 0)),
            ("set_attribute", ("x", 0)),
            ("set_attributes", ({"a": 1, "b": 2, "c": 3},)),
        ],
    ),
    "under-mapping-limit": (
        3,
        [("set_attributes", ({"a": 1, "b": 2, "c": 3},)), ("set_attributes", ({"d": 1, "a": 2},))],
    ),
    "many": (
        8,
        [
            ("set_attributes", ({f"m{i}": i for i in range(8)},)),
            (
                "set_attributes",
                ({**{f"m{i}": -i for i in range(6)}, **{f"n{i}": i for i in range(6)}},),
            ),
        ],
    ),
}


@pytest.mark.parametrize("case", list(CALLS))
def test_set_attributes_past_the_limit_counts_as_the_sdk_does(
    case: str, receiver: _Receiver
) -> None:
    """As if set one by one: a key set again, evicted before its turn, is dropped twice."""
    limit, calls = CALLS[case]
    telemetry = _configure(span_limits={"max_attributes": limit})
    span = trace.get_tracer("edges5").start_span(case)
    for method, argument in calls:
        getattr(span, method)(*argument)
    span.end()
    _exported(receiver, telemetry, 1)
    got = receiver.details[case]
    assert (got["attributes"], got["dropped"]) == _sdk_counts(limit, calls)


def test_the_provider_alone_counts_as_set_one_by_one() -> None:
    """The span's own count (what every exporter starts from), against set_attribute."""
    for limit, calls in CALLS.values():
        limits = SpanLimits(max_attributes=limit)
        results = []
        for one_by_one in (False, True):
            span: Any = FastTracerProvider(limits=limits).get_tracer("x").start_span("s")
            for method, argument in calls:
                if method == "set_attributes" and one_by_one:
                    for key, value in argument[0].items():
                        span.set_attribute(key, value)
                else:
                    getattr(span, method)(*argument)
            results.append((list(span._attributes.items()), span._dropped))
        assert results[0] == results[1], calls
