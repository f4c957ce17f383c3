"""The explicit end of spans entered by hand, the unregistered-group report of a capture,
spans held across a yield by a traced generator resumed elsewhere, and ending twice."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import os
import subprocess
import sys
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _span_tree import parent_name
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import asynctrace as at
from asynctrace import _group_audit
from asynctrace.testing import CapturedSpans, capture_spans

PROVIDERS = ["fast", "sdk"]


# -- end_span on a managed_span() object entered by hand --------------------------------


@pytest.mark.parametrize("failed", [False, True], ids=["ok", "error"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_end_span_detaches_an_object_entered_by_hand(
    provider: str, failed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Ended by end_span, the object is no longer current: the next span is a child of
    the enclosing span, not of the ended one; its own exit afterwards does nothing."""
    caplog.set_level(logging.WARNING)
    with capture_spans("all", provider=provider) as captured:
        with at.umbrella_span("step", "root") as root:
            by_hand: Any = at.managed_span("reward", "by_hand")
            by_hand.__enter__()
            at.end_span(by_hand, ValueError("boom") if failed else None)
            current = trace.get_current_span()
            assert current.get_span_context().span_id == root.get_span_context().span_id
            with at.managed_span("reward", "next"):
                pass
            by_hand.__exit__(None, None, None)
            assert trace.get_current_span().get_span_context() == root.get_span_context()
    assert sorted(captured.names()) == ["by_hand", "next", "root"]
    assert parent_name(captured, captured.by_name("next")[0]) == "root"
    ended = captured.by_name("by_hand")[0]
    assert ended.status.status_code.name == ("ERROR" if failed else "UNSET")
    assert not caplog.records


def test_end_span_of_an_object_made_before_a_reconfiguration() -> None:
    """Made on the fast provider and entered on the SDK one: ended, and detached, too."""
    with capture_spans("all", provider="fast"):
        made: Any = at.managed_span("reward", "made_fast")
        with capture_spans("all", provider="sdk") as captured:
            before = trace.get_current_span()
            made.__enter__()
            at.end_span(made)
            assert trace.get_current_span() is before
            assert captured.names() == ["made_fast"]
            made.__exit__(None, None, None)
        assert captured.names() == ["made_fast"]


# -- the unregistered-group report at the end of a capture -------------------------------


@pytest.fixture
def fresh_audit(lenient: None) -> Iterator[None]:
    """A new audit window (the process's may be over in a long run), strict mode off."""
    _group_audit.reset_window()
    yield
    _group_audit.reset_window()


def _typo() -> str:
    return f"rewrad_{uuid.uuid4().hex[:8]}"  # a name told once per process: a new one


def _told(caplog: pytest.LogCaptureFixture, name: str) -> int:
    """Reports naming *name* (alone, or with names another test left untold)."""
    return sum(
        "which no library registered" in r.getMessage() and repr(name) in r.getMessage()
        for r in caplog.records
    )


