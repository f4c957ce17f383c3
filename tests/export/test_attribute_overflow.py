"""Events and links given more attributes than the limits keep: what the SDK keeps, quietly.

OpenTelemetry's ``BoundedAttributes`` logs a warning for every key it evicts
past its limit. Handed an event's 10,000 attributes whole on the export
thread, it logged 9,872 lines per event (one per dropped key) to the program's
stderr. The export path now hands it the newest ones only, and keeps exactly
what the SDK keeps, with the same ``dropped`` count.
"""

from __future__ import annotations

import logging
from typing import Any

import _fuzz
import pytest
from _budget import examples
from _on_start import span_after_on_start
from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanContext

import asynctrace
from asynctrace._fast import FastSpan, FastTracerProvider, SpanLimits
from asynctrace.export._convert import bounded
from asynctrace.export._otlp_wire import WireEncoder, request_bytes

FULL = "Attributes dict is full"
MANY = {f"k{i}": f"v{i}" for i in range(10_000)}
NEWEST = {f"k{i}": f"v{i}" for i in range(10_000 - 128, 10_000)}


def _full_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if FULL in record.getMessage()]


def test_a_converted_event_and_link_keep_the_newest_without_a_warning_per_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """In-memory exporter on the fast provider (SDK spans, converted on the export thread):
    the newest 128 attributes of an event, a link and an exception event, 9,872 dropped, no
    log flood. (The SDK provider's own span logs one warning per dropped key: the SDK's.)"""
    caplog.set_level(logging.WARNING)
    running = asynctrace.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["memory"], "provider": "fast"}
    )
    try:
        span = asynctrace.get_tracer().start_span("many")
        span.add_event("sent", MANY)
        span.add_link(SpanContext(1, 2, False), MANY)
        span.record_exception(ValueError("no"), MANY)
        span.end()
        assert running.flush()
        memory = running.memory_exporter
        assert memory is not None
        (done,) = [s for s in memory.get_finished_spans() if s.name == "many"]
    finally:
        running.shutdown(timeout_s=5.0)
    sent, raised = done.events
    (link,) = done.links
    for attributes in (sent.attributes, link.attributes, raised.attributes):
        assert len(attributes) == 128
        assert attributes.dropped == 10_000 - 128 + (4 if attributes is raised.attributes else 0)
    assert dict(sent.attributes) == NEWEST
    assert dict(link.attributes) == NEWEST
    assert _full_warnings(caplog) == []


def test_the_otlp_encoder_sends_the_newest_and_the_dropped_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OTLP bytes: 128 attributes on the event and the link, dropped counts 9,872, no flood."""
    caplog.set_level(logging.WARNING)
    kept: list[FastSpan] = []

    class Keep:
        put = kept.append

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

        def shutdown(self) -> None:
            pass

    resource = Resource.create({"service.name": "t"})
    provider = FastTracerProvider(resource)
    provider.add_queue(Keep())
    span = provider.get_tracer("t").start_span("many")
    span.add_event("sent", MANY)
    span.add_link(SpanContext(1, 2, False), MANY)
    span.end()
    encoder = WireEncoder(resource, SpanLimits())
    data = request_bytes([encoder.encode(s) for s in kept])
    decoded: Any = MessageToDict(ExportTraceServiceRequest.FromString(data))
    (sent,) = decoded["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for part in (sent["events"][0], sent["links"][0]):
        assert len(part["attributes"]) == 128
        assert part["droppedAttributesCount"] == 10_000 - 128
        assert {a["key"] for a in part["attributes"]} == set(NEWEST)
    assert _full_warnings(caplog) == []


class _Unclean:
    """A value the SDK cannot clean (``str()`` raises)."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


values = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.lists(st.one_of(st.integers(), st.text(max_size=2)), max_size=3),  # mixed: dropped
    st.just(object()),
    st.none(),
)


# Keys as given to a span: mostly strings; an int that becomes a string the mapping holds
# already ("1" and 1), an empty key and None, which the SDK drops.
keys = st.one_of(
    st.sampled_from([f"k{i}" for i in range(30)] + ["1", "2"]),
    st.sampled_from([1, 2, 3, "", None]),
)


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(300, 20_000), deadline=None)
@given(
    items=st.lists(st.tuples(keys, values), max_size=40),
    maxlen=st.sampled_from([None, 0, 1, 3, 16]),
    length=st.sampled_from([None, 0, 2]),
)
def test_bounded_keeps_what_the_sdk_keeps(
    items: list[tuple[Any, Any]], maxlen: int | None, length: int | None
) -> None:
    """The same items, order and dropped count as ``BoundedAttributes`` of the whole mapping,
    with no "dict is full" warning when every key is a string."""
    attributes = dict(items)
    theirs = BoundedAttributes(maxlen, attributes, True, length)
    handler = _Records()
    logger = logging.getLogger("opentelemetry.attributes")
    logger.addHandler(handler)
    try:
        ours = bounded(maxlen, attributes, length)
    finally:
        logger.removeHandler(handler)
    assert list(ours.items()) == list(theirs.items())
    assert ours.dropped == theirs.dropped
    if all(isinstance(key, str) for key in attributes):
        assert [m for m in handler.messages if FULL in m] == []


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_bounded_leaves_out_a_value_it_cannot_clean_and_keeps_the_limit() -> None:
    """A value whose str() raises among the newest: left out alone, an older one takes its
    place, and it counts as dropped."""
    attributes: dict[str, Any] = {f"k{i}": i for i in range(10)}
    attributes["bad"] = _Unclean()
    ours = bounded(4, attributes, None)
    assert list(ours.items()) == [("k6", 6), ("k7", 7), ("k8", 8), ("k9", 9)]
    assert ours.dropped == 7


def test_an_on_start_processor_adding_many_attributes_logs_no_flood(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An SDK processor's on_start adding an event and a link of 10,000 attributes: the
    newest 128 kept, the rest counted, no warning per key."""
    caplog.set_level(logging.WARNING)

    def tags(span: Any) -> None:
        span.add_event("tagged", MANY)
        span.add_link(SpanContext(1, 2, False), MANY)

    span = span_after_on_start(tags)
    for attributes in (span.events[0].attributes, span.links[0].attributes):
        assert dict(attributes or {}) == NEWEST
        assert attributes.dropped == 10_000 - 128  # type: ignore[union-attr]
    assert _full_warnings(caplog) == []


class _Key(str):
    """A str subclass as a key (a ``StrEnum`` member, say)."""


def test_str_subclass_keys_take_the_quiet_path(caplog: pytest.LogCaptureFixture) -> None:
    """One key of a str subclass among 10,000: the newest 128 kept, no warning per key."""
    caplog.set_level(logging.WARNING)
    attributes: dict[str, Any] = {_Key("first"): "v", **MANY}
    ours = bounded(128, attributes, None)
    assert _full_warnings(caplog) == []
    caplog.set_level(logging.ERROR)  # the SDK's own pass below warns per key
    theirs = BoundedAttributes(128, attributes, True, None)
    assert list(ours.items()) == list(theirs.items())
    assert ours.dropped == theirs.dropped == 10_001 - 128
