"""The fast provider at its edges: what callers hand it, spans abandoned, races with end()."""

from __future__ import annotations

import itertools
import logging
import sys
import threading
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

import asynctrace
from asynctrace import ConfigurationError, FastTracerProvider
from asynctrace._fast import Sampling, SpanLimits
from asynctrace.export._adapters import converter_for
from asynctrace.export._lazy_memory import LazyMemoryExporter
from asynctrace.export._open_spans import OpenSpanTracker
from asynctrace.export._otlp_wire import WireEncoder

SECRET = "hunter2"
RAW_URL = f"http://user:{SECRET}@api.example/v1?token=sk-live-123"


def _fast(
    limits: SpanLimits | None = None, sampling: Sampling | None = None
) -> tuple[FastTracerProvider, LazyMemoryExporter]:
    provider = FastTracerProvider(
        Resource.create({"service.name": "edges"}), limits=limits, sampling=sampling
    )
    memory = LazyMemoryExporter(converter_for(provider))
    provider.add_queue(memory)
    return provider, memory


def _sdk(
    limits: SpanLimits | None = None, sampling: Sampling | None = None
) -> tuple[TracerProvider, InMemorySpanExporter]:
    limits = limits or SpanLimits()
    provider = TracerProvider(
        span_limits=limits.to_sdk(), sampler=(sampling or Sampling()).to_sdk()
    )
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _one(memory: Any) -> ReadableSpan:
    (span,) = memory.get_finished_spans()
    return span  # type: ignore[no-any-return]


# -- record_exception: the caller's own attributes stand ---------------------------


@pytest.mark.parametrize("make", [_fast, _sdk])
def test_a_callers_own_stack_trace_is_kept(make: Any) -> None:
    """exception.stacktrace given to record_exception is exported as given, not our traceback."""
    provider, memory = make()
    span = provider.get_tracer("t").start_span("s")
    try:
        raise RuntimeError("login failed for alice@example.com")
    except RuntimeError as exc:
        span.record_exception(
            exc, {"exception.message": "login failed [scrubbed]", "exception.stacktrace": "[s]"}
        )
    span.end()
    (event,) = _one(memory).events
    assert event.attributes is not None
    assert event.attributes["exception.stacktrace"] == "[s]"
    assert event.attributes["exception.message"] == "login failed [scrubbed]"
    assert "alice" not in repr(dict(event.attributes))


# -- URL attributes of other instrumentations: redacted whatever their type -----------


class _AnyUrl(str):
    """A str subclass, as pydantic's AnyUrl."""


