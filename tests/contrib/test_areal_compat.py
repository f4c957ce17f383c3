"""asynctrace_contrib.areal against the real AReaL 1.0.4 ``perf_tracer``: the same calls,
the same outcome (no exception where AReaL raises none, the same session records).

Each scenario runs once on AReaL's module (loaded by ``tests/_areal_loader.py``)
and once on ours, each writing its own directory, and the records are compared.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _areal_loader import PerfTracerConfig, SessionTracerConfig
from asynctrace_contrib import areal as ours
from asynctrace_contrib.areal import _values as ours_values

import asynctrace as at

pytestmark = pytest.mark.usefixtures("areal_reset")


def config(root: Path, *, enabled: bool = True, sessions: bool = True) -> PerfTracerConfig:
    return PerfTracerConfig(
        experiment_name="e",
        trial_name="t",
        fileroot=str(root),
        enabled=enabled,
        session_tracer=SessionTracerConfig(enabled=True, flush_threshold=1) if sessions else None,
    )


def records(root: Path) -> list[dict[str, Any]]:
    path = root / "logs" / getpass.getuser() / "e" / "t" / "session_tracer" / "sessions-r0.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def both(
    areal: Any, tmp_path: Path, scenario: Callable[[Any], Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any, Any]:
    """Run *scenario* on AReaL's module and on ours; their session records and results."""
    results = []
    for name, mod in (("areal", areal), ("ours", ours)):
        mod.configure(config(tmp_path / name), rank=0)
        try:
            results.append(scenario(mod))
        finally:
            mod.reset()
    return records(tmp_path / "areal"), records(tmp_path / "ours"), results[0], results[1]


def shape(record: dict[str, Any]) -> dict[str, Any]:
    """What both tracers must agree on."""
    return {
        "task_id": record.get("task_id"),
        "status": record["status"],
        "reason": record.get("reason"),
        "phases": {k: len(v) for k, v in record.get("phases", {}).items()},
        "counters": record.get("counters") or None,
    }


# --- 1. AReaL's SessionTracer / PerfTracer API --------------------------------------------


def test_session_tracer_object_has_arealapi(areal: Any, tmp_path: Path) -> None:
    """What AReaL's WorkflowExecutor calls on get_session_tracer() works on ours too."""

    def scenario(mod: Any) -> list[Any]:
        tracer = mod.get_session_tracer()
        tracer.register_task(4)
        sid = tracer.register_session(4)
        other = tracer.register_session(4)
        ids = sorted(tracer.get_session_ids(4))
        tracer.record_event(sid, mod.SessionTraceEvent.GENERATE_START)
        tracer.record_event(sid, mod.SessionTraceEvent.GENERATE_END)
        tracer.increment_counter(sid, "tokens", 5)
        tracer.record_event(sid, mod.SessionTraceEvent.FINALIZED, status="accepted")
        tracer.record_event(other, mod.SessionTraceEvent.FINALIZED, status="rejected", reason="r")
        tracer.flush(force=True)  # WorkflowExecutor.destroy()
        tracer.flush()
        tracer.reset()
        return [isinstance(sid, int), ids == sorted([sid, other])]

    theirs, mine, r_theirs, r_mine = both(areal, tmp_path, scenario)
    assert r_theirs == r_mine == [True, True]
    assert sorted(map(str, map(shape, theirs))) == sorted(map(str, map(shape, mine)))
    assert {r["status"] for r in mine} == {"accepted", "rejected"}


def test_module_names_and_perf_tracer_constructor(areal: Any, tmp_path: Path) -> None:
    """SessionTracer, GLOBAL_TRACER and PerfTracer(config, rank=0) as in AReaL."""
    for mod in (areal, ours):
        assert hasattr(mod, "SessionTracer")
        assert mod.GLOBAL_TRACER is None
        tracer = mod.PerfTracer(config(tmp_path / "x", enabled=False, sessions=False), rank=0)
        assert tracer.enabled is False
        assert tracer.session_tracer is None
        configured = mod.configure(config(tmp_path / "y"), rank=0)
        assert mod.GLOBAL_TRACER is configured
        assert isinstance(mod.get_session_tracer(), mod.SessionTracer)
        mod.reset()
        assert mod.GLOBAL_TRACER is None


