"""The fast provider at its edges: stamps past the limits, racing setters, values set
then changed, notes added after recording, and the smaller API corners."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN_CONTEXT, Link, SpanContext, TraceFlags

import asynctrace as at
from asynctrace import ConfigurationError, FastTracerProvider
from asynctrace._fast import SpanLimits, limits_from
from asynctrace.export._adapters import converter_for
from asynctrace.export._lazy_memory import LazyMemoryExporter
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]
STAMPS = {"rl.bucket": "productive", "rl.iteration": 7}
METRICS = {f"metric.{i}": float(i) for i in range(130)}


def _fast(limits: SpanLimits | None = None) -> tuple[FastTracerProvider, LazyMemoryExporter]:
    provider = FastTracerProvider(limits=limits)
    memory = LazyMemoryExporter(converter_for(provider))
    provider.add_queue(memory)
    return provider, memory


def _stamps(span: ReadableSpan) -> dict[str, Any]:
    attributes = dict(span.attributes or {})
    return {key: attributes.get(key, "<gone>") for key in STAMPS}


# -- 1. asynctrace's stamps survive the count and length limits ------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stamps_survive_a_leaf_started_with_too_many_attributes(provider: str) -> None:
    """A leaf given 130 attributes at start keeps rl.bucket and rl.iteration; 128 in all."""
    with capture_spans("all", provider=provider) as captured:
        with at.iteration_scope(7):
            with at.managed_span("policy_update", "step", attributes=METRICS):
                pass
    (span,) = captured.spans
    assert _stamps(span) == STAMPS
    assert len(span.attributes or {}) == 128
    assert "metric.129" in (span.attributes or {})  # the newest user attributes stay
    assert span.dropped_attributes == 4  # 2 stamps + 130 metrics - 128


@pytest.mark.parametrize(
    "how",
    ["set_attributes", "set_attributes_in_halves", "set_attribute"],
)
def test_stamps_survive_attributes_set_past_the_limit(how: str) -> None:
    """Past max_attributes the oldest user attribute goes, never a stamp (fast provider)."""
    with capture_spans("all", provider="fast") as captured:
        with at.iteration_scope(7):
            with at.managed_span("policy_update", "step") as span:
                if how == "set_attributes":
                    span.set_attributes(METRICS)
                elif how == "set_attributes_in_halves":
                    half = list(METRICS.items())
                    span.set_attributes(dict(half[:65]))
                    span.set_attributes(dict(half[65:]))
                else:
                    for key, value in METRICS.items():
                        span.set_attribute(key, value)
    (span_,) = captured.spans
    assert _stamps(span_) == STAMPS
    attributes = dict(span_.attributes or {})
    assert len(attributes) == 128
    assert "metric.129" in attributes
    assert "metric.0" not in attributes
    assert span_.dropped_attributes == 4


def test_a_step_leaf_given_many_metrics_keeps_what_goodput_reads(tmp_path: Any) -> None:
    """A step's leaf given 130 metrics exports its rl.bucket and rl.iteration (goodput's keys)."""
    memory = InMemorySpanExporter()
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "provider": "fast",  # (on the SDK's, attributes set later evict the stamps)
            "exporters": [memory],
            "output_dir": str(tmp_path),
        }
    )
    try:
        with at.iteration_scope(1):
            with at.umbrella_span("step", "train.step"):
                with at.managed_span("policy_update", "train.optimizer_step") as span:
                    span.set_attributes(METRICS)
    finally:
        telemetry.shutdown()
    leaf = next(s for s in memory.get_finished_spans() if s.name == "train.optimizer_step")
    assert (leaf.attributes or {}).get("rl.bucket") == "productive"
    assert (leaf.attributes or {}).get("rl.iteration") == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_length_limit_never_cuts_a_stamp(provider: str) -> None:
    """max_attribute_length=4 cuts user strings, not the bucket name (OTLP/SDK view)."""
    memory = InMemorySpanExporter()
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "provider": provider,
            "exporters": [memory],
            "span_limits": {"max_attribute_length": 4},
        }
    )
    try:
        with at.iteration_scope(7):
            with at.managed_span("policy_update", "step", attributes={"note": "abcdefgh"}):
                pass
            with at.umbrella_span("step", "train.step"):
                pass
    finally:
        telemetry.shutdown()
    leaf, umbrella = memory.get_finished_spans()
    attributes = dict(leaf.attributes or {})
    assert attributes["rl.bucket"] == "productive"
    assert attributes["note"] == "abcd"
    assert (umbrella.attributes or {})["asynctrace.group"] == "step"


def test_stamps_stay_with_a_processor_under_a_length_limit() -> None:
    """An SDK processor on the fast provider sees the stamps whole in on_start and on_end."""
    seen: list[Any] = []

    class Keep(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            seen.append(dict(span.attributes))

        def on_end(self, span: ReadableSpan) -> None:
            seen.append(dict(span.attributes or {}))

    provider, _ = _fast(SpanLimits(max_attribute_length=3))
    provider.add_span_processor(Keep())
    span = provider.get_tracer("t").start_span("s", attributes={"rl.bucket": "productive"})
    span.end()
    provider.force_flush()
    provider.shutdown()
    assert seen == [{"rl.bucket": "productive"}] * 2


# -- 2. setters racing on one span --------------------------------------------------


class _Hooked(str):
    """A key whose hash runs *hook* (another writer, at the worst moment)."""

    hook: Callable[[], None] | None = None

    def __hash__(self) -> int:
        hook, type(self).hook = type(self).hook, None
        if hook is not None:
            hook()
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other)


class _Watching(Mapping[str, Any]):
    """A mapping that lets another writer in (once) when asked about *key*."""

    def __init__(self, items: dict[str, Any], key: str, hook: Callable[[], None]) -> None:
        self._items = items
        self._key = key
        self._hook: Callable[[], None] | None = hook

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        if key == self._key:
            hook, self._hook = self._hook, None
            if hook is not None:
                hook()
        return key in self._items


def test_set_attributes_past_the_limit_survives_another_writer_meanwhile() -> None:
    """A writer that changes the span while set_attributes reads it: no error, limit held."""
    provider, memory = _fast(SpanLimits(max_attributes=8))
    span = provider.get_tracer("t").start_span("s")
    span.set_attribute(_Hooked("hooked"), 0)
    _Hooked.hook = lambda: span.set_attribute("meanwhile", 1)
    span.set_attributes({f"m{i}": i for i in range(10)})  # the newest-only path
    assert len(span.attributes) <= 8
    span.end()
    other = provider.get_tracer("t").start_span("s")  # 6 of 8: the writer grows the dict
    other.set_attributes({f"o{i}": i for i in range(6)})
    watching = _Watching({f"n{i}": i for i in range(5)}, "o2", lambda: other.set_attribute("w", 1))
    other.set_attributes(watching)  # asked about its own keys while merging: the writer runs
    assert len(other.attributes) <= 8
    other.end()
    for recorded in memory.get_finished_spans():
        assert len(recorded.attributes or {}) <= 8


def test_threads_setting_attributes_on_one_span_never_raise(switching: None) -> None:
    """set_attribute and set_attributes from several threads at once: none raises."""
    provider, _ = _fast(SpanLimits(max_attributes=8))
    tracer = provider.get_tracer("t")
    errors: list[BaseException] = []
    for _ in range(40):
        span = tracer.start_span("s")

        def single(span: Any = span) -> None:
            for j in range(200):
                span.set_attribute(f"k{j}", j)

        def bulk(span: Any = span) -> None:
            try:
                for j in range(100):
                    span.set_attributes({f"m{j}-{x}": x for x in range(10)})
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=single), threading.Thread(target=bulk)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(span.attributes) <= 8
        span.end()
    assert errors == []


@pytest.mark.parametrize("what", ["links", "events"])
def test_threads_adding_links_or_events_keep_the_limit(switching: None, what: str) -> None:
    """Links (and events) added from several threads at once: at most the limit stay."""
    provider, memory = _fast(SpanLimits(max_events=4, max_links=4))
    tracer = provider.get_tracer("t")
    context = SpanContext(1, 2, False, TraceFlags(1))
    over = 0
    for _ in range(60):
        span: Any = tracer.start_span("s")

        def add(span: Any = span) -> None:
            for _ in range(200):
                if what == "links":
                    span.add_link(context)
                else:
                    span.add_event("e")

        threads = [threading.Thread(target=add) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        held = len(span._links if what == "links" else span._events)
        over += held > 4
        span.end()
    assert over == 0
    for span in memory.get_finished_spans():
        assert len(span.links if what == "links" else span.events) == 4


# -- 3. values changed after they were set ---------------------------------------------


class _MyList(list[int]):
    pass


@pytest.mark.parametrize("provider", PROVIDERS)
def test_values_changed_after_being_set_are_recorded_as_set(provider: str) -> None:
    """A numpy array and a list subclass changed after set: recorded as at set time, as the SDK."""
    np = pytest.importorskip("numpy")
    with capture_spans("all", provider=provider) as captured:
        array, mine = np.zeros(3), _MyList([1, 2])
        with at.managed_span("policy_update", "s", attributes={"a": array, "l": mine}) as span:
            span.set_attribute("a2", array)
            span.set_attribute("l2", mine)
            span.set_attributes({"a3": array, "l3": mine})
        array[:] = 7
        mine.append(99)
    (recorded,) = captured.spans
    attributes = dict(recorded.attributes or {})
    for key in ("a", "a2", "a3"):
        assert attributes[key] == "[0. 0. 0.]", key
    for key in ("l", "l2", "l3"):
        assert attributes[key] == (1, 2), key


def test_values_changed_after_start_span_are_recorded_as_set() -> None:
    """start_span / add_event of the API: later changes to the values do not show."""
    np = pytest.importorskip("numpy")
    provider, memory = _fast()
    array, mine = np.zeros(2), _MyList([1])
    span = provider.get_tracer("t").start_span("s", attributes={"a": array, "l": mine})
    span.add_event("e", {"a": array, "l": mine})
    array[:] = 5
    mine.append(2)
    span.end()
    (recorded,) = memory.get_finished_spans()
    assert dict(recorded.attributes or {}) == {"a": "[0. 0.]", "l": (1,)}
    assert dict(recorded.events[0].attributes or {}) == {"a": "[0. 0.]", "l": (1,)}


# -- 4. a note added after the exception was recorded ----------------------------------


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes are 3.11's")
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_note_added_after_recording_is_not_in_the_stack_trace(provider: str) -> None:
    """Notes of the exception and of its cause, added after record_exception, do not show."""
    with capture_spans("all", provider=provider) as captured:
        tracer = at.get_tracer()
        span = tracer.start_span("s")
        cause = KeyError("inner")
        cause.add_note("inner first")
        try:
            raise ValueError("boom") from cause
        except ValueError as exc:
            exc.add_note("first note")
            span.record_exception(exc)
            exc.add_note("LATER outer")
            cause.add_note("LATER inner")
        span.end()
    (recorded,) = captured.spans
    text = (recorded.events[0].attributes or {})["exception.stacktrace"]
    assert "first note" in text
    assert "inner first" in text
    assert "LATER" not in text


# -- 5. a managed_span object before it is entered, or not sampled -----------------------


def test_a_managed_span_object_answers_before_entering_and_unsampled() -> None:
    """repr, is_recording, get_span_context and setters never raise on the object itself."""
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "provider": "fast",
            "sampling_ratio": 0.0,
            "exporters": [],
        }
    )
    try:
        manager: Any = at.managed_span("policy_update", "step")
        assert "step" in repr(manager)
        assert manager.is_recording() is False
        assert manager.get_span_context() == INVALID_SPAN_CONTEXT
        manager.set_attribute("a", 1)
        with manager as span:
            assert not span.is_recording()
            assert "step" in repr(manager)
            assert manager.is_recording() is False
            assert manager.get_span_context() == span.get_span_context()
            manager.set_attribute("a", 1)
    finally:
        telemetry.shutdown()


# -- 6. spans of other instrumentations redact URLs everywhere ---------------------------


def test_other_instrumentations_events_links_and_exceptions_are_redacted() -> None:
    """A foreign tracer's event, link (also at start) and exception attributes lose secrets."""
    provider, memory = _fast()
    tracer = provider.get_tracer("opentelemetry.instrumentation.aiohttp_client")
    url = "https://user:pw123@h.example/p?token=SECRET123&x=1"
    context = SpanContext(1, 2, False, TraceFlags(1))
    span = tracer.start_span("GET", links=[Link(context, {"url.full": url})])
    span.add_event("redirect", {"url.full": url})
    span.add_link(context, {"http.url": url})
    span.record_exception(ValueError("x"), {"url.full": url})
    span.end()
    (recorded,) = memory.get_finished_spans()
    blob = repr([dict(e.attributes or {}) for e in recorded.events])
    blob += repr([dict(link.attributes or {}) for link in recorded.links])
    assert "SECRET123" not in blob
    assert "pw123" not in blob
    assert blob.count("REDACTED") == 4


