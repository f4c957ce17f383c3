"""The fast provider's own guarantees: one end per span, scopes, re-entry, ids, memory."""

from __future__ import annotations

import asyncio
import gc
import math
import sys
import threading
from pathlib import Path

import pytest

import asynctrace as at
from asynctrace import FastTracerProvider, _errors
from asynctrace._fast import IdGenerator
from asynctrace.export import read_chrome_trace
from asynctrace.testing import capture_spans


def test_a_managed_span_past_the_attribute_limit_still_ends() -> None:
    """More attributes than max_attributes: the span keeps the newest and is exported."""
    many = {f"k{i}": i for i in range(200)}
    with capture_spans("all", provider="fast") as captured:
        with at.managed_span("reward", "big", attributes=many) as span:
            assert span.is_recording()
        assert not span.is_recording()
        (exported,) = captured.by_name("big")
    assert len(exported.attributes) == 128
    assert exported.attributes["k199"] == 199
    assert exported.dropped_attributes == 200 + 1 - 128  # rl.bucket came first


def test_end_and_truncation_racing_queue_a_span_once() -> None:
    """end() on the owner thread and end_open_spans on another: each span is exported once."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with capture_spans("all", provider="fast") as captured:
            provider = captured.provider
            assert isinstance(provider, FastTracerProvider)
            tracer = provider.get_tracer("race")
            spans = [tracer.start_span(f"s{i}") for i in range(20_000)]
            stop = threading.Event()

            def truncate() -> None:
                while not stop.is_set():
                    provider.end_open_spans("asynctrace.truncated")

            thread = threading.Thread(target=truncate)
            thread.start()
            for span in spans:
                span.end()
            stop.set()
            thread.join()
            names = captured.names()
    finally:
        sys.setswitchinterval(switch)
    assert len(names) == len(set(names)) == 20_000


def test_scopes_exited_out_of_order_keep_the_later_ones() -> None:
    """Entered and exited by hand in the wrong order, each scope undoes only its own field."""
    iteration = at.iteration_scope(3)
    bucket = at.bucket_scope(at.Bucket.IDLE)
    iteration.__enter__()
    bucket.__enter__()
    iteration.__exit__(None, None, None)
    assert at.current_iteration() is None
    assert at.current_bucket() is at.Bucket.IDLE
    bucket.__exit__(None, None, None)
    assert at.current_iteration() is None
    assert at.current_bucket() is None


def test_entering_a_managed_span_again_leaves_the_first_entry_alone() -> None:
    """A nested `with` on the same object yields the disabled span; its exit ends nothing."""
    strict = _errors.set_strict(False)
    try:
        with capture_spans("all", provider="fast") as captured:
            outer = at.managed_span("reward", "outer")
            with outer as span:
                with outer as again:
                    assert not again.is_recording()
                assert span.is_recording()
                with at.managed_span("reward", "child"):
                    pass
            spans = {s.name: s for s in captured.spans}
    finally:
        _errors.set_strict(strict)
    assert set(spans) == {"outer", "child"}
    assert spans["child"].parent is not None
    assert spans["child"].parent.span_id == spans["outer"].context.span_id


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_an_exception_without_text_still_ends_the_span(provider: str) -> None:
    """An escaping exception whose __str__ raises: the span ends, marked ERROR."""
    strict = _errors.set_strict(False)
    try:
        with capture_spans("all", provider=provider) as captured:
            with pytest.raises(_Unprintable), at.managed_span("reward", "broken"):
                raise _Unprintable
            (span,) = captured.by_name("broken")
    finally:
        _errors.set_strict(strict)
    assert span.status.status_code.name == "ERROR"
    assert "_Unprintable" in (span.status.description or "")


def test_the_provider_uses_the_id_generator_it_is_given() -> None:
    """FastTracerProvider(id_generator=...) draws its ids from that generator."""

    class Counting(IdGenerator):
        def __init__(self) -> None:
            super().__init__()
            self.next = 0x1000

            def bits(count: int) -> int:
                self.next += 1
                return self.next

            self.bits = bits

    provider = FastTracerProvider(id_generator=Counting())
    span = provider.get_tracer("t").start_span("x")
    context = span.get_span_context()
    assert (context.trace_id, context.span_id) == (0x1001, 0x1002)


def test_chrome_tracks_of_finished_tasks_are_forgotten(tmp_path: Path) -> None:
    """Thousands of short tasks: the writer keeps no reference or track per dead task."""
    telemetry = at.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["chrome"], "output_dir": tmp_path}
    )

    async def one() -> None:
        with at.managed_span("reward", "t"):
            await asyncio.sleep(0)

    async def main() -> None:
        for _ in range(20):
            await asyncio.gather(*(one() for _ in range(100)))

    asyncio.run(main())
    gc.collect()
    assert telemetry.flush(10)
    gc.collect()
    assert telemetry.flush(10)
    processor = telemetry._pipeline.queued[0]  # type: ignore[union-attr]
    writer = processor._writer  # type: ignore[attr-defined]
    assert len(writer._refs) < 50
    assert len(writer._owners) < 50
    assert len(writer._tracks) < 50
    path = telemetry.trace_file
    telemetry.shutdown()
    assert path is not None
    assert len(read_chrome_trace(path).complete_events()) == 2000


def test_get_tracer_many_times_does_not_grow_the_conversion_cache() -> None:
    """The SDK scope made for a tracer's scope lives on that scope, not in a growing map."""
    with capture_spans("all", provider="fast") as captured:
        provider = captured.provider
        for _ in range(1000):
            provider.get_tracer("same.lib", "1.0").start_span("x").end()
        spans = captured.spans
    assert len(spans) == 1000
    assert {s.instrumentation_scope.name for s in spans} == {"same.lib"}