# --- 2. payloads AReaL ignores --------------------------------------------------------


def test_phase_payloads_areal_ignores_do_not_raise(areal: Any, tmp_path: Path) -> None:
    """AReaL's own docstring example: end_payload={"status": "accepted"} on a phase."""

    def scenario(mod: Any) -> None:
        mod.set_task_id(1)

        @mod.session_context()
        def sample() -> None:
            with mod.trace_session_phase("generate", end_payload={"status": "accepted"}):
                pass
            with mod.trace_session_phase("reward", start_payload={"reason": "x"}):
                pass
            mod.trace_session_event(
                "mark_toolcall_start", session_id=mod.get_session_id(), reason="late"
            )
            mod.trace_session_event("mark_toolcall_end", session_id=mod.get_session_id())

        sample()
        mod.trace_session_event("mark_finalized", task_id=1, status="accepted")

    theirs, mine, _, _ = both(areal, tmp_path, scenario)
    assert [shape(r) for r in theirs] == [shape(r) for r in mine]
    assert mine[0]["status"] == "accepted"
    assert set(mine[0]["phases"]) == {"generate", "reward", "toolcall"}


# --- 3. input AReaL accepts ------------------------------------------------------------


def test_statuses_and_phase_names_areal_accepts(
    areal: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No status leaves the session pending; an unknown one is kept apart (warned);
    odd method names are ignored; register_session(None) registers."""

    def scenario(mod: Any) -> Any:
        pending = mod.register_session(1)
        aborted = mod.register_session(2)
        none_task = mod.register_session(None)
        for method in ("mark_Generate_start", "mark_total_start", "mark_finalized_start"):
            mod.trace_session_event(method, session_id=pending)
        mod.trace_session_event("mark_finalized", session_id=pending)
        mod.trace_session_event("mark_finalized", session_id=aborted, status="aborted")
        mod.trace_session_event("mark_finalized", session_id=none_task, status=None)
        return none_task is not None

    with caplog.at_level(logging.WARNING, "asynctrace_contrib.areal"):
        theirs, mine, r_theirs, r_mine = both(areal, tmp_path, scenario)
    assert r_theirs is r_mine is True
    by_task_theirs = {r.get("task_id"): r for r in theirs}
    by_task_mine = {r.get("task_id"): r for r in mine}
    assert by_task_theirs[1]["status"] == by_task_mine[1]["status"] == "pending"
    assert by_task_theirs[None]["status"] == by_task_mine[None]["status"] == "pending"
    assert not by_task_mine[1].get("phases")  # the odd names were ignored, as in AReaL
    assert by_task_theirs[2]["status"] == "aborted"
    assert by_task_mine[2]["status"] == "dropped"  # asynctrace's statuses; warned
    assert by_task_mine[2]["reason"] == "status aborted"
    assert "'aborted' is not one of" in caplog.text


# --- 4. counters -------------------------------------------------------------------------


def test_counters_count_on_the_sessions_named(areal: Any, tmp_path: Path) -> None:
    """increment_counter by session_id and by task_id, outside any session scope."""

    def scenario(mod: Any) -> None:
        mod.set_task_id(3)

        @mod.session_context()
        async def episode() -> None:
            with mod.trace_scope("gen", category="compute"):
                pass
            mod.trace_session_event(
                "increment_counter", session_id=mod.get_session_id(), name="toks", value=5
            )

        async def main() -> None:
            await episode()
            await episode()

        asyncio.run(main())
        mod.trace_session_event("increment_counter", task_id=3, name="retries")
        if mod is ours:  # AReaL raises TypeError here; ours ignores it (warned once)
            mod.trace_session_event("increment_counter", task_id=3, name="bad", value="x")
        mod.trace_session_event("mark_finalized", task_id=3, status="accepted")

    theirs, mine, _, _ = both(areal, tmp_path, scenario)
    assert [r.get("counters") for r in mine] == [{"toks": 5, "retries": 1}] * 2
    assert sorted(map(str, map(shape, theirs))) == sorted(map(str, map(shape, mine)))


def test_spans_in_session_context_carry_session_ids(tmp_path: Path) -> None:
    """Spans opened in a session_context carry rl.task_id and rl.session_id."""
    ours.configure(config(tmp_path), rank=0, telemetry={"exporters": ["memory"]})
    ours.set_task_id(8)

    @ours.session_context()
    def sample() -> int | None:
        with ours.trace_scope("gen", category="compute"):
            pass
        return ours.get_session_id()

    session_id = sample()
    exporter = ours.get_tracer().telemetry.memory_exporter  # type: ignore[union-attr]
    (span,) = exporter.get_finished_spans()
    assert span.attributes["rl.session_id"] == str(session_id)
    assert span.attributes["rl.task_id"] == 8


# --- 7. the category in the trace ---------------------------------------------------


def areal_events(root: Path) -> list[dict[str, Any]]:
    path = root / "logs" / getpass.getuser() / "e" / "t" / "perf_tracer" / "traces-r0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_category_is_kept_as_areal_writes_it(areal: Any, tmp_path: Path) -> None:
    """areal.category on scopes and instants holds AReaL's ``cat``; args as AReaL's JSON."""
    args = {"cfg": {"a": [1, 2]}, "mixed": [1, "x"], "n": 3, "flag": True}

    def scenario(mod: Any) -> None:
        for category in ("Communication", "compute", "MyStage", None):
            with mod.trace_scope(f"scope.{category}", category=category, args=dict(args)):
                pass
        mod.instant("mark", category="scheduling")

    areal.configure(config(tmp_path / "areal", sessions=False), rank=0)
    try:
        scenario(areal)
        areal.save(force=True)
    finally:
        areal.reset()
    theirs = {e["name"]: e for e in areal_events(tmp_path / "areal") if e["ph"] in ("X", "i")}
    ours.configure(
        config(tmp_path / "ours", sessions=False),
        rank=0,
        telemetry={"exporters": ["memory", "chrome"]},
    )
    try:
        scenario(ours)
        exporter = ours.get_tracer().telemetry.memory_exporter  # type: ignore[union-attr]
        spans = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    finally:
        ours.reset()
    for name, event in theirs.items():
        if name == "mark":
            continue
        assert spans[name]["areal.category"] == event["cat"]
        assert json.loads(spans[name]["cfg"]) == event["args"]["cfg"]
        assert json.loads(spans[name]["mixed"]) == event["args"]["mixed"]
        assert spans[name]["n"] == 3
        assert spans[name]["flag"] is True
    assert theirs["mark"]["cat"] == "scheduler"
    marks = [e for e in areal_events(tmp_path / "ours") if e.get("name") == "mark"]
    assert marks
    assert all(e["args"]["areal.category"] == "scheduler" for e in marks)


# --- 8. a disabled tracer leaves asynctrace alone -------------------------------------


def test_disabled_configure_keeps_the_apps_telemetry(tmp_path: Path) -> None:
    """configure(enabled=False) does not replace the app's asynctrace configuration;
    set_enabled(True) starts recording then, as AReaL's switch does."""
    app = at.configure({"enabled": True, "exporters": ["memory"], "span_groups": "all"})
    try:
        tracer = ours.configure(config(tmp_path, enabled=False, sessions=False), rank=0)
        assert tracer.telemetry is None
        assert at.current_telemetry() is app
        with at.managed_span("areal.compute", "app.work", bucket=at.Bucket.PRODUCTIVE):
            pass
        assert app.memory_exporter is not None
        assert [s.name for s in app.memory_exporter.get_finished_spans()] == ["app.work"]
        tracer.set_enabled(True)
        assert tracer.telemetry is not None
        with ours.trace_scope("now.recorded", category="compute"):
            pass
        ours.save(force=True)
        ours.reset()
    finally:
        at.shutdown()
    lines = areal_events(tmp_path)
    assert [e["name"] for e in lines if e.get("ph") == "X"] == ["now.recorded"]


# --- 10. configuration AReaL accepts -----------------------------------------------------


def test_telemetry_merges_deep_and_bad_numbers_warn(
    areal: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A nested telemetry block merges key by key; a bad flush_threshold, WORLD_SIZE or
    profile step is warned about (AReaL: flush_threshold 1, the step skipped)."""
    tracer = ours.configure(
        config(tmp_path), rank=0, telemetry={"session_tracer": {"flush_threshold": 5}}
    )
    settings = tracer.telemetry.settings.session_tracer  # type: ignore[union-attr]
    assert settings.flush_threshold == 5
    assert settings.ids == "sequential"  # kept from this layer's block
    ours.reset()
    monkeypatch.setenv("WORLD_SIZE", "two")
    bad = PerfTracerConfig(
        experiment_name="e",
        trial_name="t",
        fileroot=str(tmp_path),
        enabled=True,
        profile_steps=["x", 2],  # type: ignore[list-item]
        session_tracer=SessionTracerConfig(enabled=True, flush_threshold="many"),  # type: ignore[arg-type]
    )
    theirs = areal.PerfTracer(bad, rank=0)
    assert theirs.session_tracer._flush_threshold == 1
    with caplog.at_level(logging.WARNING, "asynctrace_contrib.areal"):
        tracer = ours.configure(bad, rank=0)
    settings = tracer.telemetry.settings  # type: ignore[union-attr]
    assert settings.session_tracer.flush_threshold == 1
    assert settings.profiler.steps == {2}
    assert "flush_threshold" in caplog.text
    assert "WORLD_SIZE" in caplog.text
    assert "profile_steps" in caplog.text


# --- 9. payloads are not written ---------------------------------------------------------


def test_payloads_are_not_written(areal: Any, tmp_path: Path) -> None:
    """AReaL records no phase or finalize payload (only status and reason); neither does
    this layer, so a secret in one never reaches the file."""
    secret = "https://user:hunter2@example.com/x?token=hunter2"

    def scenario(mod: Any) -> None:
        mod.set_task_id(5)

        @mod.session_context()
        def sample() -> None:
            with mod.trace_session_phase("generate", start_payload={"url": secret}):
                pass

        sample()
        mod.trace_session_event("mark_finalized", task_id=5, status="accepted", url=secret)

    theirs, mine, _, _ = both(areal, tmp_path, scenario)
    assert "hunter2" not in json.dumps(theirs)
    assert "hunter2" not in json.dumps(mine)
    assert not mine[0].get("payload")
    assert "payload" not in mine[0]["phases"]["generate"][0]


def test_disabled_with_sessions_runs_the_session_tracer_alone(tmp_path: Path) -> None:
    """``enabled: false`` with the session tracer on: sessions recorded, no span pipeline
    (no trace file, OpenTelemetry's global provider untouched) until ``set_enabled``."""
    tracer = ours.PerfTracer(config(tmp_path, enabled=False), rank=0)
    try:
        assert tracer.telemetry is None  # built, not started: nothing else changed
        assert tracer.session_tracer is not None  # asked for: started
        assert tracer.telemetry is not None
        assert not tracer.telemetry.enabled
        assert at.current_telemetry() is tracer.telemetry
        assert not tracer.trace_path.exists()
        tracer.set_enabled(True)
        assert tracer.telemetry.enabled
    finally:
        if tracer.telemetry is not None:
            tracer.telemetry.shutdown()


def test_the_layers_warnings_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    """A warning that names an exception (an event dropped) names no token."""
    caplog.set_level(logging.WARNING, logger="asynctrace_contrib.areal")
    ours_values._warned.discard("redact-test")
    ours_values._warn_once("redact-test", "perf_tracer: event dropped: %r",
                    ValueError("GET http://u:hunter2@h/?token=abc123"))  # fmt: skip
    assert "hunter2" not in caplog.text
    assert "abc123" not in caplog.text
    assert "token=REDACTED" in caplog.text
