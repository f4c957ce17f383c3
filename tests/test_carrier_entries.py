"""Sent baggage: an entry that cannot be encoded is left out alone, the carrier goes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from opentelemetry import baggage
from opentelemetry import context as otel_context

import asynctrace as at
from asynctrace import _baggage_out
from asynctrace.testing import capture_spans


class _NoText:
    """A baggage value whose ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text for S3CRET")


@contextmanager
def _entries(entries: dict[str, object]) -> Iterator[None]:
    """Run a block with *entries* in the OpenTelemetry baggage."""
    ctx = otel_context.get_current()
    for key, value in entries.items():
        ctx = baggage.set_baggage(key, value, ctx)
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


BAD_ENTRIES = {
    "str() raises": {"bad": _NoText()},
    "lone surrogate in a value": {"bad": "S3CRET\ud800"},
    "lone surrogate in a key": {"bad\udcff": "S3CRET"},
}


@pytest.mark.parametrize("bad", BAD_ENTRIES.values(), ids=list(BAD_ENTRIES))
def test_an_entry_that_cannot_be_encoded_is_left_out_alone(
    bad: dict[str, object], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The carrier keeps its ``traceparent``, the scopes and the other entries; the one
    left out is counted in ``baggage_entries_not_sent`` and logged once, without its value;
    the far side reads what was sent."""
    monkeypatch.setattr(_baggage_out, "_not_sent_logged", False)
    before = at.carrier_stats()["baggage_entries_not_sent"]
    with capture_spans("all", propagate_scopes=True):
        with at.iteration_scope(7), _entries({"first": "1", **bad, "last": "a b"}):
            with caplog.at_level(logging.WARNING, logger="asynctrace"):
                with at.managed_span("reward", "score") as span:
                    carrier = at.current_trace_carrier()
                    env = at.inject_env({"PATH": "/usr/bin"})
        trace_id = span.get_span_context().trace_id
        span_id = span.get_span_context().span_id
        assert carrier["traceparent"] == f"00-{trace_id:032x}-{span_id:016x}-01"
        assert env["TRACEPARENT"] == carrier["traceparent"]
        assert env["BAGGAGE"] == carrier["baggage"]
        assert at.carrier_stats()["baggage_entries_not_sent"] == before + 1
        with at.remote_trace_context(carrier):
            assert dict(baggage.get_all()) == {"first": "1", "last": "a b"}
            assert at.current_iteration() == 7
    (record,) = [r for r in caplog.records if "not sent in baggage" in r.getMessage()]
    assert "cannot be encoded" in record.getMessage()
    assert "S3CRET" not in record.getMessage()


@pytest.mark.slow
def test_a_subprocess_continues_the_trace_past_an_entry_that_cannot_be_encoded() -> None:
    """inject_env with a baggage value whose ``str()`` raises: the child process still
    gets ``TRACEPARENT`` and ``BAGGAGE``, and its span joins the caller's trace and scopes."""
    child = Path(__file__).parent / "_scopes_child.py"
    with capture_spans("all", propagate_scopes=True):
        with at.iteration_scope(12), _entries({"bad": _NoText()}):
            with at.managed_span("reward", "parent") as parent:
                env = at.inject_env()
    out = subprocess.run(
        [sys.executable, str(child), "on"], env=env, capture_output=True, text=True, check=True
    )
    (span,) = json.loads(out.stdout)["spans"]
    assert span["trace_id"] == parent.get_span_context().trace_id
    assert span["rl.iteration"] == 12


class _Unlisted(dict[str, object]):
    """Baggage whose entries cannot be listed."""

    def items(self) -> object:  # type: ignore[override]
        raise RuntimeError("entries unavailable")


@pytest.mark.usefixtures("lenient")
def test_baggage_that_cannot_be_read_costs_the_baggage_only() -> None:
    """Should reading the baggage fail as a whole, the carrier still holds ``traceparent``
    (the failure logged once, as every instrumentation failure)."""
    key = getattr(baggage, "_BAGGAGE_KEY", None)
    if key is None:
        pytest.skip("this OpenTelemetry keeps baggage under another key")
    with capture_spans("all", propagate_scopes=True):
        token = otel_context.attach(otel_context.set_value(key, _Unlisted(a="1")))
        try:
            with at.managed_span("reward", "score") as span:
                carrier = at.current_trace_carrier()
        finally:
            otel_context.detach(token)
    assert carrier["traceparent"].split("-")[2] == f"{span.get_span_context().span_id:016x}"
