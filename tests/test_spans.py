"""Leaf and umbrella spans: tag rules, disabled path, errors, cancellation, faults."""

from __future__ import annotations

import logging

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode

from asynctrace import (
    Bucket,
    _errors,
    bucket_scope,
    disable_telemetry,
    efficiency_span,
    enable_telemetry,
    instant,
    managed_span,
    per_prompt_scope,
    set_span_groups,
    umbrella_span,
)
from asynctrace.testing import CapturedSpans, capture_spans


def attrs(span: ReadableSpan) -> dict[str, object]:
    """A span's attributes as a plain dict."""
    return dict(span.attributes or {})


def test_leaf_gets_its_groups_bucket(spans: CapturedSpans) -> None:
    """A leaf span is tagged with its group's bucket."""
    with managed_span("generation", "gen"):
        pass
    with managed_span("data_processing", "prep"):
        pass
    assert attrs(spans.by_name("gen")[0])["rl.bucket"] == "productive"
    assert attrs(spans.by_name("prep")[0])["rl.bucket"] == "overhead"


def test_umbrella_never_bucketed_even_in_scope(spans: CapturedSpans) -> None:
    """An umbrella carries no bucket, inside bucket_scope or with a bucket attribute."""
    with bucket_scope(Bucket.OVERHEAD):
        with umbrella_span("step", "step", attributes={"rl.bucket": "productive"}):
            pass
        with managed_span("rollout", "leaf-of-umbrella-group"):
            pass
    for span in spans.spans:
        assert "rl.bucket" not in attrs(span), span.name


def test_unbucketed_spans_name_their_group(spans: CapturedSpans) -> None:
    """Umbrellas carry asynctrace.group; bucketed, per-prompt and efficiency spans do not."""
    with umbrella_span("step", "step"), managed_span("rollout", "umbrella-group-leaf"):
        with managed_span("generation", "leaf"), efficiency_span("init/total"):
            pass
        with per_prompt_scope(), umbrella_span("rollout", "per-prompt"):
            pass
    assert attrs(spans.by_name("step")[0])["asynctrace.group"] == "step"
    assert attrs(spans.by_name("umbrella-group-leaf")[0])["asynctrace.group"] == "rollout"
    for name in ("leaf", "rl.init.total", "per-prompt"):
        assert "asynctrace.group" not in attrs(spans.by_name(name)[0]), name


def test_bucket_scope_and_explicit_bucket(spans: CapturedSpans) -> None:
    """bucket_scope overrides a leaf's bucket; an explicit bucket= wins over the scope."""
    with bucket_scope(Bucket.OVERHEAD):
        with managed_span("generation", "scoped"):
            pass
        with managed_span("generation", "explicit", bucket=Bucket.WASTED):
            pass
        with bucket_scope(Bucket.IDLE), managed_span("reward", "inner"):
            pass
    assert attrs(spans.by_name("scoped")[0])["rl.bucket"] == "overhead"
    assert attrs(spans.by_name("explicit")[0])["rl.bucket"] == "wasted"
    assert attrs(spans.by_name("inner")[0])["rl.bucket"] == "idle"


def test_efficiency_keeps_category_bucket_in_any_scope(spans: CapturedSpans) -> None:
    """An efficiency span keeps its category's bucket; unbucketed categories get none."""
    with bucket_scope(Bucket.PRODUCTIVE):
        with efficiency_span("idle/buffer_starvation"):
            pass
        with efficiency_span("wasted/failed_trajectory"):
            pass
        with efficiency_span("idle/refit_event_wait"):
            pass
        with efficiency_span("init/total"):
            pass
    assert attrs(spans.by_name("rl.idle.buffer_starvation")[0])["rl.bucket"] == "idle"
    assert attrs(spans.by_name("rl.wasted.failed_trajectory")[0])["rl.bucket"] == "wasted"
    assert "rl.bucket" not in attrs(spans.by_name("rl.idle.refit_event_wait")[0])
    assert "rl.bucket" not in attrs(spans.by_name("rl.init.total")[0])


