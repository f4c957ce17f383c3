"""The session lifecycle tracer: model, truncation, concurrency, memory, processes, joins."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from _forks import flush_in_a_fork

import asynctrace as at
from asynctrace import ConfigurationError
from asynctrace._session_tracer import SessionTracer, install

HERE = Path(__file__).parent


def records(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of a sessions file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_record_format(tracer: SessionTracer, tmp_path: Path) -> None:
    """One line per finished session with ids, status, timestamps, phases and counters."""
    with at.task_scope(23), at.session_scope() as session_id:
        with at.trace_session_phase("generate"):
            pass
        with at.trace_session_phase("reward"):
            pass
        at.increment_counter("tokens", 12)
        at.increment_counter("tokens", 3)
        at.trace_session_event("finalized", status="rejected", reason="stale_weight")
    assert tracer.flush(5.0)
    (record,) = records(tmp_path / "sessions-r0.jsonl")
    assert record["task_id"] == 23
    assert record["session_id"] == session_id
    assert session_id.startswith(f"0-{os.getpid():x}")
    assert (record["rank"], record["role"], record["run_id"]) == (0, None, "t")
    assert (record["status"], record["reason"]) == ("rejected", "stale_weight")
    assert record["finalized_ts"] >= record["submit_ts"]
    assert record["total_s"] == pytest.approx(
        record["finalized_ts"] - record["submit_ts"], abs=1e-6
    )
    assert set(record["phases"]) == {"generate", "reward"}
    assert "toolcall_s" not in record
    for phase in ("generate", "reward"):
        (execution,) = record["phases"][phase]
        assert execution["truncated"] is False
        assert execution["end_ts"] >= execution["start_ts"]
        assert record[f"{phase}_s"] <= record["total_s"]
    assert record["counters"] == {"tokens": 15}


@pytest.mark.anyio
async def test_finalized_while_a_sibling_is_generating(
    tracer: SessionTracer, tmp_path: Path
) -> None:
    """gather re-raises one sample's error; the task is finalized while a sibling generates.

    The sibling's open execution is closed at finalized_ts and flagged truncated;
    its later phase end and events are dropped and counted, never applied.
    """
    sibling_inside = anyio.Event()
    release = anyio.Event()

    async def failing() -> None:
        with at.session_scope():
            async with at.atrace_session_phase("generate"):
                await sibling_inside.wait()
                raise RuntimeError("engine error")

    async def sibling() -> None:
        with at.session_scope():
            async with at.atrace_session_phase("generate"):
                sibling_inside.set()
                await release.wait()  # still generating when the task is finalized
            at.increment_counter("late")
            at.trace_session_event("reward_start")
            at.trace_session_event("finalized", status="accepted")

    with at.task_scope("prompt-7"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sibling)
            try:
                await failing()
            except RuntimeError:
                at.trace_session_event("finalized", task_id="prompt-7", status="failed")
            dropped_before = tracer.stats()["dropped_events"]
            release.set()
    assert tracer.stats()["dropped_events"] - dropped_before == 4
    assert tracer.flush(5.0)
    by_status = {r["status"]: r for r in records(tmp_path / "sessions-r0.jsonl")}
    assert len(by_status) == 1  # both failed: the erroring one on exit, the sibling by task
    lines = records(tmp_path / "sessions-r0.jsonl")
    assert len(lines) == 2
    truncated = [r for r in lines if r["phases"]["generate"][0]["truncated"]]
    assert len(truncated) == 1
    record = truncated[0]
    assert record["phases"]["generate"][0]["end_ts"] == record["finalized_ts"]
    assert record["counters"] == {}
    assert "reward" not in record["phases"]
    for line in lines:
        assert line["generate_s"] <= line["total_s"]
    assert tracer.stats()["live_sessions"] == 0
    assert tracer.stats()["live_tasks"] == 0


def test_overlapping_executions_never_exceed_total(tracer: SessionTracer, tmp_path: Path) -> None:
    """Concurrent executions of one phase count once: <phase>_s <= total_s."""
    with at.session_scope() as session_id:
        runs = [tracer.phase_start(session_id, "toolcall") for _ in range(5)]
        for run in runs:
            tracer.phase_end(session_id, run)
        at.trace_session_event("finalized", status="accepted")
    tracer.flush(5.0)
    (record,) = records(tmp_path / "sessions-r0.jsonl")
    assert len(record["phases"]["toolcall"]) == 5
    assert record["toolcall_s"] <= record["total_s"]


def test_single_shot_phase(tracer: SessionTracer, tmp_path: Path) -> None:
    """A second execution of an allow_multiple=False phase is dropped and counted."""
    at.register_phase("validation_once", allow_multiple=False)
    with at.session_scope():
        for _ in range(2):
            with at.trace_session_phase("validation_once"):
                pass
        at.trace_session_event("finalized", status="accepted")
    tracer.flush(5.0)
    (record,) = records(tmp_path / "sessions-r0.jsonl")
    assert len(record["phases"]["validation_once"]) == 1
    assert tracer.stats()["dropped_events"] >= 2  # the refused start and its end


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_payloads_reach_the_record(tracer: SessionTracer, tmp_path: Path) -> None:
    """Phase and finalize payloads are written where they were attached."""
    with at.task_scope("t1"):
        with at.session_scope():
            with at.trace_session_phase(
                "generate", start_payload={"attempts": 2, "n": 1}, end_payload={"n": 3}
            ):
                pass
            with at.trace_session_phase("reward"):
                pass
            at.trace_session_event("toolcall_start", tool="search")
            at.trace_session_event("toolcall_end", ok=False, latency=float("nan"))
            scores = [float("inf"), 1.5]
            at.trace_session_event(
                "finalized",
                status="accepted",
                reward=0.75,
                path=Path("/x"),
                scores=scores,
                nested={(1, 2): {"deep": float("-inf")}, "s": {3}, "b": b"\xff"},
                broken=_Unprintable(),
            )
            scores.clear()  # the record keeps what was given
        with at.session_scope(), at.session_scope():
            pass  # two more sessions of the task, finalized together below
        at.trace_session_event("generate_start", task_id="t1", engine="a")
        at.trace_session_event("finalized", task_id="t1", status="dropped", batch=4)
    tracer.flush(5.0)
    first, *rest = records(tmp_path / "sessions-r0.jsonl")
    assert first["phases"]["generate"][0]["payload"] == {"attempts": 2, "n": 3}
    assert "payload" not in first["phases"]["reward"][0]
    assert first["phases"]["toolcall"][0]["payload"] == {
        "tool": "search",
        "ok": False,
        "latency": "nan",
    }
    assert first["payload"] == {
        "reward": 0.75,
        "path": "/x",
        "scores": ["inf", 1.5],
        "nested": {"(1, 2)": {"deep": "-inf"}, "s": [3], "b": "b'\\xff'"},
        "broken": "<unreadable _Unprintable>",
    }
    assert len(rest) == 2
    for record in rest:
        assert record["status"] == "dropped"
        assert record["payload"] == {"batch": 4}
        (execution,) = record["phases"]["generate"]
        assert execution["payload"] == {"engine": "a"}
        assert execution["truncated"]


@pytest.mark.parametrize("tracer_on", [False, True])
def test_unknown_names_raise_at_the_call(tracer_on: bool, tmp_path: Path) -> None:
    """Unknown phases, events and statuses raise ConfigurationError, tracer on or off."""
    tracer = SessionTracer(tmp_path / "s.jsonl") if tracer_on else None
    previous = install(tracer)
    try:
        with pytest.raises(ConfigurationError, match="generate"):
            at.trace_session_phase("genrate")
        with pytest.raises(ConfigurationError, match="generate"):
            at.atrace_session_phase("nope")
        with pytest.raises(ConfigurationError, match="register_phase"):
            at.trace_session("nope")
        with pytest.raises(ConfigurationError, match="finalized"):
            at.trace_session_event("mark_finalized")
        with pytest.raises(ConfigurationError, match="accepted"):
            at.trace_session_event("finalized", status="done")
        with pytest.raises(ConfigurationError, match="status only apply to 'finalized'"):
            at.trace_session_event("generate_start", status="accepted")
        with pytest.raises(ConfigurationError, match="reason only apply"):
            at.trace_session_event("reward_end", reason="x", extra=1)
        with pytest.raises(ConfigurationError, match=r"start_payload.*str keys"):
            at.trace_session_phase("generate", start_payload={1: "x"})  # type: ignore[dict-item]
        with pytest.raises(ConfigurationError, match=r"end_payload.*mapping"):
            at.trace_session_phase("generate", end_payload=["x"])  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="lower-case"):
            at.register_phase("Bad Name")
        with pytest.raises(ConfigurationError, match="allow_multiple"):
            at.register_phase("generate", allow_multiple=False)
        with pytest.raises(ConfigurationError, match="int or str"):
            at.task_scope(1.5)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="finite int or float"):
            at.increment_counter("x", "a")  # type: ignore[arg-type]
        for bad in (float("nan"), float("inf"), float("-inf"), True):
            with pytest.raises(ConfigurationError, match="finite int or float"):
                at.increment_counter("x", bad)
    finally:
        install(previous)
        if tracer is not None:
            tracer.shutdown(5.0)


def test_decorators_sync_and_async(tracer: SessionTracer, tmp_path: Path) -> None:
    """@session_context opens a session per call; @trace_session times a phase."""

    @at.trace_session("reward")
    def score() -> int:
        return 1

    @at.session_context()
    def sample() -> str | None:
        score()
        at.trace_session_event("finalized", status="accepted")
        return at.current_session_id()

    @at.trace_session("generate")
    async def agenerate() -> None:
        await asyncio.sleep(0)

    @at.session_context()
    async def asample() -> str | None:
        await agenerate()
        at.trace_session_event("finalized", status="accepted")
        return at.current_session_id()

    ids = {sample(), asyncio.run(asample())}
    tracer.flush(5.0)
    lines = records(tmp_path / "sessions-r0.jsonl")
    assert {r["session_id"] for r in lines} == ids
    assert {next(iter(r["phases"])) for r in lines} == {"reward", "generate"}


def test_exception_in_session_scope_finalizes_failed(
    tracer: SessionTracer, tmp_path: Path
) -> None:
    """An exception escaping session_scope finalizes the session as failed."""
    with pytest.raises(KeyError), at.session_scope():
        raise KeyError("boom")
    tracer.flush(5.0)
    (record,) = records(tmp_path / "sessions-r0.jsonl")
    assert record["status"] == "failed"
    assert "KeyError" in record["reason"]


def test_pending_sessions_written_at_shutdown(tmp_path: Path) -> None:
    """Sessions never finalized are written as pending at shutdown, not lost."""
    tracer = SessionTracer(tmp_path / "s.jsonl")
    previous = install(tracer)
    try:
        with at.session_scope(), at.trace_session_phase("generate"):
            tracer.shutdown(5.0)
    finally:
        install(previous)
    (record,) = records(tmp_path / "s.jsonl")
    assert record["status"] == "pending"
    assert record["phases"]["generate"][0]["truncated"] is True


@pytest.mark.slow
def test_threads_and_tasks_write_every_session_exactly_once(
    tracer: SessionTracer, tmp_path: Path
) -> None:
    """4 threads x 10,000 sessions + 1,000 concurrent asyncio sessions: each written once."""
    made: list[list[str]] = [[] for _ in range(5)]

    def thread_work(slot: int) -> None:
        for i in range(10_000):
            with at.task_scope(f"t{slot}-{i % 50}"), at.session_scope() as sid:
                with at.trace_session_phase("generate"):
                    pass
                at.trace_session_event("finalized", status="accepted")
            made[slot].append(sid)

    async def async_work() -> None:
        async def one(i: int) -> None:
            with at.task_scope(f"a{i % 10}"), at.session_scope() as sid:
                async with at.atrace_session_phase("generate"):
                    await asyncio.sleep(0.001)
                made[4].append(sid)
            if i % 100 == 99:  # some finalized by task, some by session
                at.trace_session_event("finalized", task_id=f"a{i % 10}", status="accepted")

        await asyncio.gather(*(one(i) for i in range(1000)))
        for task in range(10):
            at.trace_session_event("finalized", task_id=f"a{task}", status="dropped")

    threads = [threading.Thread(target=thread_work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    asyncio.run(async_work())
    for thread in threads:
        thread.join()
    assert tracer.flush(30.0)
    written = [r["session_id"] for r in records(tmp_path / "sessions-r0.jsonl")]
    expected = [sid for slot in made for sid in slot]
    assert len(expected) == 41_000
    assert len(written) == len(set(written)) == 41_000
    assert set(written) == set(expected)
    stats = tracer.stats()
    assert (stats["live_sessions"], stats["live_tasks"]) == (0, 0)


@pytest.mark.slow
def test_memory_stays_flat(tracer: SessionTracer) -> None:
    """25,000 sessions: task maps and written records are released (a leak of even
    one small object per session, ~50 bytes, would be over 1 MB)."""

    def run(count: int) -> None:
        for i in range(count):
            with at.task_scope(i), at.session_scope():
                with at.trace_session_phase("generate"), at.trace_session_phase("reward"):
                    pass
                at.trace_session_event("finalized", status="accepted")
        assert tracer.flush(30.0)

    run(5_000)  # warm caches and allocator pools
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run(25_000)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 256 * 1024, f"grew by {after - before} bytes"
    stats = tracer.stats()
    assert (stats["live_sessions"], stats["live_tasks"], stats["written"]) == (0, 0, 30_000)


def test_spans_carry_ids_and_join_records(tmp_path: Path) -> None:
    """Every span opened in a session carries its ids; spans join records by them."""
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "output_dir": str(tmp_path),
            "session_tracer": {"enabled": True},
        }
    )
    try:

        async def sample(task: int) -> None:
            with at.task_scope(task), at.session_scope():
                with at.managed_span("generation", "gen"):
                    async with at.atrace_session_phase("generate"):
                        await asyncio.sleep(0)
                with at.managed_span("reward", "score"):
                    pass
                at.trace_session_event("finalized", status="accepted")

        async def main() -> None:
            await asyncio.gather(*(sample(i) for i in range(20)))

        asyncio.run(main())
        assert telemetry.flush(10.0)
        exporter = telemetry.memory_exporter
        assert exporter is not None
        spans = exporter.get_finished_spans()
    finally:
        telemetry.shutdown()
    recs = {r["session_id"]: r for r in records(tmp_path / "sessions-r0.jsonl")}
    assert len(spans) == 40
    for span in spans:
        attrs = dict(span.attributes or {})
        record = recs[attrs["rl.session_id"]]
        assert record["task_id"] == attrs["rl.task_id"]
        assert record["submit_ts"] * 1e9 <= span.start_time  # type: ignore[operator]


def _run_child(mode: str, tmp_path: Path, spans: bool) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "_session_child.py"),
            mode,
            str(tmp_path),
            "1" if spans else "0",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _expect_all(tmp_path: Path) -> None:
    lines = records(tmp_path / "sessions-r0.jsonl")
    assert len(lines) == len({r["session_id"] for r in lines}) == 300
    assert {r["task_id"] for r in lines} == {0, 1, 2}
    assert all(r["status"] == "accepted" for r in lines)


@pytest.mark.parametrize("spans", [False, True], ids=["sessions-only", "with-spans"])
def test_process_exit_writes_every_session(tmp_path: Path, spans: bool) -> None:
    """Normal exit: atexit writes every finished session, span tracing on or off."""
    with _run_child("exit", tmp_path, spans) as child:
        child.communicate(timeout=60)
    assert child.returncode == 0
    _expect_all(tmp_path)


def test_flush_then_sigkill_loses_nothing(tmp_path: Path) -> None:
    """flush() returns once sessions are written: a SIGKILL after it loses none."""
    with _run_child("flush-kill", tmp_path, spans=False) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "flushed True"
        child.kill()
        child.wait(timeout=30)
    _expect_all(tmp_path)


def test_sigterm_writes_every_session(tmp_path: Path) -> None:
    """handle_sigterm: the sessions are written before the process dies of SIGTERM."""
    with _run_child("sigterm", tmp_path, spans=True) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGTERM
    _expect_all(tmp_path)


@pytest.mark.anyio
async def test_session_scopes_on_every_backend(tracer: SessionTracer, tmp_path: Path) -> None:
    """Sessions in concurrent tasks stay separate on asyncio, uvloop and trio."""
    seen: dict[int, str | None] = {}

    async def one(i: int) -> None:
        with at.task_scope(i), at.session_scope() as sid:
            async with at.atrace_session_phase("generate"):
                await anyio.sleep(0.001)
            assert at.current_session_id() == sid
            assert at.current_task_id() == i
            seen[i] = sid
            at.trace_session_event("finalized", status="accepted")

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(one, i)
    tracer.flush(5.0)
    lines = records(tmp_path / "sessions-r0.jsonl")
    assert {r["task_id"]: r["session_id"] for r in lines} == seen


def test_ids_are_never_reused_by_a_new_tracer(tmp_path: Path) -> None:
    """Two tracers in one process (reconfiguration) never hand out the same id."""
    ids = set()
    for name in ("a.jsonl", "b.jsonl"):
        tracer = SessionTracer(tmp_path / name)
        ids |= {tracer.register(None) for _ in range(3)}
        tracer.shutdown(5.0)
    assert len(ids) == 6


def test_values_the_fast_encoder_refuses_cost_no_record(
    tracer: SessionTracer, tmp_path: Path
) -> None:
    """A lone surrogate in a reason and a huge integer counter: every record is written."""
    for i in range(5):
        with at.session_scope() as sid:
            if i == 1:
                tracer.count(sid, "tokens", 10**400)
                tracer.count(sid, "odd", 1j)  # type: ignore[arg-type]  # not a real number
            reason = "bad path caf\udcff" if i == 3 else None
            at.trace_session_event("finalized", status="rejected", reason=reason)
    assert tracer.flush(5.0)
    lines = records(tmp_path / "sessions-r0.jsonl")
    assert len(lines) == 5
    assert [r["counters"] for r in lines].count({"tokens": 10**400, "odd": "1j"}) == 1
    assert [r["reason"] for r in lines].count("bad path caf\udcff") == 1
    assert tracer.stats()["written"] == 5


def test_an_infinite_counter_costs_no_other_record(tracer: SessionTracer, tmp_path: Path) -> None:
    """A counter JSON cannot hold is written as a string; its neighbours are unaffected."""
    for i in range(5):
        with at.session_scope() as sid:
            if i == 2:
                tracer.count(sid, "loss", float("inf"))
            at.trace_session_event("finalized", status="accepted")
    tracer.flush(5.0)
    lines = records(tmp_path / "sessions-r0.jsonl")
    assert len(lines) == 5
    assert [r["counters"] for r in lines].count({"loss": "inf"}) == 1


def test_the_writer_starts_on_a_fresh_line_after_a_torn_tail(tmp_path: Path) -> None:
    """A file ending in half a line (a killed writer): the next record is not glued to it."""
    path = tmp_path / "sessions-r0.jsonl"
    path.write_bytes(b'{"session_id":"whole"}\n{"session_id":"to')
    tracer = SessionTracer(path, flush_threshold=1)
    session_id = tracer.register(1)
    tracer.finalize(session_id, None, "accepted", None)
    assert tracer.shutdown(5.0)
    lines = path.read_bytes().splitlines()
    assert lines[:2] == [b'{"session_id":"whole"}', b'{"session_id":"to']
    assert json.loads(lines[2])["session_id"] == session_id


def _session_id_of_a_forked_child(tmp_path: Path) -> tuple[int, str]:
    """Fork; the child opens one session and reports its id. (The child's pid, the id.)"""
    out = tmp_path / "child-id"
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            with at.session_scope() as session_id:
                out.write_text(session_id)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return pid, out.read_text()


def test_sessions_without_a_tracer_get_ids_of_their_own_process(tmp_path: Path) -> None:
    """With the session tracer off, ids still stamp spans: unique, naming this process.

    A forked child (a data-loader worker) names its own pid, not the parent's,
    so the two never make the same id.
    """
    previous = install(None)
    try:
        with at.session_scope() as first, at.session_scope() as second:
            assert first != second
        assert re.match(rf"u{os.getpid():x}[0-9a-f]{{16}}-", first), first
        pid, child = _session_id_of_a_forked_child(tmp_path)
        assert re.match(rf"u{pid:x}[0-9a-f]{{16}}-", child), child
        assert child.split("-")[0] != first.split("-")[0]  # the child's own nonce too
        with at.session_scope() as later:
            assert later.startswith(first.split("-")[0] + "-")
    finally:
        install(previous)


def test_a_forked_child_draws_its_own_id_nonce(tmp_path: Path) -> None:
    """Session ids are ``rank-<pid><nonce>-n``: a forked child inherits the counter, and a
    pid freed by one child may be given to the next, so each child draws its own nonce."""
    tracer = SessionTracer(tmp_path / "sessions.jsonl", rank=0)
    previous = install(tracer)
    try:
        with at.session_scope() as parent_id:
            pass
        pid, child_id = _session_id_of_a_forked_child(tmp_path)
        parent_nonce = parent_id.split("-")[1].removeprefix(f"{os.getpid():x}")
        assert child_id.split("-")[1] != f"{pid:x}{parent_nonce}", child_id  # its own nonce
        assert child_id.split("-")[1].startswith(f"{pid:x}")
    finally:
        install(previous)
        tracer.shutdown()


def test_a_phase_object_entered_while_open_raises_and_after_exit_times_anew(
    tracer: SessionTracer, tmp_path: Path
) -> None:
    """One phase object times one execution at a time. Entered again once exited, it
    times a new one (a refused single-shot start leaves the first execution alone);
    entered while open (nested, or shared by another session) it raises, and the
    open execution is timed as if nothing happened."""
    at.register_phase("validation_reused", allow_multiple=False)
    with at.session_scope() as first:
        phase = at.trace_session_phase("validation_reused")
        with phase:
            pass
        with phase:  # refused: a single-shot phase ran already
            threading.Event().wait(0.05)
        shared = at.trace_session_phase("generate")
        with shared:
            with pytest.raises(RuntimeError, match="already entered"):
                with shared:
                    pass
            with at.session_scope() as second:
                with pytest.raises(RuntimeError, match="already entered"):
                    with shared:
                        pass
                at.trace_session_event("finalized", status="accepted")
        at.trace_session_event("finalized", status="accepted")
    assert tracer.flush(5.0)
    by_id = {r["session_id"]: r for r in records(tmp_path / "sessions-r0.jsonl")}
    (validation,) = by_id[first]["phases"]["validation_reused"]
    assert validation["end_ts"] - validation["start_ts"] < 0.04  # not the refused one's end
    (generate,) = by_id[first]["phases"]["generate"]
    assert not generate["truncated"]
    assert "generate" not in by_id[second]["phases"]
    assert tracer.stats()["dropped_events"] == 2  # the refused start and its end


@pytest.mark.parametrize("tracer_on", [True, False])
def test_event_ids_of_the_wrong_type_raise_at_the_call(tracer_on: bool, tmp_path: Path) -> None:
    """A session id that is not a str, or a task id that is not an int or str (a bool
    included), is a ConfigurationError naming the argument, tracer on or off."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl") if tracer_on else None
    previous = install(tracer)
    try:
        with at.task_scope(1), at.session_scope():
            cases: list[dict[str, Any]] = [
                {"session_id": ["s"]},
                {"session_id": 7},
                {"task_id": [1]},
                {"task_id": True},
                {"task_id": 1.0},
            ]
            for event in ("finalized", "generate_start"):
                status = {"status": "accepted"} if event == "finalized" else {}
                for ids in cases:
                    name = next(iter(ids))
                    with pytest.raises(ConfigurationError, match=rf"\({name}\)"):
                        at.trace_session_event(event, **ids, **status)
            at.trace_session_event("finalized", task_id=1, status="accepted")
        if tracer is not None:
            assert tracer.stats()["written"] == 0 or tracer.flush(5.0)
            assert tracer.stats()["live_sessions"] == 0  # finalized by its task id
    finally:
        install(previous)
        if tracer is not None:
            tracer.shutdown(5.0)


def test_counters_take_any_real_number_and_never_raise_on_a_sum(
    tracer: SessionTracer, tmp_path: Path
) -> None:
    """numpy's numbers and fractions count as ints and floats; a value no float holds is
    refused at the call; a sum past a float's range is written as "inf", not raised."""
    np = pytest.importorskip("numpy")
    from fractions import Fraction

    with at.session_scope():
        at.increment_counter("tokens", np.int64(5))
        at.increment_counter("tokens", np.int32(2))
        at.increment_counter("share", np.float32(0.5))
        at.increment_counter("share", Fraction(1, 4))
        for bad in (10**400, float("nan"), np.float64("inf"), "3", True, 1j):
            with pytest.raises(ConfigurationError, match=r"increment_counter\(value\)"):
                at.increment_counter("tokens", bad)
        huge = int(1.7e308)
        at.increment_counter("big", huge)
        at.increment_counter("big", huge)  # an int sum: past a float's range
        at.increment_counter("big", 1.0)  # int + float would raise OverflowError
        at.trace_session_event("finalized", status="accepted")
    assert tracer.flush(5.0)
    (record,) = records(tmp_path / "sessions-r0.jsonl")
    assert record["counters"] == {"tokens": 7, "share": 0.75, "big": "inf"}
    assert type(record["counters"]["tokens"]) is int


def test_a_payload_int_too_long_to_write_costs_only_itself(
    tracer: SessionTracer, tmp_path: Path
) -> None:
    """An int whose decimal text Python refuses to make (over 4300 digits) becomes a note of
    its size; numpy integers are written as numbers; the record is written."""
    np = pytest.importorskip("numpy")
    with at.session_scope():
        at.trace_session_event(
            "finalized", status="accepted", big=10**5000, ok=2**70, n=np.int64(3), x=[-(1 << 5000)]
        )
    assert tracer.flush(5.0)
    (record,) = records(tmp_path / "sessions-r0.jsonl")
    assert record["payload"] == {
        "big": "<int of 16610 bits>",
        "ok": 2**70,
        "n": 3,
        "x": ["<int of 5001 bits>"],
    }


def test_a_session_registered_after_shutdown_is_not_kept(tmp_path: Path) -> None:
    """A caller that found the tracer just before its shutdown gets an id; the session is
    not kept where nothing would write it: its events are dropped and counted."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl")
    assert tracer.shutdown(5.0)
    session_id = tracer.register(3)
    tracer.phase_start(session_id, "generate")
    tracer.finalize(session_id, None, "accepted", None)
    stats = tracer.stats()
    assert (stats["live_sessions"], stats["live_tasks"]) == (0, 0)
    assert stats["dropped_events"] == 3


def test_a_forked_child_keeps_no_session_of_its_own_until_it_configures(tmp_path: Path) -> None:
    """In a forked child the parent's tracer writes nothing: sessions opened there are not
    kept, and their events are dropped and counted (not queued as failed records)."""
    tracer = SessionTracer(tmp_path / "sessions.jsonl")
    previous = install(tracer)
    out = tmp_path / "child-stats"
    try:
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 1
            try:
                with at.session_scope():
                    with at.trace_session_phase("generate"):
                        pass
                    at.trace_session_event("finalized", status="accepted")
                out.write_text(json.dumps(tracer.stats()))
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        stats = json.loads(out.read_text())
        assert stats["live_sessions"] == 0
        assert stats["failed"] == 0
        assert stats["dropped_events"] == 4  # the registration, the phase (start, end), finalize
    finally:
        install(previous)
        tracer.shutdown(5.0)


def test_a_phase_object_entered_while_open_raises_with_the_tracer_off_too() -> None:
    """The rule does not depend on the tracer: code that nests one phase object in itself
    fails in development as it would in production."""
    previous = install(None)
    try:
        phase = at.trace_session_phase("generate")
        with phase:
            with pytest.raises(RuntimeError, match="already entered"):
                with phase:
                    pass
        with phase:  # exited: it may be entered again
            pass
    finally:
        install(previous)


def test_numpy_integers_are_task_ids(tracer: SessionTracer, tmp_path: Path) -> None:
    """A task id that is a numpy integer is the int it stands for, in task_scope and in
    trace_session_event (which finalizes the task's sessions by it)."""
    np = pytest.importorskip("numpy")
    with at.task_scope(np.int64(7)) as task_id, at.session_scope():
        assert task_id == 7
        assert type(task_id) is int
    at.trace_session_event("finalized", task_id=np.int32(7), status="accepted")
    assert tracer.flush(5.0)
    (record,) = records(tmp_path / "sessions-r0.jsonl")
    assert (record["task_id"], record["status"]) == (7, "accepted")


_GC_FINALIZER_CHILD = """
import gc, json, numbers, os, sys, threading
import asynctrace as at
from asynctrace._session_tracer import current_tracer

telemetry = at.configure({"output_dir": sys.argv[1], "session_tracer": {"enabled": True}})
inside = []  # thresholds at which a finalizer ran inside the tracer


class Sample:
    # A cycle, so the cyclic GC frees it, at some allocation of this thread: maybe one
    # made while this thread is inside the tracer, holding its lock.
    def __init__(self, session_id):
        self.session_id = session_id
        self.me = self

    def __del__(self):
        lock = current_tracer()._lock  # a plain Lock has no owner: only this thread takes it
        if (lock._is_owned if hasattr(lock, "_is_owned") else lock.locked)():
            inside.append(gc.get_threshold()[0])
        at.trace_session_event(
            "finalized", session_id=self.session_id, status="dropped", reason="gc", by="del"
        )


class Arm:
    # A payload number whose conversion leaves a Sample as garbage, for the GC to free at
    # the threshold-th allocation after: one of them falls inside the tracer.
    def __init__(self, session_id, threshold):
        self.session_id, self.threshold = session_id, threshold

    def __float__(self):
        gc.collect()
        gc.set_threshold(self.threshold)
        Sample(self.session_id)
        return 1.0


numbers.Real.register(Arm)


def work():
    for i in range(240):
        with at.task_scope(i % 7), at.session_scope() as session_id:
            at.trace_session_event("generate_start", arm=Arm(session_id, 1 + i % 8))
            at.increment_counter("tokens", 3)
            at.trace_session_event("generate_end")
        gc.set_threshold(700)
    gc.collect()


worker = threading.Thread(target=work, daemon=True)
worker.start()
worker.join(20)
print("stuck" if worker.is_alive() else "done", flush=True)
if worker.is_alive():
    os._exit(1)  # exit handlers would wait for the lock the worker holds
else:
    gc.collect()  # a Sample the worker's last collection left (one freed on another thread)
    telemetry.shutdown()
    records = [json.loads(line) for line in open(telemetry.sessions.path)]
    print(json.dumps([len(records), sorted({(r["status"], r["reason"]) for r in records})]))
    print(json.dumps(sorted({json.dumps(r["payload"]) for r in records})))
    print(len(inside))
"""


def test_a_gc_finalizer_using_the_session_api_inside_the_tracer_does_not_deadlock(
    tmp_path: Path,
) -> None:
    """A ``__del__`` that finalizes its session, run by the cyclic GC while its thread holds
    the tracer's lock: the call goes through (the lock is reentrant) and every session is
    written once, as the finalizer said, with its payload."""
    result = subprocess.run(
        [sys.executable, "-c", _GC_FINALIZER_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = result.stdout.splitlines()
    assert lines[:1] == ["done"], result.stderr[-2000:]
    count, kinds = json.loads(lines[1])
    assert count == 240
    assert kinds == [["dropped", "gc"]]
    assert json.loads(lines[2]) == ['{"by": "del"}']
    assert int(lines[3]) > 0  # the case this is about did happen


def test_a_finalize_made_inside_the_tracer_is_written_once_that_code_is_done(
    tmp_path: Path,
) -> None:
    """Re-entered on the thread that holds the lock (as a GC finalizer is), a finalize takes
    the session at once (later events are dropped) but hands it to the writer only outside:
    the interrupted code may still be changing the record."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", run_id="t")
    session_id = tracer.register(4)
    handle = tracer.phase_start(session_id, "generate")
    seen: list[object] = []

    def inside() -> None:
        with tracer._lock:
            seen.append(tracer.finalize(session_id, None, "dropped", "gc", {"by": "del"}))
            seen.append(tracer.stats()["live_sessions"])
            seen.append(tracer.stats()["written"])
        with tracer._lock:  # by task id too
            seen.append(tracer.register(5))
            seen.append(tracer.finalize(None, 5, "rejected", None))

    worker = threading.Thread(target=inside, daemon=True)
    worker.start()
    worker.join(10.0)
    assert not worker.is_alive(), "deadlocked on its own lock"
    finalized, live, written, other, by_task = seen
    assert (finalized, live, written, by_task) == (1, 1, 0, 1)  # live until handed over
    tracer.phase_end(session_id, handle)  # after the finalize: dropped
    assert tracer.stats()["dropped_events"] == 1
    assert tracer.shutdown(5.0)
    by_id = {r["session_id"]: r for r in records(tmp_path / "sessions-r0.jsonl")}
    assert (by_id[session_id]["status"], by_id[session_id]["reason"]) == ("dropped", "gc")
    assert by_id[session_id]["payload"] == {"by": "del"}
    assert by_id[session_id]["phases"]["generate"][0]["truncated"] is True
    assert by_id[other]["status"] == "rejected"


def test_a_shutdown_inside_the_tracers_lock_writes_what_was_finalized_there(
    tmp_path: Path,
) -> None:
    """A finalize and then a shutdown, both from inside the lock (a finalizer, a callback):
    the session is written, not left behind with nothing counting it."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", run_id="t")
    session_id = tracer.register(9)
    with tracer._lock:
        assert tracer.finalize(session_id, None, "accepted", None) == 1
        assert tracer.shutdown(5.0)
    (record,) = records(tmp_path / "sessions-r0.jsonl")
    assert (record["session_id"], record["status"]) == (session_id, "accepted")


def test_a_forked_childs_flush_of_the_inherited_writer_says_what_the_parent_wrote(
    tmp_path: Path,
) -> None:
    """In a forked child the writer is inert: its flush answers from the counts it
    inherited (everything written, nothing lost: True), not from a sync it will never
    make."""
    path = tmp_path / "sessions-r0.jsonl"
    tracer = SessionTracer(path, flush_threshold=1)
    tracer.finalize(tracer.register(1), None, "accepted", None)
    for _ in range(1000):  # written by the threshold, never synced by a flush
        if tracer.stats()["written"] == 1:
            break
        time.sleep(0.005)
    assert flush_in_a_fork(tracer, tmp_path / "child") == "True"
    assert tracer.shutdown(5.0)


@pytest.mark.parametrize(
    "make", [lambda: at.task_scope(1), at.session_scope], ids=["task", "session"]
)
def test_task_and_session_scopes_refuse_a_second_entry(make: Any) -> None:
    """Entered again while entered: RuntimeError, and the first block still resets."""

    def run() -> tuple[object, object]:
        with at.task_scope(0):
            scope = make()
            with scope:
                inside = (at.current_task_id(), at.current_session_id())
                with pytest.raises(RuntimeError, match="already entered"):
                    scope.__enter__()
                assert (at.current_task_id(), at.current_session_id()) == inside
            return at.current_task_id(), at.current_session_id()

    assert contextvars.copy_context().run(run) == (0, None)


def test_a_task_scope_shared_by_two_tasks_resets_in_both() -> None:
    """A second task entering the entered object is refused; neither keeps its id."""

    async def main() -> list[object]:
        shared = at.task_scope(5)
        entered = asyncio.Event()
        after: list[object] = []

        async def first() -> None:
            with shared:
                entered.set()
                await asyncio.sleep(0.01)
            after.append(at.current_task_id())

        async def second() -> None:
            await entered.wait()
            with pytest.raises(RuntimeError, match="already entered"):
                shared.__enter__()
            after.append(at.current_task_id())

        await asyncio.gather(first(), second())
        return after

    assert asyncio.run(main()) == [None, None]