# -- 7. an SDK processor's on_start on the fast provider, as on the SDK's -----------------


class _Changes(SpanProcessor):
    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        span.set_attributes({"m1": 1, 7: "seven", "": 3})
        span.add_link(INVALID_SPAN_CONTEXT)
        span.add_link(SpanContext(1, 2, False, TraceFlags(1)), {"l": 1})

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


def test_a_processors_on_start_changes_are_taken_as_the_sdk_takes_them() -> None:
    """Non-str keys kept as text, an invalid bare link ignored: the same on both providers."""
    results = []
    for provider in (FastTracerProvider(), TracerProvider()):
        processor = _Changes()
        provider.add_span_processor(processor)
        provider.get_tracer("t").start_span("s").end()
        provider.force_flush()
        (span,) = processor.ended
        results.append(
            (
                dict(span.attributes or {}),
                span.dropped_attributes,
                [(link.context.trace_id, dict(link.attributes or {})) for link in span.links],
            )
        )
        provider.shutdown()
    assert results[0] == results[1]
    assert results[0][0] == {"m1": 1, "7": "seven"}


# -- 8. the random-trace-id flag follows the id generator ---------------------------------


class _Counting:
    """Ids from a counter: not random (as its is_trace_id_random says)."""

    def __init__(self, random: bool) -> None:
        self.random = random
        self.next = 0

    def generate_span_id(self) -> int:
        self.next += 1
        return self.next

    def generate_trace_id(self) -> int:
        self.next += 1
        return self.next

    def is_trace_id_random(self) -> bool:
        return self.random