def test_per_prompt_scope_gates_on_per_prompt_and_unbuckets() -> None:
    """Inside per_prompt_scope spans follow the per_prompt switch and carry no bucket."""
    with capture_spans("generation") as captured:
        with managed_span("generation", "outside"):
            pass
        with per_prompt_scope(), managed_span("generation", "inside-off"):
            pass
    assert captured.names() == ["outside"]
    with capture_spans("per_prompt") as captured:
        with managed_span("generation", "outside-off"):
            pass
        with per_prompt_scope():
            with managed_span("generation", "inside", bucket=Bucket.PRODUCTIVE):
                pass
            with umbrella_span("rollout", "dispatch"):
                pass
            with efficiency_span("idle/x"):
                pass
    assert captured.names() == ["inside", "dispatch", "rl.idle.x"]
    for span in captured.spans:
        assert "rl.bucket" not in attrs(span)


def test_disabled_creates_nothing_and_span_is_safe() -> None:
    """With telemetry off the yielded span is shared, non-recording and accepts anything."""
    with capture_spans("default") as captured:
        with managed_span("generation", "off") as first:
            first.set_attribute("k", 1)
            first.set_attributes({"a": "b"})
            first.add_event("e")
            first.set_status(StatusCode.ERROR)
            first.record_exception(ValueError("x"))
            first.update_name("y")
            first.end()
        with umbrella_span("rollout", "off2") as second:
            pass
        assert first is second
        assert not first.is_recording()
    assert captured.spans == []
    disable_telemetry()
    with managed_span("job", "job") as third:
        third.set_attribute("k", 1)
    assert third is first


def test_disabled_span_carries_the_parent_context(spans: CapturedSpans) -> None:
    """The disabled span reports the current (parent) span context."""
    set_span_groups("job")
    with umbrella_span("job", "job") as parent, managed_span("generation", "off") as child:
        assert child.get_span_context() == parent.get_span_context()
        assert trace.get_current_span() is parent


def test_enabled_span_is_current_and_parented(spans: CapturedSpans) -> None:
    """managed_span makes the span current; children nest under it."""
    with umbrella_span("step", "outer") as outer:
        assert trace.get_current_span() is outer
        with managed_span("generation", "inner"):
            pass
    assert trace.get_current_span() is not outer
    inner, outer_span = spans.spans
    assert inner.parent is not None
    assert inner.parent.span_id == outer_span.context.span_id


def test_exception_recorded_and_reraised_unchanged(spans: CapturedSpans) -> None:
    """An Exception sets ERROR, is recorded, and propagates as the same object."""
    boom = KeyError("boom")
    with pytest.raises(KeyError) as info, managed_span("reward", "fails"):
        raise boom
    assert info.value is boom
    (span,) = spans.spans
    assert span.status.status_code is StatusCode.ERROR
    assert span.events[0].name == "exception"
    assert "asynctrace.cancelled" not in attrs(span)


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, GeneratorExit])
def test_base_exceptions_are_cancellation(spans: CapturedSpans, exc_type: type) -> None:
    """KeyboardInterrupt/GeneratorExit end the span with cancelled=true, not ERROR."""
    with pytest.raises(exc_type), managed_span("reward", "stopped"):
        raise exc_type()
    (span,) = spans.spans
    assert attrs(span)["asynctrace.cancelled"] is True
    assert span.status.status_code is not StatusCode.ERROR


@pytest.mark.anyio
async def test_cancellation_is_not_an_error(spans: CapturedSpans) -> None:
    """A cancelled task ends its span with asynctrace.cancelled=true, status not ERROR."""
    async with anyio.create_task_group() as tg:

        async def victim() -> None:
            async with managed_span("generation", "victim"):
                await anyio.sleep(10)

        tg.start_soon(victim)
        await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    (span,) = spans.by_name("victim")
    assert attrs(span)["asynctrace.cancelled"] is True
    assert span.status.status_code is not StatusCode.ERROR