class _YarlLike:
    """An object whose str() is the URL, as yarl.URL and httpx.URL."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


@pytest.mark.parametrize(
    "value",
    [RAW_URL, _AnyUrl(RAW_URL), _YarlLike(RAW_URL), [RAW_URL], (RAW_URL,), RAW_URL.encode()],
    ids=["str", "str-subclass", "object", "list", "tuple", "bytes"],
)
def test_foreign_url_attributes_of_any_type_are_redacted(value: Any) -> None:
    """No secret of a URL value (any type) reaches the converted span or the OTLP bytes."""
    provider, memory = _fast()
    tracer = provider.get_tracer("opentelemetry.instrumentation.someclient")
    span = tracer.start_span("GET", attributes={"url.full": value})
    span.set_attribute("http.url", value)
    span.set_attributes({"url.original": value})
    span.end()
    assert SECRET not in repr(span._attributes)  # type: ignore[attr-defined]  # nothing held
    exported = dict(_one(memory).attributes or {})
    assert set(exported) == {"url.full", "http.url", "url.original"}
    assert SECRET not in repr(exported)
    assert "sk-live" not in repr(exported)
    assert "REDACTED" in repr(exported)
    encoded = WireEncoder(None, provider.limits).encode(span)  # type: ignore[arg-type]
    assert SECRET.encode() not in b"".join(part for part in encoded if isinstance(part, bytes))


def test_a_foreign_url_whose_str_raises_is_a_placeholder() -> None:
    """A URL object that cannot be printed is recorded as a placeholder, nothing raises."""

    class Broken:
        def __str__(self) -> str:
            raise ValueError(SECRET)

    provider, memory = _fast()
    span = provider.get_tracer("someclient").start_span("GET", attributes={"url.full": Broken()})
    span.set_attribute("http.url", Broken())
    span.end()
    exported = dict(_one(memory).attributes or {})
    assert exported == {"url.full": "<unprintable Broken>", "http.url": "<unprintable Broken>"}


# -- mutable values: a private copy, deep -------------------------------------------


@pytest.mark.parametrize("make", [_fast, _sdk])
def test_changes_to_nested_values_after_end_do_not_show(make: Any) -> None:
    """Dicts and lists inside values are copied when set, on spans and on events."""
    provider, memory = make()
    inner = [1, 2]
    mapping: dict[str, Any] = {"k": "v"}
    span = provider.get_tracer("t").start_span(
        "s", attributes={"nested": [inner], "map": mapping, "tup": (inner,)}
    )
    span.set_attribute("map2", mapping)  # type: ignore[arg-type]
    span.set_attributes({"map3": mapping, "nested2": [inner]})  # type: ignore[dict-item]
    span.add_event("e", {"m": mapping, "l": [inner]})  # type: ignore[dict-item]
    span.end()
    inner.append(999)
    mapping["token"] = "SECRET-added-after-end"
    exported = _one(memory)
    assert dict(exported.attributes or {}) == {
        "nested": ((1, 2),),
        "map": {"k": "v"},
        "tup": ((1, 2),),
        "map2": {"k": "v"},
        "map3": {"k": "v"},
        "nested2": ((1, 2),),
    }
    assert dict(exported.events[0].attributes or {}) == {"m": {"k": "v"}, "l": ((1, 2),)}


def test_a_dict_value_changed_while_converting_never_fails_the_span() -> None:
    """The caller keeps changing a dict it set: conversion on another thread never raises."""
    provider = FastTracerProvider()
    convert = converter_for(provider).readable
    state = {f"k{i}": i for i in range(5000)}
    span = provider.get_tracer("t").start_span("s", attributes={"state": state})
    span.end()
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                convert(span)  # type: ignore[arg-type]
            except Exception as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(200_000):
        state[f"x{i}"] = i
    stop.set()
    thread.join(5)
    assert not errors
    assert len(convert(span).attributes["state"]) == 5000  # type: ignore[arg-type,index]


def test_a_list_that_holds_itself_raises_nothing() -> None:
    """A self-referencing list is copied to a bounded depth; set_attribute does not raise."""
    provider, memory = _fast()
    loop: list[Any] = [1.5]
    loop.append(loop)
    span = provider.get_tracer("t").start_span("s", attributes={"a": loop})
    span.set_attribute("b", loop)  # type: ignore[arg-type]
    span.end()
    assert memory.get_finished_spans()  # exported, whatever the exporter made of it


# -- set_status: what the SDK ignores is ignored ------------------------------------


@pytest.mark.parametrize("bad", [None, "ERROR", 2])
def test_set_status_with_no_status_is_ignored_and_exports(bad: Any) -> None:
    """set_status(None / "ERROR" / 2) is ignored as in the SDK; both OTLP encoders work."""
    provider, memory = _fast()
    span = provider.get_tracer("t").start_span("s")
    span.set_status(bad)
    span.end()
    WireEncoder(None, provider.limits).encode(span)  # type: ignore[arg-type]
    exported = _one(memory)
    assert exported.status.status_code is StatusCode.UNSET
    encode_spans([exported])


# -- keys: a bad key evicts nothing ---------------------------------------------------


@pytest.mark.parametrize("make", [_fast, _sdk])
def test_bad_keys_are_dropped_before_the_limit(make: Any) -> None:
    """An empty or None key is dropped and counted and never evicts a good attribute."""
    provider, memory = make(SpanLimits(max_attributes=2))
    tracer = provider.get_tracer("t")
    span = tracer.start_span("s", attributes={"a": 1, "b": 2})
    span.set_attributes({"": "bad"})
    span.end()
    tracer.start_span("s2", attributes={"a": 1, "b": 2, None: "bad"}).end()  # type: ignore[dict-item]
    first, second = memory.get_finished_spans()
    for exported in (first, second):
        assert dict(exported.attributes or {}) == {"a": 1, "b": 2}
        assert exported.dropped_attributes == 1


@pytest.mark.parametrize("make", [_fast, _sdk])
def test_a_non_string_key_in_a_mapping_becomes_its_text(make: Any) -> None:
    """As the SDK: a key 5 in set_attributes is kept as "5", and counts once."""
    provider, memory = make(SpanLimits(max_attributes=2))
    span = provider.get_tracer("t").start_span("s", attributes={"a": 1})
    span.set_attributes({5: "five", "b": 2})  # type: ignore[dict-item]
    span.end()
    exported = _one(memory)
    assert dict(exported.attributes or {}) == {"5": "five", "b": 2}
    assert exported.dropped_attributes == 1


def test_bad_keys_past_the_limit_of_an_owned_span_evict_nothing() -> None:
    """start_owned given more than the limit (asynctrace's own path) drops bad keys first."""
    provider, memory = _fast(SpanLimits(max_attributes=2))
    tracer = provider.get_tracer("asynctrace")
    tracer.start_owned("s", None, {"a": 1, "b": 2, "": 3}).end()  # type: ignore[attr-defined]
    exported = _one(memory)
    assert dict(exported.attributes or {}) == {"a": 1, "b": 2}
    assert exported.dropped_attributes == 1


# -- set_attribute racing end() ------------------------------------------------------


def test_conversion_never_fails_for_a_writer_racing_end() -> None:
    """A thread setting attributes while another ends the span: conversion always works."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    provider = FastTracerProvider(limits=SpanLimits(max_attributes=4))
    convert = converter_for(provider).readable
    tracer = provider.get_tracer("t")
    errors: list[BaseException] = []
    try:
        for _ in range(300):
            span: Any = tracer.start_span("s")
            started = threading.Event()

            def writer(span: Any = span, started: threading.Event = started) -> None:
                started.set()
                for j in range(3000):
                    span.set_attribute(f"k{j}", j)

            thread = threading.Thread(target=writer)
            thread.start()
            started.wait()
            span.end()
            try:
                for _ in range(3):
                    convert(span)
            except Exception as exc:
                errors.append(exc)
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert not errors


# -- SDK processors: on_start can tag the span -----------------------------------------


class _Enrich(SpanProcessor):
    """Tags every span in on_start, as baggage-style processors do."""

    def __init__(self) -> None:
        self.ended: list[tuple[str, dict[str, Any], int, StatusCode]] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        assert span.is_recording()
        span.set_attribute("tenant", "acme")
        span.set_attributes({"tier": 2})
        span.add_event("tagged", {"by": "enrich"})
        span.set_status(StatusCode.OK)
        span.update_name(span.name + "!")

    def on_end(self, span: ReadableSpan) -> None:
        assert not getattr(span, "is_recording", lambda: False)()  # the SDK's: a ReadableSpan
        self.ended.append(
            (
                span.name,
                dict(span.attributes or {}),
                len(span.events),
                span.status.status_code,
            )
        )


@pytest.mark.parametrize("make", [_fast, _sdk])
def test_a_processor_tags_spans_in_on_start(make: Any) -> None:
    """on_start's changes reach the same processor's on_end, on either provider."""
    provider, memory = make()
    processor = _Enrich()
    provider.add_span_processor(processor)
    provider.get_tracer("t").start_span("work", attributes={"n": 1}).end()
    provider.force_flush(5000)
    assert processor.ended == [("work!", {"n": 1, "tenant": "acme", "tier": 2}, 1, StatusCode.OK)]
    if make is _fast:  # a copy per processor: the other exporters see the span as recorded
        assert dict(_one(memory).attributes or {}) == {"n": 1}
    provider.shutdown()


class _Refused(Exception):
    """An exception of this module: its type is recorded module-qualified."""


class _RecordsAnException(SpanProcessor):
    """Records an exception on the span in on_start; keeps the event on_end sees."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        error = _Refused("login failed: https://bob:hunter2@idp.example/x?token=s3cr3t")
        span.record_exception(error)

    def on_end(self, span: ReadableSpan) -> None:
        self.events.extend(dict(event.attributes or {}) for event in span.events)


@pytest.mark.parametrize("make", [_fast, _sdk])
def test_an_exception_recorded_in_on_start_reads_as_a_spans_own(make: Any) -> None:
    """The same exception event a span records itself: the module-qualified type, as
    the SDK names it; on the fast provider, the message and stack trace redacted."""
    provider, _ = make()
    processor = _RecordsAnException()
    provider.add_span_processor(processor)
    provider.get_tracer("t").start_span("work").end()
    provider.force_flush(5000)
    (event,) = processor.events
    assert event["exception.type"] == f"{__name__}._Refused"
    assert event["exception.escaped"] == "False"
    if make is _fast:  # (the bare SDK redacts nothing)
        assert "hunter2" not in event["exception.message"]
        assert "s3cr3t" not in event["exception.message"]
        assert "hunter2" not in event["exception.stacktrace"]
    provider.shutdown()


# -- open spans: bounded --------------------------------------------------------------


def test_open_spans_are_bounded_and_forgotten_ones_still_export(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past max_open_spans the oldest are forgotten, counted, warned once; they still end."""
    provider = FastTracerProvider(max_open_spans=100)
    memory = LazyMemoryExporter(converter_for(provider))
    provider.add_queue(memory)
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        spans = [tracer.start_span(f"s{i}") for i in range(250)]
    assert len(provider.open_spans()) <= 100
    assert provider.forgotten_spans == 250 - len(provider.open_spans())
    assert sum("spans are open" in record.getMessage() for record in caplog.records) == 1
    spans[0].end()  # forgotten long ago: ended, it is exported once
    spans[0].end()
    assert provider.end_open_spans("asynctrace.truncated") > 0
    names = [span.name for span in memory.get_finished_spans()]
    assert names.count("s0") == 1
    assert "s249" in names  # still tracked: truncated


def test_max_open_spans_is_checked() -> None:
    """A bad max_open_spans is a ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match="max_open_spans.*0"):
        FastTracerProvider(max_open_spans=0)


def test_the_open_span_tracker_is_bounded() -> None:
    """The SDK path's tracker keeps at most its bound, counting what it forgot."""
    tracker = OpenSpanTracker(max_open_spans=50)
    provider = TracerProvider()
    provider.add_span_processor(tracker)
    spans = [provider.get_tracer("t").start_span(f"s{i}") for i in range(120)]
    assert len(tracker) <= 50
    assert tracker.forgotten == 120 - len(tracker)
    for span in spans:
        span.end()
    assert len(tracker) == 0


# -- values whose str() raises -------------------------------------------------------


class _BadStr:
    def __str__(self) -> str:
        raise ValueError("no")


def test_a_value_whose_str_raises_is_dropped_alone() -> None:
    """The converter leaves that value out and counts it; the span and the rest are kept."""
    provider, memory = _fast()
    span = provider.get_tracer("t").start_span("s", attributes={"ok": 1, "bad": _BadStr()})
    span.add_event("e", {"bad": _BadStr(), "fine": "x"})  # type: ignore[dict-item]
    span.end()
    exported = _one(memory)
    assert dict(exported.attributes or {}) == {"ok": 1}
    assert exported.dropped_attributes == 1
    assert dict(exported.events[0].attributes or {}) == {"fine": "x"}


# -- the parent's trace flags ------------------------------------------------------------


@pytest.mark.parametrize("flags", [0x00, 0xFF])
def test_a_remote_parents_flags_are_exported_as_given(flags: int) -> None:
    """The converted parent context carries the parent's own flags, as the SDK's does."""
    parent = SpanContext(0xABC, 0xDEF, True, TraceFlags(flags))
    sampling = Sampling(1.0, parent_based=False)
    results = []
    for make in (_fast, _sdk):
        provider, memory = make(sampling=sampling)
        context = set_span_in_context(NonRecordingSpan(parent))
        provider.get_tracer("t").start_span("child", context=context).end()
        exported = _one(memory)
        assert exported.parent is not None
        results.append((int(exported.parent.trace_flags), int(exported.context.trace_flags)))
    assert results[0] == results[1]
    assert results[0][0] == flags


# -- asynctrace's own spans: forgotten ones, and the caller's containers --------------


def test_forgotten_managed_spans_and_started_spans_still_export() -> None:
    """Spans asynctrace ends itself (``with managed_span``, ``end_span``) claim a span
    the provider forgot past its bound, so each is exported once."""
    import contextlib

    import asynctrace as at

    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "provider": "fast", "span_groups": "all"}
    )
    try:
        provider: Any = telemetry.provider
        provider._max_open = 5  # a small bound, for the test
        with contextlib.ExitStack() as stack:
            for i in range(12):
                stack.enter_context(at.managed_span("reward", f"m{i}"))
            started = [at.start_span("reward", f"s{i}") for i in range(12)]
            for span in started:
                at.end_span(span)
        assert provider.forgotten_spans > 0
        memory = telemetry.memory_exporter
        assert memory is not None
        names = sorted(span.name for span in memory.get_finished_spans())
        assert names == sorted([f"m{i}" for i in range(12)] + [f"s{i}" for i in range(12)])
    finally:
        telemetry.shutdown(5.0)


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_containers_given_to_managed_span_are_copied(provider: str) -> None:
    """A dict or nested list the caller changes after the span started changes nothing
    recorded (the SDK copies at set time; so does asynctrace's own span path)."""
    import asynctrace as at

    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "provider": provider, "span_groups": "all"}
    )
    try:
        mapping: dict[str, Any] = {"k": "v"}
        nested: list[Any] = [[1, 2]]
        with at.managed_span("reward", "x", attributes={"map": mapping, "nested": nested}):
            mapping["token"] = "added later"
            nested[0].append(999)
        mapping["after"] = "end"
        memory = telemetry.memory_exporter
        assert memory is not None
        (span,) = memory.get_finished_spans()
        attributes = dict(span.attributes or {})
        assert attributes["nested"] == ((1, 2),)
        if provider == "fast":  # the SDK drops a dict value (not an attribute type)
            assert attributes["map"] == {"k": "v"}
    finally:
        telemetry.shutdown(5.0)


