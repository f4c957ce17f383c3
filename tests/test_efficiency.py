"""Efficiency spans and the coalescing PollWait."""

from __future__ import annotations

import time

import anyio
import pytest
from opentelemetry import trace

from asynctrace import (
    Bucket,
    ConfigurationError,
    PollWait,
    efficiency_bucket,
    efficiency_span,
    managed_span,
    set_efficiency_bucket,
    start_efficiency_span,
    umbrella_span,
)
from asynctrace.testing import CapturedSpans, capture_spans


def test_category_table() -> None:
    """idle/* → idle, wasted/* → wasted, declared waits unbucketed, overrides apply."""
    assert efficiency_bucket("idle/buffer_starvation") is Bucket.IDLE
    assert efficiency_bucket("wasted/failed_trajectory") is Bucket.WASTED
    assert efficiency_bucket("idle/refit_event_wait") is None
    assert efficiency_bucket("idle/generation_limit_pause") is None
    assert efficiency_bucket("init/total") is None
    assert efficiency_bucket("other/thing") is None
    set_efficiency_bucket("stall/*", Bucket.IDLE)
    set_efficiency_bucket("stall/io/ok", None)
    assert efficiency_bucket("stall/io") is Bucket.IDLE
    assert efficiency_bucket("stall/io/ok") is None


@pytest.mark.parametrize("bad", ["", "/x", "x/", " idle/x", 3])
def test_bad_categories(bad: object) -> None:
    """A malformed category is a ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match="category"):
        set_efficiency_bucket(bad, Bucket.IDLE)  # type: ignore[arg-type]


def test_override_requires_a_bucket() -> None:
    """set_efficiency_bucket rejects a bucket that is not a Bucket nor a member's value."""
    with pytest.raises(ConfigurationError, match="Bucket.IDLE"):
        set_efficiency_bucket("idle/x", "IDLE")  # type: ignore[arg-type]


def test_efficiency_span_name_and_attributes(spans: CapturedSpans) -> None:
    """Name rl.<category with / → .>, rl.efficiency.category, not made current."""
    with umbrella_span("step", "step") as step:
        with efficiency_span("idle/refit_bubble", attributes={"x": 1}) as wait:
            assert trace.get_current_span() is step
            assert wait.is_recording()
    span = spans.by_name("rl.idle.refit_bubble")[0]
    attrs = dict(span.attributes or {})
    assert attrs["rl.efficiency.category"] == "idle/refit_bubble"
    assert attrs["x"] == 1
    assert span.parent is not None
    assert span.parent.span_id == step.get_span_context().span_id


def test_ten_thousand_polls_one_span(spans: CapturedSpans) -> None:
    """10,000 polls give exactly one span with rl.idle.polls=10000 from the first poll."""
    wait = start_efficiency_span("idle/buffer_starvation")
    time.sleep(0.02)
    before_first = time.time_ns()
    for _ in range(10_000):
        wait.poll()
    assert wait.polls == 10_000
    wait.end()
    wait.end()  # idempotent
    (span,) = spans.spans
    assert span.name == "rl.idle.buffer_starvation"
    attrs = dict(span.attributes or {})
    assert attrs["rl.idle.polls"] == 10_000
    assert attrs["rl.bucket"] == "idle"
    assert span.start_time is not None
    assert span.start_time >= before_first


def test_poll_returns_running_count(spans: CapturedSpans) -> None:
    """poll() returns the number of polls so far."""
    wait = start_efficiency_span("idle/x")
    assert [wait.poll() for _ in range(3)] == [1, 2, 3]
    wait.end()


def test_no_poll_no_span(spans: CapturedSpans) -> None:
    """A wait that was never polled emits nothing."""
    with start_efficiency_span("idle/buffer_starvation"):
        pass
    start_efficiency_span("idle/x").end()
    assert spans.spans == []


def test_wait_is_reusable_after_end(spans: CapturedSpans) -> None:
    """After end(), polling again starts a new wait."""
    wait = start_efficiency_span("idle/x")
    wait.poll()
    wait.end()
    wait.poll()
    wait.poll()
    wait.end()
    assert [dict(s.attributes or {})["rl.idle.polls"] for s in spans.spans] == [1, 2]


def test_disabled_wait_is_shared_and_silent() -> None:
    """With efficiency off, start_efficiency_span returns a shared no-op wait."""
    with capture_spans("step") as captured:
        first = start_efficiency_span("idle/x")
        second = start_efficiency_span("idle/y")
        assert first is second
        assert first.poll() == 0
        first.end()
        with efficiency_span("idle/x"):
            pass
    assert captured.spans == []


