"""asynctrace_contrib.areal at its edges: two tracers in one process, fork, secrets in
``args``, counters AReaL accepts, ``args`` filled in inside a scope, unbounded names."""

from __future__ import annotations

import getpass
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _forks import exit_code
from asynctrace_contrib import areal as ours
from asynctrace_contrib.areal import _phases as ours_phases
from asynctrace_contrib.areal import _values as ours_values

import asynctrace as at


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    ours_values._warned.clear()  # each test sees its own warnings (they are logged once each)
    yield
    ours.reset()
    ours.set_task_id(None)
    ours.set_session_id(None)
    at.shutdown()


def config(root: Path, experiment: str = "e", *, enabled: bool = True) -> dict[str, Any]:
    return {
        "enabled": enabled,
        "fileroot": str(root),
        "experiment_name": experiment,
        "trial_name": "t",
        "session_tracer": {"enabled": True, "flush_threshold": 1},
    }


def trial(root: Path, experiment: str = "e") -> Path:
    return root / "logs" / getpass.getuser() / experiment / "t"


def span_names(root: Path, experiment: str = "e") -> list[str]:
    path = trial(root, experiment) / "perf_tracer" / "traces-r0.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [e["name"] for e in events if e.get("ph") == "X"]


def session_records(root: Path, experiment: str = "e") -> list[dict[str, Any]]:
    path = trial(root, experiment) / "session_tracer" / "sessions-r0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def memory_spans(tracer: ours.PerfTracer) -> dict[str, dict[str, Any]]:
    assert tracer.telemetry is not None
    exporter = tracer.telemetry.memory_exporter
    assert exporter is not None
    return {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}


# --- 1. a second PerfTracer -------------------------------------------------------------


def test_a_tracer_that_cannot_start_records_nothing_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Configured lazily, from the host's own calls: a configuration that fails then (an
    output directory under a regular file) is said once and not tried again; the host's
    scopes, instants and sessions run on."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    tracer = ours.PerfTracer(config(blocker), rank=0)
    with caplog.at_level(logging.WARNING):
        for step in range(3):
            with tracer.trace_scope("step", args={"global_step": step}):
                pass
            tracer.instant("mark")
        assert tracer.session_tracer is None
    assert tracer.telemetry is None
    failures = [r for r in caplog.records if "could not be configured" in r.getMessage()]
    assert len(failures) == 1


def test_building_a_perf_tracer_leaves_the_running_one_alone(tmp_path: Path) -> None:
    """As in AReaL, building a PerfTracer affects nothing else: the module's scopes and
    sessions still go to the module's files."""
    module = ours.configure(config(tmp_path), rank=0)
    other = ours.PerfTracer(config(tmp_path, "other"), rank=0)
    assert other.telemetry is None
    assert at.current_telemetry() is module.telemetry
    with ours.trace_scope("step", args={"global_step": 1}):
        pass
    session = ours.register_session(1)
    assert session is not None
    ours.trace_session_event("mark_finalized", session_id=session, status="accepted")
    ours.reset()
    assert span_names(tmp_path) == ["step"]
    assert [r["status"] for r in session_records(tmp_path)] == ["accepted"]
    assert not trial(tmp_path, "other").exists()


def test_a_replaced_tracer_records_nothing_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """asynctrace runs one configuration per process: once another PerfTracer records, the
    module's scopes, instants, sessions and events are counted and warned about, never
    written into the other tracer's files."""
    caplog.set_level(logging.WARNING, logger="asynctrace_contrib.areal")
    module = ours.configure(config(tmp_path), rank=0)
    sessions = ours.get_session_tracer()
    assert sessions is not None
    kept = ours.register_session(1)
    other = ours.PerfTracer(config(tmp_path, "other"), rank=0)
    with other.trace_scope("other.step"):
        pass
    assert "replaces the running one" in caplog.text
    with ours.trace_scope("module.step"):
        pass
    ours.instant("module.mark")
    assert module.stats()["not_running"] == 2
    assert ours.register_session(2) is None
    ours.trace_session_event("mark_finalized", session_id=kept, status="accepted")
    ours.trace_session_event("increment_counter", session_id=kept, name="n", value=1)
    assert sessions.stats()["not_running"] == 3
    assert "its scopes and instants are not recorded" in caplog.text
    assert "its sessions, events and counters are not recorded" in caplog.text
    other.reset()
    ours.reset()
    assert span_names(tmp_path, "other") == ["other.step"]
    assert "module.step" not in span_names(tmp_path)
    assert session_records(tmp_path, "other") == []
    assert [r["status"] for r in session_records(tmp_path)] == ["pending"]  # kept, unfinished