def test_capture_reports_an_unregistered_group_when_it_ends(
    fresh_audit: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Told once when the capture gives the gate back (as disable_telemetry tells it),
    with the same wording; not again by a later disable_telemetry."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    name = _typo()

    @at.trace_fn(name)
    def score() -> int:
        return 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with capture_spans("all") as captured:
            score()
            with at.managed_span(name, "x"):
                pass
            assert _told(caplog, name) == 0  # told when the capture ends, not at the call
        assert captured.names() == []
        assert _told(caplog, name) == 1
        at.disable_telemetry()
    assert _told(caplog, name) == 1
    assert (
        sum(
            "which no library registered" in str(w.message) and repr(name) in str(w.message)
            for w in caught
        )
        == 1
    )


def test_capture_inside_telemetry_leaves_the_report_to_its_shutdown(
    fresh_audit: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Back to a telemetry that is on, the capture tells nothing: the telemetry's own end
    tells the name, once."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    name = _typo()
    at.enable_telemetry(TracerProvider(), span_groups="all")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with capture_spans("all"), at.managed_span(name, "x"):
            pass
        assert _told(caplog, name) == 0
        at.disable_telemetry()
        at.disable_telemetry()
    assert _told(caplog, name) == 1


_FIXTURE_TEST = """
import logging

import asynctrace as at

records = []


class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())


logging.getLogger("asynctrace").addHandler(Keep())


def test_a_typo(captured_spans):
    with at.managed_span("NAME", "x"):
        pass
    assert not any("NAME" in r for r in records)


def test_b_told_at_teardown():
    assert sum("'NAME', which no library registered" in r for r in records) == 1
"""


def test_captured_spans_fixture_reports_at_teardown(tmp_path: Path) -> None:
    """The pytest fixture gives the gate back as capture_spans does: the name is told."""
    name = _typo()
    (tmp_path / "test_fixture_typo.py").write_text(_FIXTURE_TEST.replace("NAME", name))
    env = {**os.environ, "ASYNCTRACE_STRICT": "0"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


# -- a span held across a yield, its traced generator resumed elsewhere -------------------


@at.trace_fn("reward", "stream")
async def _stream() -> AsyncIterator[int]:
    async with at.managed_span("generation", "held_across_yield"):
        for i in range(5):
            yield i


@at.trace_fn("reward", "batches")
def _batches() -> Iterator[int]:
    with at.managed_span("generation", "held_across_yield"):
        yield from range(5)


async def _drive(how: str, captured: CapturedSpans) -> None:
    if how == "break":  # the loop's finalizer closes the dropped generator in a new task
        async for i in _stream():
            if i == 1:
                break
        gc.collect()  # dropped at the break already (CPython): for other collectors
        for _ in range(200):  # no clock: until the finalizer's task ran
            if len(captured.spans) == 2:
                break
            await asyncio.sleep(0)
    elif how == "two_tasks":
        g = _stream()
        await asyncio.create_task(g.__anext__())  # type: ignore[arg-type]
        await asyncio.create_task(g.__anext__())  # type: ignore[arg-type]
        await g.aclose()  # type: ignore[attr-defined]
    else:  # started in a task, continued and closed here
        g = _stream()
        await asyncio.create_task(g.__anext__())  # type: ignore[arg-type]
        await g.__anext__()  # type: ignore[attr-defined]
        await g.aclose()  # type: ignore[attr-defined]


def _check_both_recorded(captured: CapturedSpans, outer: str) -> None:
    assert sorted(captured.names()) == sorted(["held_across_yield", outer])
    held, stream = captured.by_name("held_across_yield")[0], captured.by_name(outer)[0]
    assert parent_name(captured, held) == outer
    assert held.end_time is not None
    assert stream.end_time is not None
    assert held.end_time <= stream.end_time
    assert held.attributes.get("asynctrace.cancelled") is True
    assert stream.attributes.get("asynctrace.cancelled") is True
    assert not held.attributes.get("asynctrace.truncated")


@pytest.mark.parametrize("provider", ["fast", "sdk"])
@pytest.mark.parametrize("how", ["break", "two_tasks", "task_then_here"])
def test_span_held_across_a_yield_of_a_generator_resumed_elsewhere(
    provider: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Expected, not an instrumentation failure: nothing logged, nothing raised in strict
    mode (this suite runs strict), both spans recorded and nested."""
    caplog.set_level(logging.WARNING, logger="asynctrace")

    async def main() -> None:
        with capture_spans("all", provider=provider) as captured:
            await _drive(how, captured)
        _check_both_recorded(captured, "stream")

    asyncio.run(main())
    assert not caplog.records


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_span_held_across_a_yield_of_a_generator_closed_in_another_thread(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A traced plain generator started here and closed in another thread: the same."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    errors: list[BaseException] = []
    with capture_spans("all", provider=provider) as captured:
        g = _batches()
        next(g)

        def close() -> None:
            try:
                g.close()
            except BaseException as exc:  # handed back to the test
                errors.append(exc)

        thread = threading.Thread(target=contextvars.copy_context().run, args=(close,))
        thread.start()
        thread.join(10)
        assert not thread.is_alive()
    assert not errors
    _check_both_recorded(captured, "batches")
    assert not caplog.records


def test_block_exited_in_another_thread_is_told_as_such(
    lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Not under a traced generator: still logged (the entering context may keep the span),
    saying the span is recorded, not that anything continues untraced."""
    caplog.set_level(logging.WARNING, logger="asynctrace")

    def leak() -> None:
        opened: Any = at.managed_span("generation", "leaked")
        opened.__enter__()
        thread = threading.Thread(
            target=contextvars.copy_context().run, args=(opened.__exit__, None, None, None)
        )
        thread.start()
        thread.join(10)

    with capture_spans("all", provider="fast") as captured:
        contextvars.copy_context().run(leak)
    assert captured.names() == ["leaked"]
    (record,) = caplog.records
    message = record.getMessage()
    assert "('detach', 'generation')" in message
    assert "the span is recorded" in message
    assert "continuing untraced" not in message


# -- ending twice --------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_end_span_twice_is_silent(provider: str, caplog: pytest.LogCaptureFixture) -> None:
    """Ending an ended span does nothing, on every provider, with or without an exception:
    no SDK warning about an ended span."""
    caplog.set_level(logging.DEBUG)
    with capture_spans("all", provider=provider) as captured:
        span = at.start_span("reward", "twice")
        at.end_span(span)
        end_time = captured.spans[0].end_time
        at.end_span(span)
        at.end_span(span, ValueError("late"))
    assert [s.name for s in captured.spans] == ["twice"]
    assert captured.spans[0].end_time == end_time
    assert captured.spans[0].status.status_code.name == "UNSET"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
