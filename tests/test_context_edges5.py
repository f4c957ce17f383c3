"""Context edges: the disabled span's parent, one span object in two threads,
span objects used before they are entered, and failed detaches per group."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace

import asynctrace as at
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]


def _in_threads(count: int, work: Callable[[int], None], context: contextvars.Context) -> None:
    """Run *work(i)* in *count* threads, each in a copy of *context*; re-raise a failure."""
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            context.copy().run(work, index)
        except BaseException as exc:  # handed back to the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    assert not errors, errors


@pytest.mark.parametrize("provider", PROVIDERS)
def test_disabled_span_parent_carried_as_the_current_span(provider: str) -> None:
    """With the group off, the current span (what the docs say to carry) is the parent,
    also in another thread; the handed span answers for it where it is read."""
    with capture_spans("step", provider=provider) as captured:
        tracer = captured.provider.get_tracer("edges")
        with (
            at.umbrella_span("step", "rl.step") as step,
            at.managed_span("generation", "rl.generate") as span,
        ):
            assert span.get_span_context() == step.get_span_context()
            carried = trace.set_span_in_context(trace.get_current_span())

            def work(_: int) -> None:
                tracer.start_span("child_in_thread", context=carried).end()

            _in_threads(1, work, contextvars.copy_context())
    spans = {s.name: s for s in captured.spans}
    child, parent = spans["child_in_thread"], spans["rl.step"]
    assert child.parent is not None
    assert child.parent.span_id == parent.context.span_id
    assert child.context.trace_id == parent.context.trace_id


class _Rendezvous:
    """An attribute value whose text is asked for on span start: it holds each entering
    thread there until all have arrived, past the entered-once check together."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties)

    def __str__(self) -> str:
        try:
            self.barrier.wait(5)
        except threading.BrokenBarrierError:
            pass
        return "rendezvous"


@pytest.mark.parametrize("first", ["overwritten", "kept"])
@pytest.mark.parametrize("parented", [False, True], ids=["root", "child"])
def test_one_object_entered_from_two_threads_leaves_no_span_current(
    lenient: None, parented: bool, first: str
) -> None:
    """Unsupported, but bounded: no thread keeps the ended span current after its block.

    Both threads pass the entered-once check, then both enter; the object keeps the
    token of the thread that entered last. *first* is the thread that exits first:
    the one whose token was overwritten (its detach fails), or the one whose token
    was kept (the other finds the span already exited).
    """
    with capture_spans("all", provider="fast") as captured:
        with at.umbrella_span("step", "rl.step") as step:
            context = contextvars.copy_context()
        if not parented:
            context = contextvars.Context()
        value: Any = _Rendezvous(2)
        shared: Any = at.managed_span("generation", "raced", attributes={"edges.value": value})
        inside = threading.Barrier(2)
        turn = threading.Event()
        after: dict[int, trace.Span] = {}

        def work(index: int) -> None:
            otel_context.attach(otel_context.set_value("edges.thread", index))
            with shared:
                inside.wait(5)  # both entries made before either exits
                # Which entry's token the object kept (white box: only to order the exits).
                kept = shared._token.old_value.get("edges.thread") == index
                inside.wait(5)  # both read before either exits
                if kept != (first == "kept"):
                    turn.wait(5)
            turn.set()
            after[index] = trace.get_current_span()

        _in_threads(2, work, context)
    assert len(after) == 2
    for current in after.values():
        assert current is not shared
        assert current.is_recording() is False
        if parented:
            assert current.get_span_context().span_id == step.get_span_context().span_id
            assert current.get_span_context().trace_id == step.get_span_context().trace_id
        else:
            assert not current.get_span_context().is_valid
    assert [s.name for s in captured.spans if s.name == "raced"]


def test_unentered_object_as_a_parent_on_the_fast_provider() -> None:
    """A managed_span() object made current before it is entered stands for a new trace:
    the child is recorded (strict mode: nothing raised), not lost."""
    with capture_spans("all", provider="fast") as captured:
        unentered: Any = at.managed_span("generation", "never_entered")
        with trace.use_span(unentered), at.managed_span("reward", "child") as child:
            assert child.is_recording()
        started = at.start_span("reward", "started", context=trace.set_span_in_context(unentered))
        at.end_span(started)
    spans = {s.name: s for s in captured.spans}
    assert set(spans) == {"child", "started"}
    assert spans["child"].parent is None
    assert spans["started"].parent is None