def test_the_oldest_open_spans_are_kept_past_the_bound() -> None:
    """A job's umbrella, open for the whole run, is among the oldest: past the bound the
    spans forgotten are those after the oldest hundredth, so it is still truncated."""
    provider = FastTracerProvider(max_open_spans=1_000)
    memory = LazyMemoryExporter(converter_for(provider))
    provider.add_queue(memory)
    tracer = provider.get_tracer("t")
    tracer.start_span("job")
    leaked = [tracer.start_span(f"leak{i}") for i in range(2_500)]
    assert provider.forgotten_spans > 0
    assert "job" in [span.name for span in provider.open_spans()]
    provider.end_open_spans("asynctrace.truncated")
    truncated = {span.name for span in memory.get_finished_spans()}
    assert "job" in truncated
    assert len(leaked) == 2_500


@pytest.mark.parametrize("make", [_fast, _sdk])
@pytest.mark.parametrize("where", ["start", "set"])
def test_bad_keys_among_the_newest_past_the_limit_evict_nothing(make: Any, where: str) -> None:
    """Past the limit only the newest entries are read, from the end: bad keys among them
    are skipped, so the span keeps the newest good ones, as the SDK does."""
    provider, memory = make(SpanLimits(max_attributes=3))
    many: dict[Any, Any] = {f"k{i}": i for i in range(8)}
    many[None] = "none"
    many[""] = "empty"
    if where == "start":
        provider.get_tracer("t").start_span("s", attributes=many).end()
    else:
        span = provider.get_tracer("t").start_span("s", attributes={"own": 1})
        span.set_attributes(many)
        span.end()
    provider.force_flush(5000)
    span = _one(memory)
    assert dict(span.attributes or {}) == {"k5": 5, "k6": 6, "k7": 7}
    assert span.dropped_attributes == len(many) - 3 + (where == "set")


