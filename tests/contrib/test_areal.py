"""asynctrace_contrib.areal: AReaL's perf_tracer API, layout and field names, through asynctrace.

AReaL's own tools (``perf_trace_converter``, ``plot_session_trace``, from the
installed ``areal==1.0.4`` wheel, loaded by file path) read what it writes.
"""

from __future__ import annotations

import asyncio
import getpass
import importlib.util
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _areal_loader import AnchorMissing, load_tool
from asynctrace_contrib import areal as perf_tracer
from asynctrace_contrib.areal import _values as areal_values
from asynctrace_contrib.areal import (
    atrace_session_phase,
    session_context,
    trace_perf,
    trace_session,
    trace_session_event,
)

import asynctrace as at

N_SAMPLES = 4
TASKS_PER_STEP = 4
STEPS = 2


def tool(name: str) -> Any:
    """AReaL's tool module, or a skip naming what is missing."""
    try:
        return load_tool(name)
    except AnchorMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    """A configured tracer (spans and sessions on) under tmp_path; its trial directory."""
    config = perf_tracer.PerfTracerConfig(
        experiment_name="gsm8k",
        trial_name="trial0",
        fileroot=str(tmp_path),
        enabled=True,
        session_tracer=perf_tracer.SessionTracerConfig(enabled=True, flush_threshold=8),
    )
    perf_tracer.configure(config, rank=0)
    yield tmp_path / "logs" / getpass.getuser() / "gsm8k" / "trial0"
    perf_tracer.reset()


class Engine:
    """Stands in for AReaL's InferenceEngine."""

    async def agenerate(self, request: int) -> int:
        await asyncio.sleep(0.003 + 0.001 * (request % 3))
        return request


class RLVRWorkflow:
    """The seed's RLVRWorkflow shape, unchanged but for the engine and reward."""

    async def arun_episode(self, engine: Engine, data: int) -> list[tuple[int | None, float]]:
        return await asyncio.gather(
            *(self._collect_samples(engine, data) for _ in range(N_SAMPLES))
        )

    @session_context()
    async def _collect_samples(self, engine: Engine, data: int) -> tuple[int | None, float]:
        async with atrace_session_phase("generate"):
            resp = await engine.agenerate(data)
        reward = await self._compute_rewards(resp)
        return perf_tracer.get_session_id(), reward

    @trace_session("reward")
    async def _compute_rewards(self, resp: int) -> float:
        await asyncio.sleep(0.001)
        return float(resp % 2)


@trace_perf("actor.ppo_update", category=perf_tracer.Category.COMPUTE)
async def ppo_update() -> None:
    await asyncio.sleep(0.01)


async def run_task(workflow: RLVRWorkflow, engine: Engine, task_id: int) -> None:
    """What AReaL's WorkflowExecutor does per task: set the task, run, finalize each session."""
    perf_tracer.set_task_id(task_id)
    for session_id, _reward in await workflow.arun_episode(engine, task_id):
        if session_id is not None and session_id % 5:  # every fifth sample came too late
            trace_session_event("mark_finalized", session_id=session_id, status="accepted")
        else:
            trace_session_event(
                "mark_finalized", session_id=session_id, status="rejected", reason="stale_weight"
            )


