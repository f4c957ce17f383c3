"""Sessions at their edges: str-subclass task ids, evictions below the flush threshold,
decorated callable objects and static or class methods, a phase object shared by two
threads or copied, the evicted-record room with a chunk being written."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import pickle
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from _forks import flush_in_a_fork
from _hung_writes import hang_writes

import asynctrace as at
from asynctrace._errors import ConfigurationError
from asynctrace._session_record import Record, record_dict
from asynctrace._session_tracer import EVICTED, SessionTracer, install
from asynctrace._session_writer import SessionWriter


def _records(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _sessions(telemetry: Any) -> SessionTracer:
    sessions = telemetry.sessions
    assert isinstance(sessions, SessionTracer)
    return sessions


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "asynctrace" and r.levelno == logging.WARNING and text in r.getMessage()
    ]


# -- a str-subclass task id is the plain str it holds -------------------------------------

_URL = "https://user:hunter2@host/item?token=abc"
_REDACTED = "https://host/item?token=REDACTED"


class _Unhashable(str):
    """A str subclass that cannot key a dict, and prints as something else."""

    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        return "not the value"


def test_a_str_subclass_task_id_is_recorded_redacted_bounded_and_joins_its_spans(
    tmp_path: Path,
) -> None:
    """numpy.str_ task ids are redacted and bounded in the record as ``rl.task_id`` is
    on spans; an unhashable str subclass is the plain str it holds (no crash, no
    session left pending)."""
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["memory"],
            "span_groups": "all",
            "output_dir": str(tmp_path),
            "session_tracer": {"enabled": True},
        }
    )
    np = pytest.importorskip("numpy")
    for task_id in (np.str_(_URL), np.str_("x" * 200_000), _Unhashable("abc")):
        with at.task_scope(task_id) as entered, at.session_scope():
            assert type(entered) is str
            with at.managed_span("generation", "rollout.generate"):
                pass
            at.trace_session_event("finalized", status="accepted")
    assert telemetry.flush()
    exporter = telemetry.memory_exporter
    assert exporter is not None
    spans = [(s.attributes or {}).get("rl.task_id") for s in exporter.get_finished_spans()]
    stats = _sessions(telemetry).stats()
    path = _sessions(telemetry).path
    telemetry.shutdown()
    found = [r["task_id"] for r in _records(path)]
    assert found[0] == spans[0] == _REDACTED
    assert len(found[1]) < 100_000
    assert found[1] == spans[1]
    assert found[2] == spans[2] == "abc"
    assert [r["status"] for r in _records(path)] == ["accepted"] * 3
    assert stats["live_sessions"] == 0


def test_a_tracer_and_a_record_take_a_str_subclass_as_its_plain_str(tmp_path: Path) -> None:
    """Called directly, a tracer registers an unhashable str subclass, and a record made
    with a numpy.str_ is written redacted."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", run_id="t")
    try:
        session_id = tracer.register(_Unhashable("abc"))
        assert tracer.finalize(None, "abc", "accepted", None) == 1
        assert not tracer.is_pending(session_id)
    finally:
        assert tracer.shutdown(5.0)
    np = pytest.importorskip("numpy")
    record = Record("s1", np.str_(_URL), 1)
    out = record_dict(record, "accepted", None, 2, run_id="t", rank=0, role=None)
    assert out["task_id"] == _REDACTED


# -- evicted sessions below the flush threshold ------------------------------------------


def test_evicted_sessions_reach_the_file_with_max_pending_below_the_flush_threshold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``max_pending`` 10 with the default threshold (100): every evicted session is
    written by a healthy writer, none counted failed, and flush() says so."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    telemetry = at.configure(
        {"output_dir": str(tmp_path), "session_tracer": {"enabled": True, "max_pending": 10}}
    )
    with at.task_scope(1):
        for _ in range(200):
            with at.session_scope():
                pass  # never finalized
    assert _sessions(telemetry).flush() is True
    stats = _sessions(telemetry).stats()
    path = _sessions(telemetry).path
    telemetry.shutdown()
    assert (stats["evicted"], stats["failed"], stats["written"]) == (190, 0, 190)
    written = _records(path)
    assert len(written) == 200
    assert sum(r["reason"] == EVICTED for r in written) == 190
    (warning,) = _warnings(caplog, "session_tracer.max_pending")
    assert "while 200 records wait to be written" in warning  # two flush thresholds
    assert not _warnings(caplog, "held for the writer")


