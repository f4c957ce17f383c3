"""asynctrace.testing: capture_spans and the captured_spans fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from asynctrace import (
    configure,
    enabled_span_groups,
    is_span_group_enabled,
    managed_span,
    resolve_span_groups,
)
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


def _chrome_names(directory: Path) -> list[str]:
    """Names of the complete events in the chrome trace files under *directory*."""
    names = []
    for path in sorted(directory.rglob("traces-*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("ph") == "X":
                names.append(event["name"])
    return names


def test_capture_keeps_a_configuration_made_inside(tmp_path: Path) -> None:
    """configure() inside the block: after it, spans go to the new configuration, and
    its shutdown turns the gate off (the shut-down previous one is not put back)."""
    first = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path / "a"),
        }
    )
    try:
        with capture_spans() as captured:
            second = configure(
                {
                    "enabled": True,
                    "span_groups": "default",
                    "exporters": ["chrome"],
                    "output_dir": str(tmp_path / "b"),
                }
            )
            with managed_span("job", "inside"):
                pass
        assert captured.names() == []
        assert enabled_span_groups() == resolve_span_groups("default")
        with managed_span("job", "after"):
            pass
        assert second.shutdown(5)
        assert enabled_span_groups() == frozenset()
        with managed_span("job", "after-shutdown"):
            pass
    finally:
        first.shutdown(5)
    assert _chrome_names(tmp_path / "a") == []
    assert _chrome_names(tmp_path / "b") == ["inside", "after"]


def test_capture_does_not_revive_telemetry_shut_down_inside(tmp_path: Path) -> None:
    """The telemetry running before the block and shut down inside it stays off."""
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
        }
    )
    try:
        with capture_spans() as captured:
            with managed_span("job", "captured"):
                pass
            assert telemetry.shutdown(5)
        assert captured.names() == ["captured"]
        assert enabled_span_groups() == frozenset()
        assert not is_span_group_enabled("job")
        with managed_span("job", "after"):
            pass
    finally:
        telemetry.shutdown(5)
    assert _chrome_names(tmp_path) == []


def test_capture_restores_running_telemetry(tmp_path: Path) -> None:
    """Telemetry left running through the block gets the gate back."""
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
        }
    )
    try:
        with capture_spans() as captured:
            with managed_span("job", "captured"):
                pass
        with managed_span("job", "after"):
            pass
    finally:
        assert telemetry.shutdown(5)
    assert captured.names() == ["captured"]
    assert enabled_span_groups() == frozenset()
    assert _chrome_names(tmp_path) == ["after"]