async def training() -> None:
    """Two steps: a rollout of four tasks (four samples each), then an update."""
    workflow, engine = RLVRWorkflow(), Engine()
    for step in range(1, STEPS + 1):
        with perf_tracer.trace_scope("train.step", args={"global_step": step}):
            async with perf_tracer.atrace_scope(
                "train.rollout", category="scheduler", args={"global_step": step}
            ):
                tasks = [
                    asyncio.create_task(run_task(workflow, engine, (step - 1) * 4 + t))
                    for t in range(TASKS_PER_STEP)
                ]
                await asyncio.gather(*tasks)
            perf_tracer.instant("workflow_executor.wait", category="scheduler", args={"n": 16})
            await ppo_update()
    perf_tracer.save(force=True)


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_workflow_writes_areal_layout_and_fields(base: Path) -> None:
    """perf_tracer/traces-r0.jsonl and session_tracer/sessions-r0.jsonl, AReaL's field names."""
    asyncio.run(training())
    perf_tracer.reset()
    assert sorted(p.relative_to(base).as_posix() for p in base.rglob("*.jsonl")) == [
        "perf_tracer/traces-r0.jsonl",
        "session_tracer/sessions-r0.jsonl",
    ]
    records = read_lines(base / "session_tracer" / "sessions-r0.jsonl")
    assert len(records) == STEPS * TASKS_PER_STEP * N_SAMPLES
    for record in records:
        for key in ("task_id", "session_id", "rank", "status", "submit_ts", "finalized_ts"):
            assert key in record
        assert isinstance(record["task_id"], int)
        assert type(record["session_id"]) is int  # a JSON integer, as AReaL writes it
        assert set(record["phases"]) == {"generate", "reward"}
        assert record["generate_s"] > 0
        assert record["status"] in ("accepted", "rejected")
    assert len({r["session_id"] for r in records}) == len(records)
    assert {r["reason"] for r in records if r["status"] == "rejected"} == {"stale_weight"}
    events = read_lines(base / "perf_tracer" / "traces-r0.jsonl")
    steps = [e for e in events if e.get("name") == "train.step"]
    assert [e["args"]["rl.iteration"] for e in steps] == [1, 2]
    updates = [e for e in events if e.get("name") == "actor.ppo_update"]
    assert {e["args"]["rl.bucket"] for e in updates} == {"productive"}
    assert {e["args"]["rl.iteration"] for e in updates} == {1, 2}


@pytest.mark.slow
def test_areal_plot_tool_reads_the_sessions(base: Path, tmp_path: Path) -> None:
    """AReaL's plot_session_trace: one lifecycle row per session, and both steps found."""
    plot = tool("plot_session_trace")
    asyncio.run(training())
    perf_tracer.reset()
    sessions = base / "session_tracer" / "sessions-r0.jsonl"
    out = tmp_path / "plots" / "sessions.html"
    argv = [plot.__file__, str(sessions), "-B", str(TASKS_PER_STEP), "-L", "--output", str(out)]
    done = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"Identified {STEPS} step timepoint(s)" in done.stdout
    import pandas as pd

    df = pd.DataFrame(plot._load_records(sessions))
    plot._ensure_numeric(df)
    plot._maybe_compute_durations(df)
    plot._extract_phase_timestamps(df)
    plot._compute_offsets(df)
    figures = plot.build_timeline_figures(df, None)
    rows = {y for trace in figures["r0"].data for y in (trace.y or ())}
    assert len(rows) == STEPS * TASKS_PER_STEP * N_SAMPLES


def test_areal_converter_keeps_names_and_no_session_record(base: Path, tmp_path: Path) -> None:
    """AReaL's perf_trace_converter on perf_tracer/: every process and track name kept."""
    converter = tool("perf_trace_converter")
    asyncio.run(training())
    perf_tracer.reset()
    trace_dir = base / "perf_tracer"
    ours = read_lines(trace_dir / "traces-r0.jsonl")
    used = {(e["pid"], e["tid"]) for e in ours if e["ph"] in ("X", "i")}
    names = {e["args"]["name"] for e in ours if e.get("name") == "process_name"} | {
        e["args"]["name"]
        for e in ours
        if e.get("name") == "thread_name" and (e["pid"], e["tid"]) in used  # a track with spans
    }
    merged = converter.convert_jsonl_to_chrome_trace(trace_dir, tmp_path / "merged.json")
    events = merged["traceEvents"]
    kept = {e["args"]["name"] for e in events if e.get("name") in ("process_name", "thread_name")}
    assert names <= kept
    assert all("ph" in e for e in events)  # no session record among the trace events
    assert not any("session_id" in e and "submit_ts" in e for e in events)


