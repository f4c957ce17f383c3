"""Signals that land while a session record is handed to the writer.

A signal's Python handler runs on the main thread between two bytecodes of
whatever it interrupted. Here a trace function raises a real signal (with
``signal.raise_signal``) at one line of the hand-over, so that the handler
installed with ``signal.signal`` runs exactly there, with the writer's or the
tracer's lock held by the interrupted code:

- a handler that calls ``asynctrace.flush()`` (the preemption warning's
  handler) returns at once: it does not let the writer take the records from
  under the interrupted code, and every record is written;
- ``KeyboardInterrupt`` (SIGINT's default handler) or ``SystemExit`` (a handler
  calling ``sys.exit``) loses no session: it stays live and is written (as
  ``dropped`` by the ``session_scope`` the exception leaves), no task entry is
  left behind, and later flushes do not wait out their timeout;
- a handler that finalizes the session being finalized (or one of the task's
  sessions being finalized) takes it first: it is written once, with the
  handler's status, and the interrupted finalization counts a dropped event.
"""

from __future__ import annotations

import inspect
import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import asynctrace
from asynctrace._session_handoff import SessionHandoff
from asynctrace._session_pending import PendingSessions
from asynctrace._session_writer import SessionWriter

FLUSH_S = 10.0  # only reached if a flush waits for a record that never comes


def _line(function: Callable[..., Any], text: str) -> tuple[str, int]:
    """(file, line number) of the one line of *function* that holds *text* (or, of
    several, the one that is *text* alone)."""
    source, first = inspect.getsourcelines(function)
    lines = [first + n for n, line in enumerate(source) if text in line]
    if len(lines) > 1:
        lines = [first + n for n, line in enumerate(source) if line.strip() == text]
    assert len(lines) == 1, f"{text!r} in {function.__qualname__}: lines {lines}"
    return inspect.getsourcefile(function) or "", lines[0]


@contextmanager
def signal_at(function: Callable[..., Any], text: str, signum: int) -> Iterator[list[bool]]:
    """Inside the block, the first time this thread reaches the line of *function* that
    holds *text*, *signum* is raised there; yields a list that holds True once it was."""
    path, lineno = _line(function, text)
    raised: list[bool] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == lineno and not raised:
            raised.append(True)
            sys.settrace(None)
            frame.f_trace = None
            signal.raise_signal(signum)  # its handler runs here, inside the hand-over
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == path and not raised:
            frame.f_trace_lines = True
            return local
        return None

    sys.settrace(tracer)
    try:
        yield raised
    finally:
        sys.settrace(None)


@contextmanager
def handler(signum: int, fn: Callable[[int, FrameType | None], Any]) -> Iterator[None]:
    previous = signal.signal(signum, fn)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def _configure(tmp_path: Path) -> Any:
    return asynctrace.configure(
        {
            "enabled": False,
            "output_dir": str(tmp_path),
            "session_tracer": {"enabled": True, "flush_threshold": 100},
        }
    )


def _written(telemetry: Any) -> dict[str, str]:
    """session id -> status, of every record in the sessions file (each id once)."""
    lines = [json.loads(line) for line in Path(telemetry.sessions.path).read_text().splitlines()]
    ids = [record["session_id"] for record in lines]
    assert len(ids) == len(set(ids)), f"a session written twice: {ids}"
    return {record["session_id"]: record["status"] for record in lines}


@pytest.mark.parametrize(
    ("function", "text", "by_task"),
    [
        (SessionWriter.add_one, "self._pending.append(record)", False),
        (SessionWriter.add, "self._pending += records", True),
    ],
)
def test_a_flush_from_a_signal_handler_inside_the_hand_over_returns_at_once(
    tmp_path: Path, function: Callable[..., Any], text: str, by_task: bool
) -> None:
    """SIGUSR1's handler calls ``asynctrace.flush()`` while the interrupted code is
    handing a record over (the writer's lock held): the flush says False at once,
    the writer does not run meanwhile, and both records are written."""
    telemetry = _configure(tmp_path)
    with asynctrace.task_scope(1), asynctrace.session_scope() as first:
        asynctrace.trace_session_event("finalized", status="accepted")  # queued, not written
    seen: list[tuple[bool, int]] = []

    def on_usr1(signum: int, frame: FrameType | None) -> None:
        ok = asynctrace.flush(timeout_s=2.0)
        seen.append((ok, telemetry.sessions.stats()["written"]))

    with handler(signal.SIGUSR1, on_usr1), asynctrace.task_scope(2):
        with asynctrace.session_scope() as second:
            if not by_task:
                with signal_at(function, text, signal.SIGUSR1) as raised:
                    asynctrace.trace_session_event("finalized", status="accepted")
        if by_task:  # the task's pending sessions, as a list
            with signal_at(function, text, signal.SIGUSR1) as raised:
                asynctrace.trace_session_event("finalized", status="accepted")
    assert raised == [True]
    # Not durable yet, and the writer wrote nothing while the hand-over was interrupted.
    assert seen == [(False, 0)]
    assert asynctrace.flush(timeout_s=FLUSH_S)
    assert _written(telemetry) == {first: "accepted", second: "accepted"}
    stats = telemetry.sessions.stats()
    assert (stats["written"], stats["failed"], stats["live_sessions"]) == (2, 0, 0)
    assert telemetry.shutdown()


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(3)