class _RepeatingIds:
    """An id generator that repeats span ids across traces, as the specification allows."""

    def __init__(self) -> None:
        self.traces = iter(range(1, 1_000))
        self.spans = itertools.cycle([1, 2])

    def generate_trace_id(self) -> int:
        return next(self.traces)

    def generate_span_id(self) -> int:
        return next(self.spans)

    def is_trace_id_random(self) -> bool:
        return False


@pytest.mark.parametrize("order", ["first-first", "second-first"])
def test_span_ids_repeated_across_traces_lose_no_span(order: str) -> None:
    """Two open spans of two traces with one span id: both are exported once, whichever
    ends first, and neither still records after its end (as on the SDK's provider)."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = FastTracerProvider(id_generator=_RepeatingIds())
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("ids")
    first = tracer.start_span("A")  # span id 1
    other = tracer.start_span("B")  # span id 2
    second = tracer.start_span("C")  # span id 1 again, another trace
    for span in (first, second) if order == "first-first" else (second, first):
        span.end()
    other.end()
    assert provider.force_flush()
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["A", "B", "C"]
    assert not first.is_recording()
    assert not second.is_recording()
    provider.shutdown()


def test_ending_a_span_of_a_repeated_id_never_takes_the_others_place() -> None:
    """B (another trace, A's span id) ends on another thread, then A's owner ends A:
    both are exported (B is tracked by its token, A keeps its place)."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class SameSpanId(_RepeatingIds):
        def generate_span_id(self) -> int:
            return 7

    provider = FastTracerProvider(id_generator=SameSpanId())
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("ids")
    first, second = tracer.start_span("A"), tracer.start_span("B")
    ending = threading.Thread(target=second.end, name="B")
    ending.start()
    ending.join()
    assert provider._open.get(7) is first
    first.end()
    assert provider.force_flush()
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["A", "B"]
    assert not first.is_recording()
    assert provider.end_open_spans("asynctrace.truncated") == 0
    provider.shutdown()


@pytest.mark.usefixtures("switching")
def test_spans_ended_while_others_are_forgotten_are_all_exported() -> None:
    """At max_open_spans, a start forgets a tenth while another thread ends some of them:
    every span ended is exported, once."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    lost = 0
    for _ in range(3):
        provider = FastTracerProvider(max_open_spans=20_000)
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("forget")
        spans = [tracer.start_span("s") for _ in range(20_000)]
        victims = spans[200:2200]  # among those the next start forgets
        go = threading.Barrier(2)

        def end_them(victims: list[Any] = victims, go: threading.Barrier = go) -> None:
            go.wait()
            for span in victims:
                span.end()

        ender = threading.Thread(target=end_them)
        ender.start()
        go.wait()
        tracer.start_span("one more")  # past the limit: forgets 2,000
        ender.join()
        assert provider.force_flush()
        lost += sum(1 for span in victims if span.is_recording())
        assert len(exporter.get_finished_spans()) == len(victims)
        provider.shutdown()
    assert lost == 0


def test_a_managed_span_of_a_repeated_id_leaves_the_others_place() -> None:
    """A ``managed_span`` started while an open span of another trace has its span id:
    its exit leaves that span tracked, and both are exported."""
    from asynctrace._state import GATE
    from asynctrace.testing import capture_spans

    traces = itertools.count(1)
    with capture_spans("all", provider="fast") as captured:
        provider = GATE.tracer._provider  # type: ignore[union-attr]
        provider._bits = lambda count: next(traces) if count == 128 else 7  # every span id 7
        first = asynctrace.start_span("rollout", "A")
        with asynctrace.managed_span("rollout", "B"):
            pass
        assert provider._open.get(7) is first
        first.end()
        assert not first.is_recording()
    assert sorted(span.name for span in captured.spans) == ["A", "B"]