@pytest.mark.anyio
async def test_wait_is_never_current(spans: CapturedSpans) -> None:
    """A task created during the wait is not the wait's child."""
    async with umbrella_span("step", "step") as step:
        wait = start_efficiency_span("idle/buffer_starvation")
        wait.poll()

        async def other() -> None:
            with managed_span("generation", "spawned"):
                await anyio.sleep(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
        wait.poll()
        await anyio.sleep(0.001)
        wait.end()
    spawned = spans.by_name("spawned")[0]
    wait_span = spans.by_name("rl.idle.buffer_starvation")[0]
    assert spawned.parent is not None
    assert spawned.parent.span_id == step.get_span_context().span_id
    assert wait_span.parent is not None
    assert wait_span.parent.span_id == step.get_span_context().span_id


def test_poll_wait_as_context_manager_records_errors(spans: CapturedSpans) -> None:
    """Used with `with`, an exception ends the wait as ERROR."""
    with pytest.raises(TimeoutError), start_efficiency_span("idle/x") as wait:
        assert isinstance(wait, PollWait)
        wait.poll()
        raise TimeoutError
    (span,) = spans.spans
    assert span.status.status_code.name == "ERROR"


def test_bad_category_on_the_hot_path_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With efficiency on, a malformed category degrades to a no-op and logs once."""
    from asynctrace import _errors

    previous = _errors.set_strict(False)
    try:
        with capture_spans() as captured, caplog.at_level("WARNING", "asynctrace"):
            with efficiency_span("/bad"):
                pass
            wait = start_efficiency_span("bad/")
            wait.poll()
            wait.end()
        assert captured.spans == []
        assert len(caplog.records) == 2
    finally:
        _errors.set_strict(previous)


def test_an_efficiency_span_entered_twice_is_refused_in_strict_mode(spans: CapturedSpans) -> None:
    """Strict mode raises at the second entry; the first entry's span still ends at its exit."""
    wait = efficiency_span("idle/weights")
    with wait:
        with pytest.raises(RuntimeError, match="efficiency_span"), wait:
            pass
        assert spans.spans == []  # the refused entry did not end the span
    (span,) = spans.spans
    assert span.name == "rl.idle.weights"


def test_an_efficiency_span_nested_on_itself_logs_once_and_keeps_its_span(
    spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    """A second entry is logged, runs untraced, and its exit does not end the first one's span."""
    from asynctrace import _errors

    previous = _errors.set_strict(False)
    try:
        wait = efficiency_span("idle/weights")
        with caplog.at_level("WARNING", "asynctrace"), wait as outer:
            with wait as inner:
                assert inner is not outer
                assert not inner.is_recording()
            with wait:
                pass
            assert spans.spans == []
        (span,) = spans.spans
        assert span.context.span_id == outer.get_span_context().span_id
        assert len(caplog.records) == 1
        assert "efficiency_span() was entered already" in caplog.text
        with wait:  # once exited, it can be entered again
            pass
        assert len(spans.by_name("rl.idle.weights")) == 2
    finally:
        _errors.set_strict(previous)


@pytest.mark.anyio
async def test_an_efficiency_span_shared_by_two_tasks_ends_at_the_first_entrys_exit(
    spans: CapturedSpans,
) -> None:
    """Two tasks entering one object: one span, ended by the first entry's exit
    even when that exit comes first and the refused entry is still open."""
    from asynctrace import _errors

    previous = _errors.set_strict(False)
    try:
        wait = efficiency_span("idle/weights")
        first_in, second_in, first_out = anyio.Event(), anyio.Event(), anyio.Event()
        seen: dict[str, int] = {}

        async def first() -> None:
            async with wait:
                first_in.set()
                await second_in.wait()
            seen["first left"] = len(spans.spans)
            first_out.set()

        async def second() -> None:
            await first_in.wait()
            async with wait:  # refused: runs untraced
                second_in.set()
                await first_out.wait()
                await anyio.sleep(0.05)
                seen["second inside"] = len(spans.spans)
            seen["second left"] = len(spans.spans)

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(second)
        assert seen == {"first left": 1, "second inside": 1, "second left": 1}
        (span,) = spans.spans
        assert span.end_time - span.start_time < 40_000_000  # not the second block's 50 ms
        with wait:  # both exited: it can be entered again
            pass
        assert len(spans.by_name("rl.idle.weights")) == 2
    finally:
        _errors.set_strict(previous)


def test_efficiency_bucket_of_an_unhashable_category_is_a_configuration_error() -> None:
    """A list is no category: ConfigurationError naming it, not TypeError."""
    with pytest.raises(ConfigurationError, match=r"\['idle'\]"):
        efficiency_bucket(["idle"])  # type: ignore[arg-type]
