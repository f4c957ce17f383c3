"""Spans requested for a group nobody registered are reported, not silently lost."""

from __future__ import annotations

import logging
import warnings

import pytest
from opentelemetry.sdk.trace import TracerProvider

import asynctrace as at
from asynctrace import _group_audit, _state
from asynctrace._errors import set_strict


@pytest.fixture
def gate() -> object:
    """An enabled gate (SDK provider, every group), restored afterwards."""
    saved = _state.snapshot()
    at.enable_telemetry(TracerProvider(), span_groups="all")
    yield
    _state.restore(saved)


def test_strict_mode_raises_for_an_unregistered_group(gate: object) -> None:
    """Under strict mode the first span of a never-registered group raises, naming it."""
    previous = set_strict(True)
    try:
        with (
            pytest.raises(at.ConfigurationError, match="'optimzer', which no library registered"),
            at.managed_span("optimzer", "train.step"),
        ):
            pass
    finally:
        set_strict(previous)
    assert "optimzer" in _group_audit.unregistered_requests()


def test_registered_but_disabled_group_is_not_reported(gate: object) -> None:
    """A registered group that is simply off is the normal disabled path: nothing reported."""
    previous = set_strict(True)
    try:
        at.set_span_groups("job")
        with at.managed_span("policy_update", "train.step"):
            pass
        at.instant("rollout", "marker")
    finally:
        set_strict(previous)
    assert "policy_update" not in _group_audit.unregistered_requests()


def test_one_warning_once_the_audit_ends(
    gate: object, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside strict mode: one warning per name when the audit ends, then a plain frozenset."""
    previous = set_strict(False)
    monkeypatch.setattr(_group_audit, "AUDIT_CHECKS", 50)
    _group_audit.reset_window()
    try:
        at.set_span_groups("all")  # a fresh audit with the small budget
        assert _state.GATE.audit is not None
        with (
            warnings.catch_warnings(record=True) as caught,
            caplog.at_level(logging.WARNING, "asynctrace"),
        ):
            warnings.simplefilter("always")
            for _ in range(200):
                with at.managed_span("forwrd_backward", "x"):
                    pass
        messages = [str(w.message) for w in caught if "forwrd_backward" in str(w.message)]
        assert len(messages) == 1
        assert "which no library registered" in messages[0]
        assert sum("forwrd_backward" in r.getMessage() for r in caplog.records) == 1
        assert _state.GATE.audit is None
    finally:
        set_strict(previous)


def test_late_registration_is_not_reported(gate: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group registered after its first request, before the audit ends, is not warned about."""
    previous = set_strict(False)
    monkeypatch.setattr(_group_audit, "AUDIT_CHECKS", 1000)
    _group_audit.reset_window()
    try:
        at.set_span_groups("all")
        with at.managed_span("late_audit_group", "x"):
            pass
        at.register_span_groups("test_group_audit", {"late_audit_group": at.Bucket.OVERHEAD})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(1100):
                with at.managed_span("late_audit_group", "x"):
                    pass
        # A warning about another test's group lists this one among the known groups.
        named = "span group 'late_audit_group', which no library registered"
        assert not [w for w in caught if named in str(w.message)]
        assert "late_audit_group" not in _group_audit.unregistered_requests()
    finally:
        set_strict(previous)


def test_reconfiguring_does_not_restart_the_audit(
    gate: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit window is the process's: setting the groups again carries the budget over,
    and once it is spent no new gate is audited."""
    previous = set_strict(False)
    monkeypatch.setattr(_group_audit, "AUDIT_CHECKS", 100)
    _group_audit.reset_window()
    try:
        at.set_span_groups("job")
        for _ in range(60):  # misses: the audited checks
            with at.managed_span("generation", "x"):
                pass
        at.set_span_groups("per_step")  # a reconfiguration: 40 checks or so left, not 100
        assert _state.GATE.audit is not None
        for _ in range(60):
            with at.managed_span("per_prompt", "x"):
                pass
        assert _state.GATE.audit is None
        at.set_span_groups("all")
        assert _state.GATE.audit is None  # the window stays over
    finally:
        set_strict(previous)
        _group_audit.reset_window()


def test_spans_of_enabled_groups_never_reach_the_audit(
    gate: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorded span is a plain set lookup while the audit runs: only names not found
    enabled spend its budget (a span asked for under a group that is off, or unknown)."""
    previous = set_strict(False)
    monkeypatch.setattr(_group_audit, "AUDIT_CHECKS", 1000)
    _group_audit.reset_window()
    try:
        at.set_span_groups("job")
        audit = _state.GATE.audit
        assert audit is not None
        before = audit._checks

        @at.trace_fn("job")
        def traced() -> None:
            pass

        for _ in range(50):
            with at.managed_span("job", "x"), at.umbrella_span("job", "y"):
                traced()
            at.instant("job", "z")
            assert at.is_span_group_enabled("job")
        assert audit._checks == before
        with at.managed_span("generation", "off"):
            pass
        assert not at.is_span_group_enabled("generation")
        assert audit._checks == before - 2
    finally:
        set_strict(previous)
        _group_audit.reset_window()
