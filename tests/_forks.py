"""Forking while a user thread holds, in turn, every lock asynctrace takes.

Shared by ``tests/test_runtime.py`` (a dozen forks in ``nox -s tests``) and
``tests/soak/test_forks.py`` (hundreds in ``nox -s soak``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asynctrace
from asynctrace import managed_span
from asynctrace.export import read_chrome_trace

HANG_S = 10.0  # a child that has not exited by then is taken as hung


def exit_code(pid: int, timeout_s: float = HANG_S, what: str = "the forked child") -> int:
    """The exit code of child *pid*; one that has not exited in time is killed and the
    test fails, naming *what* hung."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"{what} (pid {pid}) did not exit within {timeout_s} s")


@contextmanager
def held_by_another_thread(lock: Any) -> Iterator[None]:
    """Inside the block, another thread holds *lock* (as one inside asynctrace at a fork)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(HANG_S)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    try:
        yield
    finally:
        release.set()
        holder.join()


def flush_in_a_fork(tracer: Any, out: Path) -> str:
    """What ``tracer.flush(1.0)`` answers in a forked child, as text (written to *out*)."""
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            out.write_text(str(tracer.flush(1.0)))
            code = 0
        finally:
            os._exit(code)
    assert exit_code(pid) == 0
    return out.read_text()


def fork_quietly() -> int:
    """``os.fork()``, without 3.12's warning about forking a process with threads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def fork_under_load(tmp_path: Path, forks: int, provider: str, running: int = 8) -> dict[str, Any]:
    """Fork *forks* children while a user thread opens spans and sessions.

    Each child runs ``init_worker()`` as the docs say, records a span and a
    session and shuts down; at most *running* children are alive at once.
    Returns ``hung`` (the children killed after :data:`HANG_S`), ``failed``
    (those that exited non-zero) and ``slowest_s``; the caller asserts.
    """
    from asynctrace import _session_tracer

    config = {
        "enabled": True,
        "span_groups": "all",
        "exporters": ["chrome"],
        "output_dir": str(tmp_path / "parent"),
        "provider": provider,
        "session_tracer": {"enabled": True, "flush_threshold": 1},
    }
    telemetry = asynctrace.configure(config)
    tracer = _session_tracer.current_tracer()
    assert tracer is not None
    stop = threading.Event()

    def hold_locks() -> None:  # what a thread opening spans and sessions does, slowed down
        while not stop.is_set():
            with managed_span("generation", "user") as span:
                locks = [tracer._lock, tracer._writer._lock]  # type: ignore[attr-defined]
                if hasattr(span, "_lock"):  # an SDK span's
                    locks.append(span._lock)
                for lock in locks:
                    with lock:
                        time.sleep(0.002)
            with asynctrace.task_scope(1), asynctrace.session_scope():
                asynctrace.trace_session_event("finalized", status="accepted")

    user = threading.Thread(target=hold_locks)
    user.start()
    alive: list[tuple[int, int, float]] = []  # (index, pid, forked at)
    hung: list[int] = []
    failed: list[int] = []
    slowest = 0.0

    def reap(child: tuple[int, int, float]) -> None:
        nonlocal slowest
        i, pid, began = child
        deadline = began + HANG_S
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                slowest = max(slowest, time.monotonic() - began)
                if os.waitstatus_to_exitcode(status) != 0:
                    failed.append(i)
                return
            if time.monotonic() > deadline:
                hung.append(i)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.005)

    try:
        for i in range(forks):
            if len(alive) >= running:
                reap(alive.pop(0))
            time.sleep(0.003 * (i % 4))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
                pid = os.fork()
            if pid == 0:  # the child: init_worker as the docs say, a span, a session, exit
                code = 1
                try:
                    child = asynctrace.init_worker(
                        {**config, "output_dir": str(tmp_path / f"child-{i}")},
                        rank=i,
                        world_size=forks,
                    )
                    with managed_span("generation", "in-child"):
                        with asynctrace.task_scope(9), asynctrace.session_scope():
                            asynctrace.trace_session_event("finalized", status="accepted")
                    code = 0 if child.shutdown(5.0) else 2
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(code)
            alive.append((i, pid, time.monotonic()))
    finally:
        stop.set()
        user.join()
        telemetry.shutdown()
        for child in alive:
            reap(child)
    written = []
    for i in range(forks):
        if i in hung or i in failed:
            continue
        sessions = tmp_path / f"child-{i}" / f"sessions-r{i}.jsonl"
        spans = tmp_path / f"child-{i}" / f"traces-r{i}.jsonl"
        tasks = [json.loads(line)["task_id"] for line in sessions.read_bytes().splitlines()]
        names = [event["name"] for event in read_chrome_trace(spans).complete_events()]
        if tasks == [9] and names == ["in-child"]:
            written.append(i)
    return {
        "hung": hung,
        "failed": failed,
        "written": len(written),
        "slowest_s": round(slowest, 3),
    }