# --- 2. ids -------------------------------------------------------------------------------


def test_ids_other_than_sequential_are_refused(tmp_path: Path) -> None:
    """AReaL's API numbers sessions: ``session_tracer.ids: unique`` fails fast, naming the
    key, the value and what is accepted."""
    with pytest.raises(at.ConfigurationError) as caught:
        ours.configure(config(tmp_path), rank=0, telemetry={"session_tracer": {"ids": "unique"}})
    message = str(caught.value)
    assert "telemetry['session_tracer']['ids']" in message
    assert "'unique'" in message
    assert "accepted: sequential" in message
    assert not ours.is_configured()
    at.configure({"enabled": False, "session_tracer": {"enabled": True, "ids": "unique"}})
    with pytest.raises(at.ConfigurationError, match="session_tracer.ids: 'unique'"):
        ours.SessionTracer()


# --- 3. fork ------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() only")
def test_a_fork_while_another_thread_holds_the_lock_does_not_hang_the_child(
    tmp_path: Path,
) -> None:
    """The child gets a new lock (and none of the parent's sessions) instead of the one
    another thread held at the fork."""
    ours.configure(config(tmp_path), rank=0)
    sessions = ours.get_session_tracer()
    assert sessions is not None
    ours.register_session(7)
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with sessions._lock:  # a register_session() in flight on another thread
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if it got through, with no session of the parent
        code = 1
        try:
            ours.register_task(1)
            ours.register_session(1)
            code = 0 if sessions.get_session_ids(7) == [] else 2
        finally:
            os._exit(code)
    release.set()
    thread.join()
    assert exit_code(pid, 5, "the forked child, on the lock") == 0


# --- 4. secrets in args ------------------------------------------------------------------


def test_secrets_in_args_are_redacted_plain_values_kept(tmp_path: Path) -> None:
    """A credential key's value is REDACTED, strings and JSON text lose URL credentials and
    tokens (``asynctrace.redact_text``); numbers and plain strings stay as they are."""
    ours.configure(config(tmp_path), rank=0, telemetry={"exporters": ["chrome", "memory"]})
    plain = {"global_step": 3, "model": "qwen-7b", "lr": 1e-5, "ids": [1, 2]}
    with ours.trace_scope(
        "fetch",
        category="io",
        args={
            **plain,
            "url": "https://alice:hunter2@h.example/x?token=SECRET1",
            "headers": {"Authorization": "Bearer SECRET2"},
            "note": "sent with Bearer SECRET3",
            "urls": ["http://bob:SECRET4@host/"],
            "api_key": 12345678,
        },
    ):
        pass
    ours.instant("mark", args={"access_token": "SECRET5", "dsn": "postgres://u:SECRET6@db/x"})
    spans = memory_spans(ours.get_tracer())
    text = json.dumps(spans)
    for secret in ("hunter2", "SECRET1", "SECRET2", "SECRET3", "SECRET4", "12345678"):
        assert secret not in text
    fetch = spans["fetch"]
    assert fetch["api_key"] == "REDACTED"
    assert fetch["url"] == "https://h.example/x?token=REDACTED"
    assert {key: fetch[key] for key in plain} == {**plain, "ids": (1, 2)}
    ours.save(force=True)
    trace = (trial(tmp_path) / "perf_tracer" / "traces-r0.jsonl").read_text()
    assert "SECRET5" not in trace + text
    assert "SECRET6" not in trace + text


# --- 5. counters --------------------------------------------------------------------------


def test_bool_counter_values_count_as_ints(tmp_path: Path) -> None:
    """AReaL adds True as 1 (``counters[name] + value``)."""
    ours.configure(config(tmp_path), rank=0)
    session = ours.register_session(1)
    for value in (True, False, True):
        ours.trace_session_event("increment_counter", session_id=session, name="cut", value=value)
    ours.trace_session_event("mark_finalized", session_id=session, status="accepted")
    ours.reset()
    assert session_records(tmp_path)[0]["counters"] == {"cut": 2}


# --- 6. args filled in inside the scope -------------------------------------------------


