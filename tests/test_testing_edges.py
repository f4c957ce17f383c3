"""capture_spans that overlap without nesting: the state from before comes back, whatever
order they exit in."""

from __future__ import annotations

import asyncio
import itertools
import threading
from contextlib import AbstractContextManager

import pytest

import asynctrace as at
from asynctrace._state import GATE, snapshot
from asynctrace.testing import CapturedSpans, capture_spans


def test_tasks_whose_captures_overlap_leave_telemetry_off() -> None:
    """Task A's capture exits before task B's: afterwards telemetry is off, not A's provider."""
    out: dict[str, CapturedSpans] = {}

    async def main() -> None:
        a_in, b_in, a_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def a() -> None:
            with capture_spans("all") as captured:
                a_in.set()
                await b_in.wait()
                out["a"] = captured
            a_out.set()

        async def b() -> None:
            await a_in.wait()
            with capture_spans("all") as captured:
                b_in.set()
                await a_out.wait()
                out["b"] = captured

        await asyncio.gather(a(), b())

    asyncio.run(main())
    assert GATE.provider is None
    assert at.enabled_span_groups() == frozenset()
    with at.managed_span("reward", "after"):
        pass
    assert out["a"].names() == []
    assert out["b"].names() == []


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_three_overlapping_captures_restore_in_any_exit_order(order: tuple[int, ...]) -> None:
    """Entered 0, 1, 2 and exited in *order*: the state before the first is back at the end."""
    before = snapshot()
    captures: list[AbstractContextManager[CapturedSpans]] = [capture_spans() for _ in range(3)]
    providers = [cm.__enter__().provider for cm in captures]
    for done, index in enumerate(order, 1):
        captures[index].__exit__(None, None, None)
        if done < 3:  # someone still open holds the gate: a live capture's provider
            open_ = [providers[i] for i in range(3) if i not in order[:done]]
            assert GATE.provider in open_
    assert snapshot() == before


def test_overlapping_captures_give_running_telemetry_back() -> None:
    """Over a configured telemetry, non-nested captures end with its provider on the gate."""
    telemetry = at.configure({"enabled": True, "exporters": ["memory"], "span_groups": "all"})
    try:
        first, second = capture_spans(), capture_spans()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        second.__exit__(None, None, None)
        assert GATE.provider is telemetry.provider
        with at.managed_span("reward", "after"):
            pass
        assert at.flush(5)
        assert telemetry.memory_exporter is not None
        assert [s.name for s in telemetry.memory_exporter.get_finished_spans()] == ["after"]
    finally:
        telemetry.shutdown(5)
    assert at.enabled_span_groups() == frozenset()


def test_overlapping_captures_do_not_revive_telemetry_shut_down_meanwhile() -> None:
    """Telemetry shut down while overlapping captures ran stays off once both exit."""
    telemetry = at.configure({"enabled": True, "exporters": ["memory"], "span_groups": "all"})
    first, second = capture_spans(), capture_spans()
    first.__enter__()
    second.__enter__()
    assert telemetry.shutdown(5)
    first.__exit__(None, None, None)
    second.__exit__(None, None, None)
    assert GATE.provider is None
    assert at.enabled_span_groups() == frozenset()


def test_threads_whose_captures_overlap_leave_telemetry_off() -> None:
    """Two threads, each in a capture, the first entered exiting first: telemetry is off after."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def a() -> None:
        with capture_spans("all"):
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b() -> None:
        a_in.wait(5)
        with capture_spans("all"):
            b_in.set()
            a_out.wait(5)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert a_out.is_set()
    assert GATE.provider is None
    assert at.enabled_span_groups() == frozenset()