@pytest.mark.parametrize("random", [False, True])
def test_root_trace_flags_follow_the_id_generator(random: bool) -> None:
    """A root's W3C random flag (0x02) is set only if the id generator says so, as the SDK."""
    fast = FastTracerProvider(id_generator=_Counting(random))  # type: ignore[arg-type]
    sdk = TracerProvider(id_generator=_Counting(random))  # type: ignore[arg-type]
    flags = [
        int(p.get_tracer("t").start_span("r").get_span_context().trace_flags) for p in (fast, sdk)
    ]
    assert flags[0] == flags[1] == (0x03 if random else 0x01)


# -- 9. limits from the environment ----------------------------------------------------------


def test_a_bad_limit_variable_is_told_what_a_variable_accepts() -> None:
    """A variable cannot say unlimited: the error does not offer null; the key does."""
    with pytest.raises(ConfigurationError) as raised:
        limits_from({}, {"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "null"})
    message = str(raised.value)
    assert "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT" in message
    assert "'null'" in message
    accepted = message.partition("accepted: ")[2]
    assert accepted.startswith("an integer from 0 to")
    assert "null" not in accepted
    with pytest.raises(ConfigurationError, match="or null for no limit"):
        limits_from({"max_events": -1}, {})


def test_an_empty_limit_variable_means_the_default() -> None:
    """A set but empty variable counts as unset: the default 128, not unlimited."""
    assert limits_from({}, {"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": " "}).max_attributes == 128


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_length_limit_cuts_no_stamp_in_the_chrome_file_nor_in_goodput(
    provider: str, tmp_path: Any
) -> None:
    """Under max_attribute_length=4 the chrome file keeps ``rl.bucket`` whole, so the live
    rollup and ``asynctrace goodput`` count the leaf as productive, not as ``prod``."""
    import json

    from asynctrace.cli._collect import collect
    from asynctrace.cli._goodput_document import to_json

    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "provider": provider,
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "span_limits": {"max_attribute_length": 4},
            "goodput": {"metrics": "none"},
        }
    )
    try:
        with at.iteration_scope(7), at.umbrella_span("step", "train.step"):
            with at.managed_span("policy_update", "learn", attributes={"note": "abcdefgh"}):
                pass
    finally:
        telemetry.shutdown()
    lines = [
        json.loads(line) for line in (tmp_path / "traces-r0.jsonl").read_text().split("\n") if line
    ]
    (leaf,) = [line for line in lines if line.get("name") == "learn"]
    assert leaf["args"]["rl.bucket"] == "productive"
    assert leaf["args"]["note"] == "abcd"
    (path,) = tmp_path.glob("goodput-*.jsonl")
    (live,) = [
        json.loads(x)
        for x in path.read_text().splitlines()
        if '"kind":"step"' in x.replace(" ", "")
    ]
    offline = to_json(
        collect([tmp_path / "traces-r0.jsonl"], step_name=None, progress=False, prog="t")
    )
    (step,) = offline["steps"]
    assert live["productive_s"] > 0
    assert step["productive_s"] == live["productive_s"]


def test_the_otlp_wire_cuts_no_stamp() -> None:
    """The fast provider's own OTLP encoding keeps the stamps whole under a length limit,
    on its plain path and on its cleaning path (a value it cannot encode as is)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from asynctrace.export._otlp_wire import WireEncoder, request_bytes

    provider, _ = _fast(SpanLimits(max_attribute_length=3))
    tracer = provider.get_tracer("t")
    plain = tracer.start_span("plain", attributes={"rl.bucket": "productive", "note": "abcdef"})
    plain.end()
    unusual = tracer.start_span(
        "unusual", attributes={"rl.bucket": "productive", "note": "abcdef", "mixed": (1, "a")}
    )
    unusual.end()
    encoder = WireEncoder(None, provider.limits)
    for span in (plain, unusual):
        request = ExportTraceServiceRequest.FromString(request_bytes([encoder.encode(span)]))
        (decoded,) = request.resource_spans[0].scope_spans[0].spans
        values = {kv.key: kv.value for kv in decoded.attributes}
        assert values["rl.bucket"].string_value == "productive", span
        assert values["note"].string_value == "abc", span