def test_args_added_or_changed_in_the_block_are_recorded(tmp_path: Path) -> None:
    """AReaL copies ``args`` when the scope ends: what the block adds is recorded."""
    ours.configure(config(tmp_path), rank=0, telemetry={"exporters": ["memory"]})
    args: dict[str, Any] = {"global_step": 1, "loss": None, "phase": "start"}
    with ours.trace_scope("update", category="compute", args=args):
        args["num_tokens"] = 1234
        args["loss"] = 0.5
        args["phase"] = "end"
        args["token"] = "SECRET7"
    unchanged = {"global_step": 2}
    with ours.trace_scope("same", args=unchanged):
        pass
    spans = memory_spans(ours.get_tracer())
    update = spans["update"]
    assert (update["num_tokens"], update["loss"], update["phase"]) == (1234, 0.5, "end")
    assert update["token"] == "REDACTED"
    assert update["rl.iteration"] == 1
    assert spans["same"]["global_step"] == 2


# --- 7. warnings and names bounded -----------------------------------------------------


def test_unknown_statuses_warn_once_whatever_their_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="asynctrace_contrib.areal")
    ours.configure(config(tmp_path), rank=0)
    before = len(ours_values._warned)
    for n in range(50):
        session = ours.register_session(1)
        ours.trace_session_event("mark_finalized", session_id=session, status=f"aborted-{n}")
    assert len(ours_values._warned) - before == 1
    assert caplog.text.count("is not one of") == 1
    ours.reset()
    records = session_records(tmp_path)
    assert len(records) == 50
    assert {r["status"] for r in records} == {"dropped"}


def test_phases_registered_on_first_use_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the bound a new phase name is ignored, counted and warned about once; phases
    already known keep working."""
    caplog.set_level(logging.WARNING, logger="asynctrace_contrib.areal")
    monkeypatch.setattr(ours_phases, "_registered", ours_phases._MAX_NEW_PHASES - 1)  # one left
    monkeypatch.setattr(ours_phases, "refused", 0)
    ours.configure(config(tmp_path), rank=0)
    session = ours.register_session(1)
    registered = len(at.registered_phases())
    for n in range(5):
        ours.trace_session_event(f"mark_edgetool{n}_start", session_id=session)
        ours.trace_session_event(f"mark_edgetool{n}_end", session_id=session)
    with ours.trace_session_phase("reward"):  # one of AReaL's: not counted against it
        pass
    ours.set_session_id(session)
    with ours.trace_session_phase("reward"):
        pass
    tracer = ours.get_session_tracer()
    assert tracer is not None
    assert len(at.registered_phases()) - registered == 1
    assert tracer.stats()["refused_phases"] == 8  # 4 names, a start and an end each
    assert caplog.text.count("phases were registered on first use already") == 1
    ours.trace_session_event("mark_finalized", session_id=session, status="accepted")
    ours.reset()
    phases = session_records(tmp_path)[0]["phases"]
    assert set(phases) >= {"edgetool0", "reward"}
    assert not any(name.startswith("edgetool") and name != "edgetool0" for name in phases)


def _session_in_worker() -> int | None:
    return ours.get_session_id()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_pool_worker_is_in_none_of_its_parents_sessions() -> None:
    """A worker forked by a submission made inside a session does not report the calls
    of later submitters under that session (a wrapped pool keeps the worker's context)."""
    import concurrent.futures
    import contextvars
    import multiprocessing

    pool = at.context_executor(
        concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    )

    def first() -> int | None:
        ours.set_session_id(7)
        return pool.submit(_session_in_worker).result(timeout=30)

    try:
        assert contextvars.copy_context().run(first) is None
        assert pool.submit(_session_in_worker).result(timeout=30) is None
    finally:
        pool.shutdown()


def test_global_tracer_is_read_and_assigned_where_it_lives(tmp_path: Path) -> None:
    """``perf_tracer.GLOBAL_TRACER = None`` (a test teardown's way in AReaL) deconfigures
    the module, and reading it after a new configure is never a stale value."""
    first = ours.configure(config(tmp_path), rank=0)
    assert ours.GLOBAL_TRACER is first
    ours.GLOBAL_TRACER = None
    assert not ours.is_configured()
    first.reset()
    second = ours.configure(config(tmp_path, "again"), rank=0)
    assert ours.GLOBAL_TRACER is second
    assert "GLOBAL_TRACER" in dir(ours)