def test_non_finite_floats_reach_the_chrome_file_as_strings(tmp_path: Path) -> None:
    """NaN and infinities, set any way on fast spans, are written as "nan"/"inf", never null.

    Each way is checked with the process's "a non-finite float was seen" flag
    cleared first, so each one must raise it itself.
    """
    from asynctrace._fast._span import NONFINITE

    telemetry = at.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["chrome"], "output_dir": tmp_path}
    )
    tracer = at.get_tracer()
    ways = {
        "given": lambda: at.managed_span("reward", "given", attributes={"x": float("nan")}),
        "start": lambda: tracer.start_as_current_span("start", attributes={"x": (1.0, -math.inf)}),
    }
    try:
        for name, open_span in ways.items():
            NONFINITE[0] = False
            with open_span():
                pass
            assert telemetry.flush(10), name
        NONFINITE[0] = False
        with at.managed_span("reward", "set") as span:
            span.set_attribute("x", math.inf)
        assert telemetry.flush(10)
        NONFINITE[0] = False
        with at.managed_span("reward", "many") as span:
            span.set_attributes({"x": math.nan, "y": 1})
        path = telemetry.trace_file
    finally:
        telemetry.shutdown()
    assert path is not None
    args = {e["name"]: e["args"] for e in read_chrome_trace(path).complete_events()}
    assert args["given"]["x"] == "nan"
    assert args["start"]["x"] == [1.0, "-inf"]
    assert args["set"]["x"] == "inf"
    assert args["many"]["x"] == "nan"


