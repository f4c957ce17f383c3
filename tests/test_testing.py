"""asynctrace.testing: capture_spans and the captured_spans fixture."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from asynctrace import enabled_span_groups, managed_span, resolve_span_groups
from asynctrace.testing import CapturedSpans, capture_spans, span_tree


def test_capture_restores_previous_state() -> None:
    """Nested captures restore the outer state on exit, even after an error."""
    global_provider = trace.get_tracer_provider()
    assert enabled_span_groups() == frozenset()
    with capture_spans("default") as outer:
        assert enabled_span_groups() == resolve_span_groups("default")
        with pytest.raises(RuntimeError), capture_spans("all"):
            raise RuntimeError
        assert enabled_span_groups() == resolve_span_groups("default")
        with managed_span("job", "outer-job"):
            pass
    assert enabled_span_groups() == frozenset()
    assert outer.names() == ["outer-job"]
    assert trace.get_tracer_provider() is global_provider


def test_helpers() -> None:
    """spans is in end order; by_name filters; clear empties; span_tree groups by parent."""
    with capture_spans() as captured:
        with managed_span("job", "a"), managed_span("reward", "b"):
            pass
        assert captured.names() == ["b", "a"]
        assert all(isinstance(s, ReadableSpan) for s in captured)
        assert len(captured) == 2
        assert captured[0].name == "b"
        assert [s.name for s in captured.by_name("a")] == ["a"]
        tree = span_tree(captured.spans)
        assert [s.name for s in tree[None]] == ["a"]
        captured.clear()
        assert captured.spans == []


def test_fixture_from_plugin(captured_spans: CapturedSpans) -> None:
    """The pytest11 plugin provides `captured_spans` with every group on."""
    assert enabled_span_groups() == resolve_span_groups("all")
    with managed_span("per_prompt", "p"):
        pass
    assert captured_spans.names() == ["p"]


def test_restore_recomputes_against_new_registrations() -> None:
    """A group registered inside a capture is on after restoring a spec that covers it."""
    from opentelemetry.sdk.trace import TracerProvider

    from asynctrace import Bucket, enable_telemetry, register_span_groups

    enable_telemetry(TracerProvider(), span_groups="per_step")
    with capture_spans("default"):
        register_span_groups("late_ns", {"late_group_for_restore": Bucket.OVERHEAD})
    assert "late_group_for_restore" in enabled_span_groups()
