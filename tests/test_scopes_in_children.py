"""A process started by multiprocessing starts with no asynctrace scopes; a bare
``os.fork()`` child keeps its caller's.

A fork-start pool starts its workers from whichever call first needs one, in
that caller's context: without the reset, every later call in the worker would
be stamped with that first caller's task, session and step.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from _forks import exit_code, fork_quietly

import asynctrace

needs_fork = pytest.mark.skipif(
    not hasattr(os, "fork") or "fork" not in multiprocessing.get_all_start_methods(),
    reason="needs the fork start method",
)


def _scopes() -> tuple[object, object, object]:
    """(task, session, step) as the calling process sees them."""
    return (
        asynctrace.current_task_id(),
        asynctrace.current_session_id(),
        asynctrace.current_iteration(),
    )


@needs_fork
def test_a_fork_pool_worker_started_inside_scopes_has_none(tmp_path: Path) -> None:
    """The pool's worker starts inside task, session and iteration scopes: neither
    that call nor a later one from other scopes sees them."""
    asynctrace.configure(
        {"enabled": False, "output_dir": str(tmp_path), "session_tracer": {"enabled": True}}
    )
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        with asynctrace.iteration_scope(3), asynctrace.task_scope(1):
            with asynctrace.session_scope() as session:
                assert _scopes() == (1, session, 3)
                first = pool.submit(_scopes).result()  # starts the worker here
        with asynctrace.iteration_scope(4), asynctrace.task_scope(2):
            with asynctrace.session_scope():
                later = pool.submit(_scopes).result()
        outside = pool.submit(_scopes).result()
    assert first == later == outside == (None, None, None)


def _child_scopes_main(path: str) -> None:
    Path(path).write_text(json.dumps(_scopes()))


@needs_fork
def test_a_fork_process_started_inside_scopes_has_none(tmp_path: Path) -> None:
    """``multiprocessing.Process`` with the fork start method, as a spawned one."""
    out = tmp_path / "scopes.json"
    with asynctrace.iteration_scope(5), asynctrace.task_scope("t"):
        context = multiprocessing.get_context("fork")
        process = context.Process(target=_child_scopes_main, args=(str(out),))
        process.start()
        process.join(30)
    assert process.exitcode == 0
    assert json.loads(out.read_text()) == [None, None, None]


@needs_fork
def test_a_bare_fork_child_keeps_its_scopes(tmp_path: Path) -> None:
    """``os.fork()`` continues the calling code, inside the same ``with`` blocks: it
    keeps the scopes, even once multiprocessing is in use in the process."""
    out = tmp_path / "scopes.json"
    assert "multiprocessing.util" in sys.modules
    with asynctrace.iteration_scope(6), asynctrace.task_scope(9):
        with asynctrace.session_scope() as session:
            pid = fork_quietly()
            if pid == 0:  # the child: never return into pytest
                code = 1
                try:
                    _child_scopes_main(str(out))
                    code = 0
                finally:
                    os._exit(code)
            assert exit_code(pid) == 0
    assert json.loads(out.read_text()) == [9, session, 6]
