"""Sessions at their edges: an empty session id on a phase event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asynctrace as at


def _records(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _configure(tmp_path: Path) -> Any:
    return at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "output_dir": str(tmp_path),
            "session_tracer": {"enabled": True},
        }
    )


def test_an_empty_session_id_on_a_phase_event_names_no_session(tmp_path: Path) -> None:
    """``session_id=""`` is a session id given (none has it), as it is for "finalized": the
    event is dropped and counted, not applied to the current session."""
    telemetry = _configure(tmp_path)
    try:
        with at.task_scope(1), at.session_scope():
            before = telemetry.sessions.dropped_events
            at.trace_session_event("generate_start", session_id="")
            at.trace_session_event("generate_end", session_id="")
            assert telemetry.sessions.dropped_events == before + 2
            at.trace_session_event("finalized", status="accepted")
        telemetry.flush()
        (record,) = _records(telemetry.sessions.path)
        assert record["phases"] == {}
    finally:
        telemetry.shutdown()