def test_the_full_writer_warning_gives_the_records_held_and_the_bound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused records are warned about with the count held at the refusal and the
    bound they were refused past."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    writer = SessionWriter(
        tmp_path / "sessions-r0.jsonl", rank=0, role=None, run_id="t", flush_threshold=10**6
    )
    try:
        assert writer.add([Record(f"f{i}", i, 1) for i in range(50)], "accepted", None, 2) == 0
        assert writer.add([Record(f"e{i}", i, 1) for i in range(10)], "pending", EVICTED, 2, 20)
        writer.behind()
    finally:
        writer.shutdown(30.0)
    (warning,) = _warnings(caplog, "not kept")
    assert f"50 session records are held for the writer of {writer.path} (20 at most)" in warning


# -- callable objects with an async __call__ ---------------------------------------------


class _Reward:
    async def __call__(self, value: int) -> float:
        await asyncio.sleep(0.05)
        return float(value)


class _Sample:
    def __init__(self, reward: Callable[[int], Any]) -> None:
        self.reward = reward

    async def __call__(self) -> str | None:
        async with at.atrace_session_phase("generate"):
            await asyncio.sleep(0)
        await self.reward(1)
        at.trace_session_event("finalized", status="accepted")
        return at.current_session_id()


def test_session_decorators_await_a_callable_object_with_an_async_call(tmp_path: Path) -> None:
    """``session_context()`` and ``trace_session()`` on an object whose ``__call__`` is
    ``async def`` cover the awaited body: its phases, its timing, its finalize (the
    session it opened only, not the task's other pending one)."""
    telemetry = at.configure({"output_dir": str(tmp_path), "session_tracer": {"enabled": True}})
    reward = at.trace_session("reward")(_Reward())
    sample = at.session_context()(_Sample(reward))

    async def main() -> tuple[str, str | None]:
        async with at.task_scope(1), at.session_scope() as other:
            return other, await sample()

    other, sampled = asyncio.run(main())
    path = _sessions(telemetry).path
    telemetry.shutdown()
    by_id = {r["session_id"]: r for r in _records(path)}
    assert by_id[other]["status"] == "pending"  # left alone by the sample's finalize
    record = by_id[sampled]
    assert record["status"] == "accepted"
    assert [e["truncated"] for e in record["phases"]["generate"]] == [False]
    assert record["reward_s"] >= 0.05  # the awaited sleep, not the making of a coroutine


class _Generates:
    def __call__(self) -> Iterator[int]:
        yield 1


class _AsyncGenerates:
    async def __call__(self) -> AsyncIterator[int]:
        yield 1


@pytest.mark.parametrize("target", [_Generates(), _AsyncGenerates(), 5])
def test_session_decorators_refuse_what_they_cannot_time(target: Any) -> None:
    for decorator in (at.session_context(), at.trace_session("reward")):
        with pytest.raises(ConfigurationError):
            decorator(target)


# -- one phase object, two threads -------------------------------------------------------


def _at_each_line(code: Any, step: Callable[[], None]) -> Callable[..., Any]:
    """A trace function calling *step* before each line of *code*'s frames."""

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            step()
        return local

    def call(frame: FrameType, event: str, arg: object) -> Any:
        return local if event == "call" and frame.f_code is code else None

    return call


class _Other:
    """Another thread that tries to enter a phase object when asked, and says how it went."""

    def __init__(self, enter: Callable[[], bool]) -> None:
        self._enter = enter
        self.entered = False
        self._ask, self._told = threading.Event(), threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._ask.wait()
            self._ask.clear()
            if self._done:
                return
            self.entered = self._enter()
            self._told.set()

    def attempt(self) -> None:
        """Let the other thread try now (once it is in, it stays in)."""
        if not self.entered:
            self._ask.set()
            assert self._told.wait(30.0)
            self._told.clear()

    def stop(self) -> None:
        self._done = True
        self._ask.set()
        self._thread.join(30.0)


def _try_enter(phase: at.trace_session_phase) -> Callable[[], bool]:
    def enter() -> bool:
        try:
            phase.__enter__()
        except RuntimeError:
            return False
        return True

    return enter


def test_a_phase_object_is_entered_by_one_thread_at_a_time() -> None:
    """Another thread entering at any point of an entry: exactly one of the two gets in,
    the other gets the documented RuntimeError."""
    lines = 0
    while True:
        lines += 1
        phase = at.trace_session_phase("generate")
        other = _Other(_try_enter(phase))
        seen = 0

        def step(target: int = lines, other: _Other = other) -> None:
            nonlocal seen
            seen += 1
            if seen == target:
                other.attempt()

        sys.settrace(_at_each_line(type(phase).__enter__.__code__, step))
        try:
            mine = _try_enter(phase)()
        finally:
            sys.settrace(None)
            other.stop()
        assert mine != other.entered or not mine, f"both entered (the other at line {lines})"
        assert mine or other.entered, f"neither entered (the other at line {lines})"
        if seen < lines:  # every line of an entry tried
            break
    assert lines > 2


