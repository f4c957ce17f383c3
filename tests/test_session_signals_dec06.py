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
  left behind, and later flushes do not wait out their timeout.
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
    """(file, line number) of the one line of *function* that holds *text*."""
    source, first = inspect.getsourcelines(function)
    lines = [first + n for n, line in enumerate(source) if text in line]
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