@pytest.mark.parametrize(
    ("function", "text", "by_task", "how"),
    [
        # taken from the live map, not handed over yet
        (SessionHandoff.finalize, "behind = self._writer.add_one(record", False, "sigint"),
        (SessionHandoff.finalize, "behind = self._writer.add_one(record", False, "exit"),
        # inside the take: the live entry gone, the task entry not yet
        (PendingSessions._take, "pending = self._tasks.get(task_id)", False, "sigint"),
        # the writer counted the record, has not queued it yet
        (SessionWriter.add_one, "self._pending.append(record)", False, "sigint"),
        # a task's sessions: taken, not handed over yet; and inside add()
        (SessionHandoff.finalize, "refused = self._writer.add(finished", True, "sigint"),
        (SessionHandoff.finalize, "refused = self._writer.add(finished", True, "exit"),
        (SessionWriter.add, "self._pending += records", True, "exit"),
    ],
)
def test_an_interrupt_inside_the_hand_over_loses_no_session(
    tmp_path: Path, function: Callable[..., Any], text: str, by_task: bool, how: str
) -> None:
    """SIGINT's own handler (KeyboardInterrupt), or one that calls ``sys.exit``, runs
    while a finalized session is handed to the writer: the session is written (as
    dropped: the exception left its scope), no task entry leaks, later flushes say
    True at once."""
    telemetry = _configure(tmp_path)
    signum = signal.SIGINT if how == "sigint" else signal.SIGUSR2
    fn = signal.default_int_handler if how == "sigint" else _exit
    expected = KeyboardInterrupt if how == "sigint" else SystemExit
    caught: list[BaseException] = []
    with handler(signum, fn):
        try:
            with asynctrace.task_scope(7):
                with asynctrace.session_scope() as interrupted:
                    if not by_task:
                        with signal_at(function, text, signum) as raised:
                            asynctrace.trace_session_event("finalized", status="accepted")
                if by_task:
                    with signal_at(function, text, signum) as raised:
                        asynctrace.trace_session_event("finalized", status="accepted")
        except (KeyboardInterrupt, SystemExit) as exc:  # what the signal's handler raised
            caught.append(exc)
    assert raised == [True]
    assert [type(exc) for exc in caught] == [expected]
    stats = telemetry.sessions.stats()
    # Put back: live (by task, still pending under its task), in the task map once.
    pending = 1 if by_task else 0
    assert (stats["live_sessions"], stats["live_tasks"], stats["dropped_events"]) == (
        pending,
        pending,
        0,
    )
    assert asynctrace.flush(timeout_s=FLUSH_S)
    for task in (8, 9):  # later sessions: every flush covers them, none waits its timeout
        with asynctrace.task_scope(task), asynctrace.session_scope():
            asynctrace.trace_session_event("finalized", status="accepted")
        assert asynctrace.flush(timeout_s=FLUSH_S)
    written = _written(telemetry)
    # Live when the exception left the session_scope, which wrote it as dropped
    # (by task: it had left the scope, and stays pending until shutdown).
    assert written.get(interrupted) == (None if by_task else "dropped")
    assert list(written.values()).count("accepted") == 2
    stats = telemetry.sessions.stats()
    assert stats["failed"] == 0
    assert (stats["live_sessions"], stats["live_tasks"]) == (pending, pending)
    assert telemetry.shutdown()
    assert _written(telemetry)[interrupted] == ("pending" if by_task else "dropped")


# A handler that finalizes the very session the interrupted code is finalizing: where it
# lands, the interrupted code has read the record but not taken it yet.
_BEFORE_THE_TAKE = [
    (SessionHandoff.finalize, "added = self._writer.handed_over", False),
    (PendingSessions._take, "record = self._live.get(session_id)", False),
    (SessionHandoff.finalize, "added = self._writer.handed_over  # as for one session", True),
    (PendingSessions._take, "record = self._live.get(session_id)", True),
]
_IDS = ["one-handed_over", "one-take", "task-handed_over", "task-take"]