def test_an_exit_closes_its_own_execution_not_another_threads(tmp_path: Path) -> None:
    """Another thread enters a shared phase object the moment this thread's exit lets it:
    each thread's exit closes its own session's execution."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", run_id="t")
    previous = install(tracer)
    try:
        phase = at.trace_session_phase("generate")
        ids: dict[str, str] = {}
        ready, finish, other_done = threading.Event(), threading.Event(), threading.Event()
        asked, told = threading.Event(), threading.Event()
        entered: list[bool] = []

        def other_thread() -> None:
            with at.task_scope(2), at.session_scope() as session_id:
                ids["other"] = session_id
                ready.set()
                while not entered or not entered[-1]:
                    asked.wait()
                    asked.clear()
                    if finish.is_set():
                        break
                    entered.append(_try_enter(phase)())
                    told.set()
                finish.wait(30.0)
                if entered and entered[-1]:
                    phase.__exit__(None, None, None)
            other_done.set()

        thread = threading.Thread(target=other_thread, daemon=True)
        thread.start()
        assert ready.wait(30.0)

        def step() -> None:
            if not entered or not entered[-1]:
                asked.set()
                assert told.wait(30.0)
                told.clear()

        with at.task_scope(1), at.session_scope() as mine:
            phase.__enter__()
            sys.settrace(_at_each_line(type(phase).__exit__.__code__, step))
            try:
                phase.__exit__(None, None, None)
            finally:
                sys.settrace(None)
            finish.set()
            asked.set()
            assert entered
            assert entered[-1]  # the other thread got in during the exit
            assert other_done.wait(30.0)
            thread.join(30.0)
        for session_id in (mine, ids["other"]):
            assert tracer.finalize(session_id, None, "accepted", None) == 1
        assert tracer.flush(10.0)
        stats = tracer.stats()
    finally:
        install(previous)
        tracer.shutdown(10.0)
    by_id = {r["session_id"]: r for r in _records(tracer.path)}
    for session_id in (mine, ids["other"]):
        (execution,) = by_id[session_id]["phases"]["generate"]
        assert execution["truncated"] is False, session_id
    assert stats["dropped_events"] == 0


# -- a forked child's flush ----------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_that_hands_over_nothing_flushes_true(tmp_path: Path) -> None:
    """Records the parent had queued, unwritten, when it forked are the parent's: the
    child's flush, with nothing of its own, says nothing was lost."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", flush_threshold=10**6)
    for task in range(3):
        tracer.finalize(tracer.register(task), None, "accepted", None)  # queued, not written
    assert flush_in_a_fork(tracer, tmp_path / "child") == "True"
    assert tracer.shutdown(5.0)
    assert tracer.stats()["written"] == 3


# -- above @staticmethod and @classmethod -------------------------------------------------


def _env_classes() -> tuple[Any, Any]:
    """A class with every static and class method form, decorated, and a subclass."""

    class _Env:
        @at.trace_session("reward")
        @staticmethod
        async def static_async(x: int) -> int:
            await asyncio.sleep(0.05)
            return x

        @at.trace_session("reward")
        @staticmethod
        def static_sync(x: int) -> int:
            return x

        @at.trace_session("reward")
        @classmethod
        async def class_async(cls, x: int) -> tuple[type, int]:
            await asyncio.sleep(0.05)
            return cls, x

        @at.trace_session("reward")
        @classmethod
        def class_sync(cls, x: int) -> tuple[type, int]:
            return cls, x

        @at.session_context()
        @staticmethod
        async def open_static_async() -> str | None:
            await asyncio.sleep(0)
            return at.current_session_id()

        @at.session_context()
        @staticmethod
        def open_static_sync() -> str | None:
            return at.current_session_id()

        @at.session_context()
        @classmethod
        async def open_class_async(cls) -> tuple[type, str | None]:
            await asyncio.sleep(0)
            return cls, at.current_session_id()

        @at.session_context()
        @classmethod
        def open_class_sync(cls) -> tuple[type, str | None]:
            return cls, at.current_session_id()

    class _SubEnv(_Env):
        pass

    return _Env, _SubEnv


