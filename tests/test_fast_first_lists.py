"""Fast spans: two threads adding a span's first event, or its first link, at once.

The span makes its event and link lists on first use. Each test stops one
thread right where it makes the list (a trace function of that thread alone,
on the line that makes it) and lets the other thread add its own item
meanwhile; both items must be on the span afterwards. Making the list under
the span's counts lock is what keeps the second thread's item: without it,
the first thread's new list replaced the one the second thread had filled.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanContext

import asynctrace as at

_PAUSE_S = 0.3  # how long the stopped thread waits for the other (it may wait on a lock)


def _both_kept(method: str, add: Callable[[Any, int], None], count: Callable[[Any], int]) -> None:
    telemetry = at.configure(
        {"enabled": True, "provider": "fast", "exporters": [], "span_groups": "all"}
    )
    try:
        span = trace.get_tracer("first-lists").start_span("shared")
        other_done = threading.Event()
        other_adding = threading.Event()
        stopped = threading.Event()

        def stop_at_new_list(frame: FrameType, event: str, arg: object) -> Any:
            if frame.f_code.co_name != method:
                return None
            if event == "line" and not stopped.is_set():
                line = _source_line(frame)
                if line.rstrip().endswith("= []"):  # the line that makes the list
                    stopped.set()
                    other_adding.wait(5.0)  # however loaded the host: the other one is in
                    other_done.wait(_PAUSE_S)  # and adds meanwhile (or waits on the lock)
            return stop_at_new_list

        def first() -> None:
            sys.settrace(stop_at_new_list)
            try:
                add(span, 1)
            finally:
                sys.settrace(None)

        def second() -> None:
            stopped.wait(5.0)
            other_adding.set()
            add(span, 2)
            other_done.set()

        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10.0)
        assert stopped.is_set(), f"{method} made no list: the test stopped nowhere"
        assert count(span) == 2
        span.end()
    finally:
        telemetry.shutdown(timeout_s=5.0)


def _source_line(frame: FrameType) -> str:
    import linecache

    return linecache.getline(frame.f_code.co_filename, frame.f_lineno)


def test_two_threads_first_events_are_both_kept() -> None:
    _both_kept(
        "_add",
        lambda span, n: span.add_event(f"e{n}"),
        lambda span: len(span._events or ()),
    )


def test_two_threads_first_links_are_both_kept() -> None:
    _both_kept(
        "add_link",
        lambda span, n: span.add_link(SpanContext(1, n, False)),
        lambda span: len(getattr(span, "_links", None) or ()),
    )
