"""asynctrace_contrib.areal against AReaL 1.0.4 at more edges: numpy steps and ranks, tasks
that never get a session, a status of ``"pending"``, a phase still open when its session is
finalized, an application's own asynctrace configuration, ``role=""``; and the profiler's
boolean keys given as strings."""

from __future__ import annotations

import getpass
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from _areal_loader import PerfTracerConfig, SessionTracerConfig
from asynctrace_contrib import areal as ours

import asynctrace as at

np = pytest.importorskip("numpy")


pytestmark = pytest.mark.usefixtures("areal_reset")


def config(root: Path, *, enabled: bool = True, **extra: Any) -> PerfTracerConfig:
    return PerfTracerConfig(
        experiment_name="e",
        trial_name="t",
        fileroot=str(root),
        enabled=enabled,
        session_tracer=SessionTracerConfig(enabled=True, flush_threshold=1),
        **extra,
    )


def trial(root: Path) -> Path:
    return root / "logs" / getpass.getuser() / "e" / "t"


def records(root: Path) -> list[dict[str, Any]]:
    path = trial(root) / "session_tracer" / "sessions-r0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spans(root: Path) -> dict[str, dict[str, Any]]:
    """The args of each complete event in the trace file under *root*, by span name."""
    found = {}
    for path in root.rglob("traces-r0.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("ph") == "X":
                found[event["name"]] = event["args"]
    return found


def test_a_numpy_global_step_is_the_step_it_stands_for(tmp_path: Path) -> None:
    """``global_step=np.int64(2)`` stamps rl.iteration 2 and is profiled when 2 is in
    profile_steps, its own or the enclosing scope's, as a Python int is (and as AReaL does)."""
    pytest.importorskip("viztracer")
    ours.configure(
        {"enabled": True, "fileroot": str(tmp_path), "profile_steps": [2, 3]},
        rank=0,
        telemetry={"profiler": {"steps": [2, 3], "backend": "python"}},
    )
    with ours.trace_scope("own", args={"global_step": np.int64(2)}, enable_profiler=True):
        pass
    with ours.trace_scope("step", args={"global_step": np.int32(3)}):
        with ours.trace_scope("inner", category="compute", enable_profiler=True):
            pass
    with ours.trace_scope("flag", args={"global_step": True}):
        pass
    ours.save(force=True)
    ours.reset()
    found = spans(tmp_path)
    assert found["own"]["rl.iteration"] == 2
    assert found["own"]["asynctrace.profile.file"] == "profile-r0-step2.python.json"
    assert found["step"]["rl.iteration"] == 3
    assert found["inner"]["rl.iteration"] == 3
    assert found["inner"]["asynctrace.profile.file"] == "profile-r0-step3.python.json"
    assert "rl.iteration" not in found["flag"]  # a bool is no step
    profiles = sorted(p.name for p in tmp_path.rglob("profile-*.json"))
    assert profiles == ["profile-r0-step2.python.json", "profile-r0-step3.python.json"]


def test_tasks_without_sessions_are_not_held(areal: Any, tmp_path: Path) -> None:
    """register_task for every submitted task, finalized by task id, with no session of its
    own (a workflow without @session_context): nothing stays in the task map, and
    get_session_ids answers as AReaL's does."""
    answers = {}
    for label, mod in (("areal", areal), ("ours", ours)):
        mod.configure(config(tmp_path / label), rank=0)
        tracer = mod.get_session_tracer()
        for task in range(3000):
            mod.register_task(task)
            mod.trace_session_event("mark_finalized", task_id=task, status="accepted")
        mod.register_task(5000)
        empty = tracer.get_session_ids(5000)
        session = mod.register_session(5000)
        listed = tracer.get_session_ids(5000)
        with pytest.raises(TypeError):
            mod.register_task([1])  # unhashable, as in AReaL
        answers[label] = (empty, listed == [session], tracer.get_session_ids(7))
        if label == "ours":
            assert set(tracer._tasks) == {5000}, len(tracer._tasks)
        mod.reset()
    assert answers["ours"] == answers["areal"] == ([], True, [])


def test_status_pending_keeps_the_session_pending(
    areal: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """mark_finalized(status="pending") leaves the session pending, as AReaL's does (it is
    written as pending at the end), not recorded as dropped, and no warning says otherwise."""
    statuses = {}
    for label, mod in (("areal", areal), ("ours", ours)):
        root = tmp_path / label
        mod.configure(config(root), rank=0)
        sid = mod.register_session(1)
        with caplog.at_level(logging.WARNING, logger="asynctrace_contrib.areal"):
            mod.trace_session_event("mark_finalized", session_id=sid, status="pending")
        still = mod.get_session_tracer().get_session_ids(1)
        mod.save(force=True)
        mod.reset()
        statuses[label] = ([r["status"] for r in records(root)], still == [sid])
    assert statuses["ours"] == statuses["areal"] == (["pending"], True)
    assert "pending" not in caplog.text


def test_a_phase_open_at_finalization_has_no_end(areal: Any, tmp_path: Path) -> None:
    """A session finalized while a phase is still open (its sample failed while another
    was generating) is written as AReaL writes it: end_ts null, no <phase>_s."""
    for label, mod in (("areal", areal), ("ours", ours)):
        root = tmp_path / label
        mod.configure(config(root), rank=0)
        sid = mod.register_session(1)
        mod.trace_session_event("mark_reward_start", session_id=sid)
        mod.trace_session_event("mark_reward_end", session_id=sid)
        mod.trace_session_event("mark_generate_start", session_id=sid)
        mod.trace_session_event("mark_finalized", session_id=sid, status="failed")
        mod.save(force=True)
        mod.reset()
        (record,) = records(root)
        assert record["status"] == "failed", label
        assert record["total_s"] >= 0, label
        assert [e["end_ts"] for e in record["phases"]["generate"]] == [None], (label, record)
        assert "generate_s" not in record, (label, record)
        assert record["reward_s"] >= 0, label


def test_replacing_the_applications_configuration_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """perf_tracer.configure over an asynctrace configuration the application started itself
    replaces it (one configuration per process) and says so, once; over a PerfTracer's own
    one (set_enabled) it does not."""
    app = at.configure(
        {"enabled": True, "exporters": ["chrome"], "output_dir": str(tmp_path / "app")}
    )
    with caplog.at_level(logging.WARNING, logger="asynctrace_contrib.areal"):
        tracer = ours.configure(config(tmp_path, enabled=False), rank=0)
        assert at.current_telemetry() is not app
        tracer.set_enabled(True)  # its own configuration: no warning about the application
    said = [r.getMessage() for r in caplog.records if "application started" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert str(tracer.trace_path.parent) in said[0]


def test_numpy_rank_and_empty_role_as_in_areal(areal: Any, tmp_path: Path) -> None:
    """rank=np.int64(1) and role="" are accepted as AReaL's configure accepts them: rank 1's
    files, no role subdirectory and the plain file names (AReaL then fails to write its
    records, whose rank is not JSON; asynctrace writes rank 1)."""
    areal.configure(config(tmp_path / "areal"), rank=np.int64(1), role="")
    theirs = areal.get_tracer()
    expected = [Path(theirs._output_path), Path(theirs.session_tracer._output_path)]
    areal.reset()
    root = tmp_path / "ours"
    tracer = ours.configure(config(root), rank=np.int64(1), role="")
    with ours.trace_scope("x"):
        pass
    sid = ours.register_session(0)
    ours.trace_session_event("mark_finalized", session_id=sid, status="accepted")
    ours.save(force=True)
    ours.reset()
    assert [tracer.trace_path, tracer.session_path] == [
        root / p.relative_to(tmp_path / "areal") for p in expected
    ]
    assert tracer.trace_path.is_file()
    assert tracer.session_path is not None
    (record,) = [json.loads(line) for line in tracer.session_path.read_text().splitlines()]
    assert (record["rank"], record["role"]) == (1, None)


def test_profiler_flags_take_string_booleans() -> None:
    """profiler.record_shapes / with_stack accept the strings every boolean key accepts;
    anything else fails naming the key and the value."""
    settings = at.TelemetryConfig.from_mapping(
        {"profiler": {"steps": [1], "record_shapes": "true", "with_stack": "off"}}
    ).profiler
    assert settings is not None
    assert (settings.record_shapes, settings.with_stack) == (True, False)
    with pytest.raises(at.ConfigurationError, match=r"profiler\.with_stack: 'maybe'"):
        at.TelemetryConfig.from_mapping({"profiler": {"steps": [1], "with_stack": "maybe"}})