def test_session_decorators_above_staticmethod_and_classmethod_keep_the_method_kind(
    tmp_path: Path,
) -> None:
    """As ``trace_fn`` does: the function inside is wrapped and the method kind kept, so
    an instance or class call binds as the undecorated method would, and an async one
    times its awaited body (not the making of a coroutine)."""
    _Env, _SubEnv = _env_classes()
    for name, kind in (
        ("static_async", staticmethod),
        ("static_sync", staticmethod),
        ("class_async", classmethod),
        ("class_sync", classmethod),
        ("open_static_async", staticmethod),
        ("open_class_sync", classmethod),
    ):
        assert type(_Env.__dict__[name]) is kind, name
    assert asyncio.iscoroutinefunction(_Env.static_async)
    assert asyncio.iscoroutinefunction(_Env().class_async)
    telemetry = at.configure({"output_dir": str(tmp_path), "session_tracer": {"enabled": True}})

    async def main() -> tuple[str, list[Any]]:
        env = _SubEnv()
        async with at.task_scope(1), at.session_scope() as session_id:
            got = [
                await env.static_async(1),
                await _SubEnv.static_async(2),
                env.static_sync(3),
                await env.class_async(4),
                _SubEnv.class_sync(5),
            ]
            at.trace_session_event("finalized", status="accepted")
        async with at.task_scope(2):
            opened = [
                await env.open_static_async(),
                _Env.open_static_sync(),
                await env.open_class_async(),
                env.open_class_sync(),
            ]
        return session_id, got + opened

    session_id, got = asyncio.run(main())
    path = _sessions(telemetry).path
    telemetry.shutdown()
    assert got[:5] == [1, 2, 3, (_SubEnv, 4), (_SubEnv, 5)]
    opened = [got[5], got[6], got[7][1], got[8][1]]
    assert (got[7][0], got[8][0]) == (_SubEnv, _SubEnv)
    assert all(isinstance(s, str) for s in opened)
    assert len(set(opened)) == 4
    by_id = {r["session_id"]: r for r in _records(path)}
    assert set(opened) <= set(by_id)
    record = by_id[session_id]
    assert len(record["phases"]["reward"]) == 5
    assert record["reward_s"] >= 0.15  # three awaited 50 ms sleeps, not coroutine creation


# -- the evicted-record room counts the chunk being written --------------------------------


@pytest.mark.parametrize(("room", "refused"), [(100, 50), (120, 30)])
def test_evicted_records_past_the_room_are_refused_counting_the_chunk_being_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, room: int, refused: int
) -> None:
    """With a batch of 100 in a write that hangs, the room given for evicted records is
    what held() and the warning count: never more held than the room."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    writer = SessionWriter(
        tmp_path / "sessions-r0.jsonl", rank=0, role=None, run_id="t", flush_threshold=100
    )
    gate, inside = hang_writes(writer._file)
    try:
        assert writer.add([Record(f"f{i}", i, 1) for i in range(100)], "accepted", None, 2) == 0
        assert inside.wait(30.0)  # the writer took the batch and hangs in its first chunk
        assert writer.held() == 100
        evicted = [Record(f"e{i}", i, 1) for i in range(50)]
        assert writer.add(evicted, "pending", EVICTED, 2, room) == refused
        assert writer.held() == room
        writer.behind(room)
    finally:
        gate.set()
        writer.shutdown(30.0)
    (warning,) = _warnings(caplog, "not kept")
    assert f"{room} session records are held for the writer of" in warning
    assert f"({room} at most)" in warning
    assert writer.failed == refused
    assert writer.written == 150 - refused


# -- a copy of a phase object is a new object -----------------------------------------------


def test_a_copy_of_a_phase_object_has_its_own_entry(tmp_path: Path) -> None:
    """copy.copy, copy.deepcopy and pickling give an object for the same phase and
    payloads, never entered: a template entered does not lock its copies out, and a
    copy of an entered one is not entered."""
    template = at.trace_session_phase("generate", end_payload={"k": 1})
    with template:  # tracer off: every copy made of an entered object
        copies = [copy.copy(template), copy.deepcopy(template)]
        copies.append(pickle.loads(pickle.dumps(template)))
        for made in copies:
            with made:
                pass
    telemetry = at.configure({"output_dir": str(tmp_path), "session_tracer": {"enabled": True}})
    with at.task_scope(1), at.session_scope() as session_id:
        with template:  # tracer on: a copy of the object entered in a session
            more = [copy.copy(template), copy.deepcopy(template)]
            for made in more:
                with made:
                    pass
        at.trace_session_event("finalized", status="accepted")
    path = _sessions(telemetry).path
    telemetry.shutdown()
    for made in copies + more:
        assert type(made) is at.trace_session_phase
        assert made._end == {"k": 1}
    assert copies[1]._end is not template._end
    (record,) = [r for r in _records(path) if r["session_id"] == session_id]
    executions = record["phases"]["generate"]
    assert len(executions) == 3
    assert all(e["payload"] == {"k": 1} and not e["truncated"] for e in executions)