@pytest.mark.anyio
async def test_async_with_nests_across_awaits(spans: CapturedSpans) -> None:
    """`async with` spans nest correctly across awaits."""
    async with umbrella_span("step", "outer") as outer:
        await anyio.sleep(0)
        async with managed_span("generation", "inner"):
            await anyio.sleep(0)
            assert trace.get_current_span() is not outer
        assert trace.get_current_span() is outer
    inner = spans.by_name("inner")[0]
    assert inner.parent is not None
    assert inner.parent.span_id == outer.get_span_context().span_id


def test_instant_is_an_event_or_a_zero_length_span(spans: CapturedSpans) -> None:
    """instant() adds an event to the recording span, else emits a zero-length span."""
    instant("rollout", "alone", attributes={"n": 1})
    with umbrella_span("step", "host"):
        instant("rollout", "marker", attributes={"n": 2})
    alone = spans.by_name("alone")[0]
    assert alone.start_time == alone.end_time
    host = spans.by_name("host")[0]
    assert [e.name for e in host.events] == ["marker"]
    assert dict(host.events[0].attributes or {}) == {"n": 2}


def test_instant_is_gated(spans: CapturedSpans) -> None:
    """instant() of a disabled group does nothing."""
    set_span_groups("step")
    with umbrella_span("step", "host"):
        instant("rollout", "marker")
    assert spans.spans[0].events == ()


class RaisingProcessor(SpanProcessor):
    """A span processor that fails on every start and end."""

    def on_start(self, span: object, parent_context: object = None) -> None:
        raise RuntimeError("processor on_start failed")

    def on_end(self, span: object) -> None:
        raise RuntimeError("processor on_end failed")


def test_raising_processor_never_reaches_user_code(caplog: pytest.LogCaptureFixture) -> None:
    """A raising span processor leaves the user's code running and logs once per site."""
    provider = TracerProvider()
    provider.add_span_processor(RaisingProcessor())
    previous = _errors.set_strict(False)
    try:
        enable_telemetry(provider, span_groups="all")
        results = []
        with caplog.at_level(logging.WARNING, logger="asynctrace"):
            for i in range(5):
                with managed_span("generation", "g") as span:
                    span.set_attribute("i", i)
                    results.append(i)
        assert results == [0, 1, 2, 3, 4]
        records = [r for r in caplog.records if r.name == "asynctrace"]
        assert len(records) == 1
        assert "processor on_start failed" in str(records[0].exc_info[1])
    finally:
        _errors.set_strict(previous)


def test_bad_explicit_bucket_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    """bucket='WASTED' (no member's value) is dropped with one log line, never raised."""
    previous = _errors.set_strict(False)
    try:
        with capture_spans() as captured, caplog.at_level(logging.WARNING, "asynctrace"):
            with managed_span("generation", "g", bucket="WASTED"):  # type: ignore[arg-type]
                pass
        assert dict(captured.spans[0].attributes or {})["rl.bucket"] == "productive"
        assert len(caplog.records) == 1
    finally:
        _errors.set_strict(previous)


def test_rl_bucket_attribute_cannot_override_the_rules(spans: CapturedSpans) -> None:
    """A raw rl.bucket attribute never beats bucket=, the scope or the category."""
    with managed_span("generation", "leaf", attributes={"rl.bucket": "wasted"}):
        pass
    with efficiency_span("idle/x", attributes={"rl.bucket": "productive"}):
        pass
    assert attrs(spans.by_name("leaf")[0])["rl.bucket"] == "productive"
    assert attrs(spans.by_name("rl.idle.x")[0])["rl.bucket"] == "idle"


