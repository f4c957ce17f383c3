"""Edges of the group audit, ContextThread and dispatch_scope: bounded reports, every run
entered, and a dispatch that carries no iteration."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import asynctrace as at
from asynctrace import _group_audit, _state
from asynctrace._errors import set_strict
from asynctrace.testing import capture_spans

REPORTED = "no library registered"


def _audit_open() -> bool:
    return _state.GATE.audit is not None


class _Records(logging.Handler):
    """The audit's reports on the ``asynctrace`` logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if REPORTED in message:
            self.messages.append(message)


@pytest.fixture
def audit(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Records]:
    """A fresh audit window of 2,000 checks on an enabled gate, lenient; its reports."""
    saved = _state.snapshot()
    previous = set_strict(False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _group_audit.report_unregistered()  # names other tests left: told now, not below
    monkeypatch.setattr(_group_audit, "AUDIT_CHECKS", 2000)
    _group_audit.reset_window()
    records = _Records()
    logger = logging.getLogger("asynctrace")
    logger.addHandler(records)
    try:
        at.enable_telemetry(TracerProvider(), span_groups="all")
        assert _audit_open()
        yield records
    finally:
        logger.removeHandler(records)
        set_strict(previous)
        _group_audit.reset_window()
        _state.restore(saved)


def test_a_flood_of_unregistered_names_is_one_bounded_report(audit: _Records) -> None:
    """Group names built from data (thousands, long) are kept bounded while the window is
    open, and its end writes one summary naming the misspelt group, not one per name."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with at.managed_span("edges5_optimzer", "step"):  # the typo the audit is for
            pass
        for i in range(1500):
            with at.managed_span(f"edges5_prompt_{i}:" + "x" * 1000, "rl.generate"):
                pass
        assert _audit_open()  # the window is still open
        held = _group_audit.unregistered_requests()
        assert "edges5_optimzer" in held
        assert len(held) <= _group_audit.KEPT_NAMES
        assert all(len(name) <= _group_audit.NAME_CHARS + 1 for name in held)
        assert len(_group_audit._others) <= _group_audit.COUNTED_NAMES
        for i in range(1000):  # the window closes among these
            with at.managed_span(f"edges5_more_{i}", "rl.generate"):
                pass
    assert not _audit_open()
    assert len(audit.messages) == 1
    told = [str(w.message) for w in caught if REPORTED in str(w.message)]
    assert told == audit.messages
    message = told[0]
    assert "'edges5_optimzer'" in message
    assert len(message) < 20_000
    assert "2000" in message or "more than" in message  # the names not listed are counted


def test_the_report_runs_after_the_span_call_on_an_event_loop(audit: _Records) -> None:
    """On an asyncio loop, the span call that closes the window returns without writing the
    report; the loop writes it right after, once."""
    seen: list[int] = []

    async def main() -> None:
        for _ in range(3000):
            with at.managed_span("edges5_forwrd", "step"):
                pass
            seen.append(len(audit.messages))
            if not _audit_open():
                break
        assert not _audit_open()  # this step's call closed the window
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        asyncio.run(main())
    assert seen[-1] == 0  # not written inside the call, nor before the step ended
    assert len(audit.messages) == 1
    assert "'edges5_forwrd'" in audit.messages[0]


class _Logged:
    """A class-based method decorator (a descriptor, as wrapt and logging helpers make)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __get__(self, obj: object, typ: type | None = None) -> Callable[..., Any]:
        return functools.partial(self.fn, obj)


def test_context_thread_enters_the_context_whatever_run_is() -> None:
    """A run() wrapped by a class-based decorator, a subclass whose __init__ calls
    threading.Thread.__init__ directly, and a run set on the instance all run in the
    context captured when the thread was made."""
    out: dict[str, object] = {}

    class Decorated(at.ContextThread):
        @_Logged
        def run(self) -> None:
            out["decorated"] = at.current_iteration()

    class OldStyle(at.ContextThread):
        def __init__(self) -> None:
            threading.Thread.__init__(self)

        def run(self) -> None:
            out["old-style"] = at.current_iteration()

    class Chained(at.ContextThread):
        def run(self) -> None:
            with at.task_scope(5):
                super().run()

    with at.iteration_scope(42):
        threads: list[threading.Thread] = [Decorated(), OldStyle()]
        patched = at.ContextThread()
        patched.run = lambda: out.__setitem__("instance", at.current_iteration())  # type: ignore[method-assign]
        chained = Chained(target=lambda: out.__setitem__("chained", at.current_task_id()))
        threads += [patched, chained]
    assert at.current_iteration() is None
    for thread in threads:
        thread.start()
        thread.join()
    assert out == {"decorated": 42, "old-style": 42, "instance": 42, "chained": 5}
    assert all("run" not in vars(t) or t is patched for t in threads)


def test_dispatch_scope_does_not_carry_an_enclosing_iteration() -> None:
    """A pump started inside a step's iteration_scope: its dispatches carry the target
    step, not that iteration; the iteration is back after the dispatch, and a scope
    entered inside it stamps as usual."""

    async def main() -> None:
        with at.iteration_scope(1):
            async with at.dispatch_scope(attempt=0, target_step=7):
                assert at.current_iteration() is None
                with at.managed_span("generation", "edges5.generate"):
                    pass
                with at.iteration_scope(3), at.managed_span("generation", "edges5.inner"):
                    pass
            assert at.current_iteration() == 1
            with at.managed_span("generation", "edges5.after"):
                pass

    with capture_spans("all") as captured:
        asyncio.run(main())
    dispatch = captured.by_name("rl.rollout.dispatch")[0]
    assert dict(dispatch.attributes or {}) == {"rl.rollout.attempt": 0, "rl.target_step": 7}
    assert "rl.iteration" not in dict(captured.by_name("edges5.generate")[0].attributes or {})
    assert dict(captured.by_name("edges5.inner")[0].attributes or {})["rl.iteration"] == 3
    assert dict(captured.by_name("edges5.after")[0].attributes or {})["rl.iteration"] == 1


def test_dispatch_scope_exited_out_of_order_keeps_no_iteration() -> None:
    """Scopes exited out of order around a dispatch under an iteration: inside the
    dispatch the iteration stays cleared, and after it the enclosing one is back."""
    with at.iteration_scope(1):
        dispatch = at.dispatch_scope(attempt=0)
        dispatch.__enter__()
        inner = at.iteration_scope(5)
        inner.__enter__()
        bucket = at.bucket_scope(at.Bucket.OVERHEAD)
        bucket.__enter__()
        inner.__exit__(None, None, None)  # out of order: the bucket scope is still open
        assert at.current_iteration() is None
        assert at.in_per_prompt_scope()
        bucket.__exit__(None, None, None)
        assert at.current_iteration() is None
        dispatch.__exit__(None, None, None)
        assert at.current_iteration() == 1
        assert not at.in_per_prompt_scope()
        # the dispatch left first, its inner iteration still open
        dispatch = at.dispatch_scope(attempt=1)
        dispatch.__enter__()
        inner = at.iteration_scope(6)
        inner.__enter__()
        dispatch.__exit__(None, None, None)
        assert at.current_iteration() == 6
        assert not at.in_per_prompt_scope()
        inner.__exit__(None, None, None)
        assert at.current_iteration() == 1
    assert at.current_iteration() is None