def test_goodput_reads_the_steps(base: Path) -> None:
    """asynctrace goodput on AReaL's perf_tracer/ directory: two steps, compute as productive."""
    asyncio.run(training())
    perf_tracer.reset()
    done = subprocess.run(
        [sys.executable, "-m", "asynctrace", "goodput", str(base / "perf_tracer"), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    steps = table["steps"]
    assert [s["iteration"] for s in steps] == [1, 2]
    assert all(s["productive_s"] > 0.009 for s in steps)
    assert all(s["overhead_s"] > 0 for s in steps)  # the scheduler-category rollout


def test_category_map_override_and_configure_rules(tmp_path: Path) -> None:
    """category_map changes a category's bucket; configure twice raises until reset."""
    config = {
        "enabled": True,
        "fileroot": str(tmp_path),
        "experiment_name": "e",
        "trial_name": "t",
    }
    perf_tracer.configure(
        config, rank=1, telemetry={"exporters": ["memory"]}, category_map={"io": "idle"}
    )
    try:
        with pytest.raises(RuntimeError, match="already been configured"):
            perf_tracer.configure(config, rank=1)
        with perf_tracer.trace_scope("ckpt.save", category="io"):
            pass
        with perf_tracer.trace_scope("fwd", category=perf_tracer.Category.COMPUTE):
            pass
        with perf_tracer.trace_scope("odd", category="not-a-category"):
            pass
        exporter = perf_tracer.get_tracer().telemetry.memory_exporter
        assert exporter is not None
        spans = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    finally:
        perf_tracer.reset()
    assert spans["ckpt.save"]["rl.bucket"] == "idle"
    assert spans["fwd"]["rl.bucket"] == "productive"
    assert "rl.bucket" not in spans["odd"]  # an unknown category is misc: an umbrella
    assert spans["odd"]["asynctrace.group"] == "areal.misc"
    with pytest.raises(at.ConfigurationError, match="category_map"):
        perf_tracer.configure(config, rank=0, category_map={"io": "sometimes"})
    assert not perf_tracer.is_configured()


def test_profile_steps_profile_the_scopes_that_ask(tmp_path: Path) -> None:
    """AReaL's rule: ``enable_profiler=True`` and ``global_step`` in ``profile_steps``.

    A nested scope inherits the step of the one around it; a scheduled step
    whose scope does not ask stays unprofiled; bad steps fail at configure.
    """
    pytest.importorskip("viztracer")
    config = {
        "enabled": True,
        "fileroot": str(tmp_path),
        "experiment_name": "e",
        "trial_name": "t",
        "profile_steps": [2, 3],
    }
    # torch is not part of the suite's environment, so this is the python backend;
    # naming it keeps the test's meaning where torch is installed.
    tracer = perf_tracer.configure(
        config, rank=0, telemetry={"profiler": {"steps": [2, 3], "backend": "python"}}
    )
    try:
        for step in (1, 2, 3):
            with perf_tracer.trace_scope(
                "train.step", category="compute", args={"global_step": step}
            ):
                with perf_tracer.trace_scope(
                    "train.ppo_update", category="compute", enable_profiler=step != 3
                ):
                    sum(range(20_000))
        assert tracer.telemetry.shutdown()
    finally:
        perf_tracer.reset()
    trace_dir = tmp_path / "logs" / getpass.getuser() / "e" / "t" / "perf_tracer"
    assert sorted(p.name for p in trace_dir.glob("profile-*.json")) == [
        "profile-r0-step2.python.json"
    ]
    lines = [json.loads(line) for line in (trace_dir / "traces-r0.jsonl").read_text().splitlines()]
    (profiled,) = [e for e in lines if "asynctrace.profile.file" in e.get("args", {})]
    assert profiled["name"] == "train.ppo_update"
    assert profiled["args"]["rl.iteration"] == 2

    # profile_steps alone picks AReaL's backend, torch, where torch is installed
    tracer = perf_tracer.configure({**config, "profile_steps": [4]}, rank=0)
    try:
        chosen = tracer.telemetry.settings.profiler
    finally:
        perf_tracer.reset()
    assert chosen.steps == {4}
    try:  # a stand-in torch (the AReaL loader's, without a spec) is no torch
        torch_installed = importlib.util.find_spec("torch") is not None
    except ValueError:
        torch_installed = False
    assert chosen.backend == ("torch" if torch_installed else "python")
    # a bad entry is warned about and skipped, as AReaL does
    tracer = perf_tracer.configure({**config, "profile_steps": [1, "x"]}, rank=0)
    try:
        assert tracer.telemetry is not None
        assert tracer.telemetry.settings.profiler.steps == {1}
    finally:
        perf_tracer.reset()


def test_unconfigured_and_disabled_are_no_ops(tmp_path: Path) -> None:
    """Before configure every helper is a no-op; a disabled block records nothing."""
    with perf_tracer.trace_scope("x", args={"global_step": 1}):
        perf_tracer.instant("y")
    assert perf_tracer.register_session(3) is None
    trace_session_event("mark_finalized", session_id=1, status="accepted")
    with pytest.raises(RuntimeError, match="not configured"):
        perf_tracer.get_tracer()
    perf_tracer.configure({"enabled": False, "fileroot": str(tmp_path)}, rank=0)
    try:
        assert not perf_tracer.get_tracer().enabled
        assert perf_tracer.get_session_tracer() is None
    finally:
        perf_tracer.reset()
    assert not list(tmp_path.rglob("*.jsonl"))


def test_exceptions_and_unknown_phases(tmp_path: Path) -> None:
    """An exception leaves the scope as it came and marks the span; a phase AReaL's enum
    would need extending for is recorded (the seed's "postprocess")."""
    config = {
        "enabled": True,
        "fileroot": str(tmp_path),
        "session_tracer": {"enabled": True, "flush_threshold": 1},
    }
    perf_tracer.configure(config, rank=0, telemetry={"exporters": ["memory"]})
    try:
        with pytest.raises(KeyError), perf_tracer.trace_scope("boom", category="compute"):
            raise KeyError("x")
        exporter = perf_tracer.get_tracer().telemetry.memory_exporter
        assert exporter is not None
        (span,) = exporter.get_finished_spans()
        assert not span.status.is_ok
        perf_tracer.set_task_id(9)

        @session_context()
        def sample() -> int | None:
            with perf_tracer.trace_session_phase("postprocess", end_payload={"accepted": True}):
                pass
            return perf_tracer.get_session_id()

        session_id = sample()
        trace_session_event("mark_finalized", task_id=9, status="accepted")
        trace_session_event("mark_nothing_known", session_id=session_id)  # ignored, as in AReaL
        sessions = perf_tracer.get_tracer().session_path
    finally:
        perf_tracer.reset()
    assert sessions is not None
    (record,) = read_lines(sessions)
    assert record["session_id"] == session_id
    assert "payload" not in record["phases"]["postprocess"][0]  # AReaL records no payload
    assert "postprocess_s" in record


def test_a_finalized_session_leaves_its_task_only(base: Path) -> None:
    """``get_session_ids`` lists a task's sessions not finalized yet: a finalize takes its
    session out of its own task, leaves every other task's as they were, and a second
    finalize or an id never registered changes nothing."""
    tracer = perf_tracer.get_session_tracer()
    assert tracer is not None
    first = [tracer.register_session(1) for _ in range(3)]
    second = [tracer.register_session(2) for _ in range(2)]
    assert None not in first
    assert None not in second
    tracer.record_event(first[1], "finalized", status="accepted")
    assert tracer.get_session_ids(1) == sorted([first[0], first[2]])
    assert tracer.get_session_ids(2) == sorted(second)
    tracer.record_event(first[1], "finalized", status="accepted")  # again: nothing moves
    tracer.record_event(10**9, "finalized", status="accepted")  # never registered
    assert tracer.get_session_ids(1) == sorted([first[0], first[2]])
    for session in second:
        tracer.record_event(session, "finalized", status="rejected")
    assert tracer.get_session_ids(2) == []
    assert tracer.get_session_ids(1) == sorted([first[0], first[2]])


def test_a_counter_past_a_floats_range_is_skipped_not_raised(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An int no float holds (``10**400``), by the method or by the module-level event, is
    skipped with one warning; the session's other counts are written, nothing raises."""
    areal_values._warned.discard("counter")  # logged once per process: this test's own
    tracer = perf_tracer.get_session_tracer()
    assert tracer is not None
    session = tracer.register_session(5)
    assert session is not None
    with caplog.at_level(logging.WARNING, "asynctrace_contrib.areal"):
        tracer.increment_counter(session, "tokens", 10**400)
        trace_session_event(
            "increment_counter", session_id=session, name="tokens", value=-(10**400)
        )
        trace_session_event("increment_counter", session_id=session, name="tokens", value=7)
    assert caplog.text.count("not a finite float-range number") == 1
    tracer.record_event(session, "finalized", status="accepted")
    perf_tracer.get_session_tracer().flush(force=True)  # type: ignore[union-attr]
    path = perf_tracer.get_tracer().session_path
    assert path is not None
    perf_tracer.reset()
    (record,) = read_lines(path)
    assert record["counters"] == {"tokens": 7}