@pytest.mark.parametrize(("function", "text", "by_task"), _BEFORE_THE_TAKE, ids=_IDS)
@pytest.mark.parametrize("scope", ["session", "task"])
def test_a_session_a_signal_handler_finalizes_inside_its_finalization_is_written_once(
    tmp_path: Path, function: Callable[..., Any], text: str, by_task: bool, scope: str
) -> None:
    """SIGUSR1's handler finalizes the session (or the whole task) the main thread is
    finalizing, after it read the record and before it took it: the handler's
    finalization wins, each session is written once, and the interrupted one counts a
    dropped event where it found nothing left to take."""
    telemetry = _configure(tmp_path)
    target: dict[str, Any] = {}

    def on_usr1(signum: int, frame: FrameType | None) -> None:
        if scope == "session":
            asynctrace.trace_session_event(
                "finalized", session_id=target["sid"], status="rejected"
            )
        else:
            asynctrace.trace_session_event("finalized", task_id=3, status="rejected")

    with handler(signal.SIGUSR1, on_usr1), asynctrace.task_scope(3):
        with asynctrace.session_scope() as first, asynctrace.session_scope() as second:
            target["sid"] = first
            with signal_at(function, text, signal.SIGUSR1) as raised:
                if by_task:  # the task's pending sessions, as a list
                    asynctrace.trace_session_event("finalized", task_id=3, status="accepted")
                else:
                    asynctrace.trace_session_event(
                        "finalized", session_id=first, status="accepted"
                    )
            if not by_task:
                asynctrace.trace_session_event("finalized", session_id=second, status="failed")
    assert raised == [True]
    assert asynctrace.flush(timeout_s=FLUSH_S)
    # The handler's status on what it took; the interrupted finalization's on the rest.
    if scope == "task":
        expected = {first: "rejected", second: "rejected"}
    else:
        expected = {first: "rejected", second: "accepted" if by_task else "failed"}
    assert _written(telemetry) == expected
    stats = telemetry.sessions.stats()
    # Dropped: each finalization that found nothing left to take (the interrupted one,
    # and after a handler that took the whole task, the one of the second session).
    dropped = {(False, "session"): 1, (False, "task"): 2, (True, "session"): 0}.get(
        (by_task, scope), 1
    )
    assert (stats["written"], stats["failed"], stats["dropped_events"]) == (2, 0, dropped)
    assert (stats["live_sessions"], stats["live_tasks"]) == (0, 0)
    assert telemetry.shutdown()
    assert _written(telemetry) == expected


def _finalize_and_exit(signum: int, frame: FrameType | None) -> None:
    asynctrace.trace_session_event("finalized", task_id=4, status="rejected")
    sys.exit(3)


@pytest.mark.parametrize("by_task", [False, True], ids=["one", "task"])
def test_a_session_a_signal_handler_finalizes_then_exits_on_is_not_put_back(
    tmp_path: Path, by_task: bool
) -> None:
    """The handler finalizes the task's session, then calls ``sys.exit``: the interrupted
    finalization does not put the record it no longer holds back live (where the
    ``session_scope`` the exception leaves would write it a second time, as dropped).
    It lands inside the interrupted code's take, the first line of the take."""
    function, text = PendingSessions._take, "record = self._live.get(session_id)"
    telemetry = _configure(tmp_path)
    caught: list[BaseException] = []
    with handler(signal.SIGUSR2, _finalize_and_exit):
        try:
            with asynctrace.task_scope(4), asynctrace.session_scope() as sid:
                with signal_at(function, text, signal.SIGUSR2) as raised:
                    if by_task:
                        asynctrace.trace_session_event("finalized", task_id=4, status="accepted")
                    else:
                        asynctrace.trace_session_event(
                            "finalized", session_id=sid, status="accepted"
                        )
        except SystemExit as exc:
            caught.append(exc)
    assert raised == [True]
    assert [type(exc) for exc in caught] == [SystemExit]
    assert asynctrace.flush(timeout_s=FLUSH_S)
    assert _written(telemetry) == {sid: "rejected"}
    stats = telemetry.sessions.stats()
    assert (stats["written"], stats["failed"], stats["live_sessions"], stats["live_tasks"]) == (
        1,
        0,
        0,
        0,
    )
    assert telemetry.shutdown()
    assert _written(telemetry) == {sid: "rejected"}
