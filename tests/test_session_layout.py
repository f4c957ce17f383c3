"""session_tracer.output_dir and session_tracer.ids: where records go and what ids they carry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import asynctrace as at


def test_output_dir_relative_absolute_and_run_id(tmp_path: Path) -> None:
    """A relative session directory is under output_dir ({run_id} substituted); absolute stays."""
    telemetry = at.configure(
        {
            "output_dir": str(tmp_path / "run"),
            "run_id": "r7",
            "session_tracer": {"enabled": True, "output_dir": "sessions-{run_id}"},
        }
    )
    with at.task_scope(1), at.session_scope():
        at.trace_session_event("finalized", status="accepted")
    telemetry.shutdown()
    assert (tmp_path / "run" / "sessions-r7" / "sessions-r0.jsonl").is_file()
    elsewhere = tmp_path / "elsewhere"
    telemetry = at.configure(
        at.TelemetryConfig(
            output_dir=str(tmp_path / "run2"),
            session_tracer=at.SessionTracerConfig(enabled=True, output_dir=str(elsewhere)),
        )
    )
    telemetry.shutdown()
    assert telemetry.sessions is not None
    assert Path(telemetry.sessions.path).parent == elsewhere


def test_sequential_ids_are_numeric_and_distinct(tmp_path: Path) -> None:
    """ids: sequential gives per-process counts as strings of digits; unique is the default."""
    telemetry = at.configure(
        {"output_dir": str(tmp_path), "session_tracer": {"enabled": True, "ids": "sequential"}}
    )
    ids = []
    with at.task_scope(3):
        for _ in range(3):
            with at.session_scope() as session_id:
                ids.append(session_id)
        at.trace_session_event("finalized", status="accepted")
    telemetry.shutdown()
    assert all(i.isdigit() for i in ids)
    assert len(set(ids)) == 3
    assert telemetry.sessions is not None
    records = [json.loads(x) for x in Path(telemetry.sessions.path).read_text().splitlines()]
    assert sorted(r["session_id"] for r in records) == sorted(ids)
    assert at.SessionTracerConfig().ids == "unique"
    with pytest.raises(at.ConfigurationError, match=r"session_tracer.ids: 'random'"):
        at.configure({"session_tracer": {"ids": "random"}})
