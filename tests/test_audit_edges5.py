"""The unregistered-group audit: every helper audits the group it was asked for, and
no report is lost to a loop that stops before running it."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import asynctrace as at
from asynctrace import _group_audit, _state
from asynctrace._errors import ConfigurationError, set_strict

NOT_REGISTERED = "no library registered"


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An audit window that closes after 50 misses, and telemetry off afterwards."""
    monkeypatch.setattr(_group_audit, "AUDIT_CHECKS", 50)
    _group_audit.reset_window()
    try:
        yield
    finally:
        at.disable_telemetry()
        _group_audit.reset_window()


def _reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if NOT_REGISTERED in r.getMessage()]


def test_a_report_left_to_a_stopped_loop_is_told_when_telemetry_is_disabled(
    small_window: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The span call that closes the window on a loop leaves the report to the loop; a loop
    stopped in that same step never runs it, and ``disable_telemetry`` tells it instead."""
    at.enable_telemetry(TracerProvider(), span_groups="all")
    loop = asyncio.new_event_loop()

    async def step() -> None:
        try:
            for _ in range(200):
                with at.managed_span("edges5_typo_group", "x"):
                    pass
                if _state.GATE.audit is None:
                    break
        finally:
            loop.stop()  # a signal handler or a framework stopping the loop in the same step

    caplog.set_level(logging.WARNING, logger="asynctrace")
    previous = set_strict(False)  # the misses are counted, not raised
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            task = loop.create_task(step())
            loop.run_forever()
            loop.close()
            assert task.done()
            assert _state.GATE.audit is None  # the window closed
            assert _reports(caplog) == []  # its report was the loop's, never run
            at.disable_telemetry()
    finally:
        set_strict(previous)
    assert len(_reports(caplog)) == 1
    assert "edges5_typo_group" in _reports(caplog)[0]
    assert _group_audit.unregistered_requests() == frozenset()


def _inside_per_prompt(call: Callable[[], Any]) -> None:
    def run() -> None:
        with at.per_prompt_scope():
            call()

    contextvars.copy_context().run(run)


@pytest.mark.parametrize(
    "helper",
    [
        pytest.param(lambda g: at.managed_span(g, "x"), id="managed_span"),
        pytest.param(lambda g: at.umbrella_span(g, "x"), id="umbrella_span"),
        pytest.param(lambda g: at.instant(g, "x"), id="instant"),
        pytest.param(lambda g: at.trace_fn(g)(lambda: None), id="trace_fn"),
    ],
)
def test_every_helper_audits_its_group_inside_a_per_prompt_scope(
    small_window: None, helper: Callable[[str], Any], request: pytest.FixtureRequest
) -> None:
    """Under strict mode a group no library registered raises wherever it is asked for
    while it is off, inside a per-prompt scope (``per_prompt`` off) too, for every helper."""
    at.enable_telemetry(TracerProvider(), span_groups="default")
    assert "per_prompt" not in at.enabled_span_groups()
    name = f"edges5_typo_in_scope_{request.node.callspec.id}"  # a name is told once

    def call() -> None:
        made = helper(name)
        if hasattr(made, "__enter__"):
            with made:
                pass
        elif callable(made):
            made()

    previous = set_strict(True)
    try:
        with pytest.raises(ConfigurationError, match=name):
            _inside_per_prompt(call)
    finally:
        set_strict(previous)