def test_a_list_given_as_rl_bucket_is_overruled_too(spans: CapturedSpans) -> None:
    """A list-valued raw rl.bucket (lists become tuples) is overruled like any other value."""
    raw = {"rl.bucket": ["wasted"], "tags": ["a", "b"]}
    with managed_span("generation", "leaf", attributes=raw):
        pass
    with managed_span("generation", "explicit", attributes=raw, bucket=Bucket.IDLE):
        pass
    with umbrella_span("step", "umbrella", attributes=raw):
        pass
    assert attrs(spans.by_name("leaf")[0])["rl.bucket"] == "productive"
    assert attrs(spans.by_name("explicit")[0])["rl.bucket"] == "idle"
    umbrella = attrs(spans.by_name("umbrella")[0])
    assert "rl.bucket" not in umbrella
    assert umbrella["tags"] == ("a", "b")


def test_start_span_and_end_span(spans: CapturedSpans) -> None:
    """start_span: not current, gated, stamped, explicit parent and kind; end_span records."""
    from opentelemetry.trace import SpanKind

    from asynctrace import end_span, iteration_scope, start_span

    with iteration_scope(4), umbrella_span("step", "parent") as parent:
        client = start_span("per_prompt", "GET", kind=SpanKind.CLIENT, attributes={"a": 1})
        assert trace.get_current_span() is parent
        end_span(client, ValueError("bad"))
        worker = start_span("generation", "gen")
        end_span(worker, asyncio_cancelled())
    set_span_groups("step")
    off = start_span("per_prompt", "GET")
    assert not off.is_recording()
    end_span(off)
    get = spans.by_name("GET")[0]
    assert get.kind is SpanKind.CLIENT
    assert get.parent is not None
    assert get.parent.span_id == parent.get_span_context().span_id
    assert attrs(get) == {"rl.iteration": 4, "a": 1}
    assert get.status.status_code is StatusCode.ERROR
    gen = spans.by_name("gen")[0]
    assert attrs(gen)["rl.bucket"] == "productive"
    assert attrs(gen)["asynctrace.cancelled"] is True


def asyncio_cancelled() -> BaseException:
    """A CancelledError instance."""
    import asyncio

    return asyncio.CancelledError()


@pytest.mark.parametrize("provider", ["fast", "sdk"])
@pytest.mark.parametrize("opener", ["managed_span", "umbrella_span"])
def test_a_span_entered_from_a_second_task_ends_at_the_first_tasks_exit(
    provider: str, opener: str, lenient: None
) -> None:
    """The first task leaves before the refused second entry does: the span ends at
    the first task's exit, is no longer current there, and later spans there are
    not its children."""
    import asyncio

    import asynctrace as at

    open_span = getattr(at, opener)
    seen: dict[str, object] = {}

    async def main() -> None:
        shared = open_span("reward", "rl.shared")
        first_in, second_in, first_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def first() -> None:
            async with shared as span:
                first_in.set()
                await second_in.wait()
            seen["current after"] = trace.get_current_span() is span
            seen["ended at first exit"] = len(captured.by_name("rl.shared"))
            with at.managed_span("reward", "rl.after"):
                pass
            first_out.set()

        async def second() -> None:
            await first_in.wait()
            async with shared as again:
                seen["refused"] = not again.is_recording()
                second_in.set()
                await first_out.wait()
                await asyncio.sleep(0.05)

        await asyncio.gather(first(), second())

    with capture_spans("all", provider=provider) as captured:
        asyncio.run(main())
        by_name = {s.name: s for s in captured.spans}
    assert seen == {"refused": True, "current after": False, "ended at first exit": 1}
    assert sorted(by_name) == ["rl.after", "rl.shared"]
    shared_span, after = by_name["rl.shared"], by_name["rl.after"]
    assert after.parent is None
    assert (shared_span.end_time or 0) <= (after.start_time or 0)
    assert (shared_span.end_time or 0) - (shared_span.start_time or 0) < 40_000_000