@pytest.mark.parametrize("provider", PROVIDERS)
def test_end_span_on_an_unentered_object_does_nothing(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No warning (strict mode: no exception), and the object still works once entered."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    with capture_spans("all", provider=provider) as captured:
        unentered = at.managed_span("generation", "later")
        at.end_span(unentered)  # type: ignore[arg-type]
        at.end_span(unentered, ValueError("boom"))  # type: ignore[arg-type]
        with unentered:
            pass
    assert not caplog.records
    assert [s.name for s in captured.spans] == ["later"]
    assert captured.spans[0].status.status_code.name == "UNSET"


def test_failed_detach_logged_per_group(lenient: None, caplog: pytest.LogCaptureFixture) -> None:
    """A block exited in another thread is logged for each group, not once per process."""
    caplog.set_level(logging.WARNING, logger="asynctrace")

    def leak(group: str) -> None:
        opened = at.managed_span(group, f"{group}.leaked")
        opened.__enter__()
        _in_threads(
            1,
            lambda _: opened.__exit__(None, None, None),
            contextvars.copy_context(),
        )

    with capture_spans("all", provider="fast"):
        for group in ("generation", "reward", "generation"):
            contextvars.copy_context().run(leak, group)  # the leak stays in the copy
    detaches = [r for r in caplog.records if "'detach'" in r.getMessage()]
    assert len(detaches) == 2
    assert any("'generation'" in r.getMessage() for r in detaches)
    assert any("'reward'" in r.getMessage() for r in detaches)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_end_span_ends_an_object_entered_by_hand(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A managed_span() object entered without a ``with`` is ended by end_span on every
    provider (the exception recorded), not left open until shutdown truncates it; its
    own exit afterwards ends nothing more."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    ended_in_block: list[str] = []

    def by_hand() -> None:  # in a copy of the context: nothing left current after it
        before = trace.get_current_span()
        plain = at.managed_span("generation", "by_hand")
        plain.__enter__()
        at.end_span(plain)  # type: ignore[arg-type]
        failed = at.managed_span("generation", "by_hand_failed")
        failed.__enter__()
        at.end_span(failed, ValueError("boom"))  # type: ignore[arg-type]
        ended_in_block.extend(sorted(s.name for s in captured.spans))
        assert trace.get_current_span() is before  # detached as its exit detaches it
        failed.__exit__(None, None, None)
        at.end_span(failed)  # type: ignore[arg-type]

    with capture_spans("all", provider=provider) as captured:
        contextvars.copy_context().run(by_hand)
    assert ended_in_block == ["by_hand", "by_hand_failed"]
    spans = {s.name: s for s in captured.spans}
    assert len(captured.spans) == 2
    assert not any(s.attributes.get("asynctrace.truncated") for s in captured.spans)
    assert spans["by_hand"].status.status_code.name == "UNSET"
    assert spans["by_hand_failed"].status.status_code.name == "ERROR"
    assert not caplog.records


@pytest.mark.parametrize("provider", PROVIDERS)
def test_end_span_ends_an_object_entered_by_hand_from_another_thread(provider: str) -> None:
    """Ended in another thread (another context): the span ends, nothing raised (strict
    mode), the entering context keeps what it had."""

    def elsewhere() -> None:  # in a copy of the context: the span stays current there only
        opened = at.managed_span("generation", "ended_elsewhere")
        opened.__enter__()
        _in_threads(1, lambda _: at.end_span(opened), contextvars.copy_context())  # type: ignore[arg-type]
        ended_in_block.extend(s.name for s in captured.spans)

    ended_in_block: list[str] = []
    with capture_spans("all", provider=provider) as captured:
        contextvars.copy_context().run(elsewhere)
    assert ended_in_block == ["ended_elsewhere"]
    assert not captured.spans[0].attributes.get("asynctrace.truncated")


def test_end_span_on_what_is_no_span_is_logged_once(
    lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Anything that is neither a span nor a managed_span() object is a mistake: logged
    once for its type, whether an exception is given or not."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    with capture_spans("all", provider="sdk"):
        for _ in range(3):
            at.end_span(object())  # type: ignore[arg-type]
            at.end_span(object(), ValueError("boom"))  # type: ignore[arg-type]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "'end', 'object'" in messages[0]