def test_sampler_variables_are_read_as_the_sdk_reads_them() -> None:
    """OTEL_TRACES_SAMPLER(_ARG): the standard names; unknown ones warned about, never fatal."""
    from asynctrace._fast import sampling_from

    ratio = sampling_from(None, {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                 "OTEL_TRACES_SAMPLER_ARG": "0.25"})  # fmt: skip
    assert (ratio.ratio, ratio.parent_based) == (0.25, True)
    assert sampling_from(None, {"OTEL_TRACES_SAMPLER": "always_off"}).ratio == 0.0
    with pytest.warns(UserWarning, match="jaeger_remote"):
        assert sampling_from(None, {"OTEL_TRACES_SAMPLER": "jaeger_remote"}).ratio == 1.0
    with pytest.warns(UserWarning, match="OTEL_TRACES_SAMPLER_ARG"):
        odd = sampling_from(
            None, {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"}
        )
    assert (odd.ratio, odd.parent_based) == (1.0, False)
    with pytest.raises(at.ConfigurationError, match=r"sampling_ratio.*\[0, 1\]"):
        at.configure({"enabled": True, "exporters": [], "sampling_ratio": 2})


def test_a_sampled_out_root_records_nothing_but_carries_its_context() -> None:
    """sampling_ratio=0: spans are non-recording, with valid unsampled contexts."""
    telemetry = at.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["memory"], "sampling_ratio": 0}
    )
    try:
        with at.managed_span("reward", "dropped") as span:
            carrier = at.current_trace_carrier()
        assert not span.is_recording()
        # valid ids, not sampled (Level 1: the random flag is not sent)
        assert carrier["traceparent"].endswith("-00")
        assert telemetry.memory_exporter is not None
        assert telemetry.memory_exporter.get_finished_spans() == ()
    finally:
        telemetry.shutdown()


def test_threads_setting_attributes_on_one_span_past_its_limit_never_raise() -> None:
    """Four threads set attributes on one span at its attribute limit at once (no lock on
    that path): none raises (once a KeyError or "dictionary changed size"), the span keeps
    at most the limit, and the writes past it are counted."""
    from asynctrace import SpanLimits

    tracer = FastTracerProvider(limits=SpanLimits(max_attributes=4)).get_tracer("threads")
    span = tracer.start_span("shared")
    errors: list[BaseException] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def write(prefix: str) -> None:
        try:
            for i in range(3000):
                span.set_attribute(f"{prefix}{i}", i)
        except BaseException as exc:  # what the test looks for
            errors.append(exc)

    try:
        writers = [threading.Thread(target=write, args=(p,)) for p in "abcd"]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(span._attributes) <= 4  # type: ignore[attr-defined]
    assert span._dropped > 0  # type: ignore[attr-defined]  # (racing counts may coalesce)


def test_what_the_sdk_ignores_is_ignored_here_too() -> None:
    """A key that is not a non-empty string is dropped and counted, and evicts no valid
    attribute; ``add_link(None)``, a ``None`` link at start and ``get_tracer(None)`` raise
    nothing; a time of 0 is kept, not taken for "now"."""
    from opentelemetry.trace import Link

    from asynctrace import SpanLimits

    provider = FastTracerProvider(limits=SpanLimits(max_attributes=2))
    tracer = provider.get_tracer(None)  # type: ignore[arg-type]
    assert tracer.scope.name == ""
    span = tracer.start_span("s", links=[None, Link(None)], start_time=0)  # type: ignore[list-item, arg-type]
    span.set_attribute("a", 1)
    span.set_attribute("b", 2)
    span.set_attribute(5, 3)  # type: ignore[arg-type]
    span.set_attribute("", 4)
    span.add_link(None)  # type: ignore[arg-type]
    span.add_event("e", timestamp=0)
    span.end(end_time=0)
    assert span._attributes == {"a": 1, "b": 2}  # type: ignore[attr-defined]
    assert span._dropped == 2  # type: ignore[attr-defined]
    assert span._start == 0  # type: ignore[attr-defined]
    assert span._events[0].timestamp == 0  # type: ignore[attr-defined]
    assert getattr(span, "_links", None) in (None, [])


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_a_tracer_without_a_version_has_the_sdks_scope(provider: str) -> None:
    """``get_tracer(name)`` gives the scope the SDK gives: version ``""``, schema URL
    ``""``, no attributes; so exporters see the same scope on both providers."""
    with capture_spans("all", provider=provider) as captured:
        captured.provider.get_tracer("bare.lib").start_span("bare").end()
    (span,) = captured.spans
    scope = span.instrumentation_scope
    assert scope is not None
    assert (scope.name, scope.version, scope.schema_url, dict(scope.attributes or {})) == (
        "bare.lib", "", "", {}
    )  # fmt: skip
