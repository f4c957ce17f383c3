"""Every lock asynctrace (and its contrib layers) takes is made new in a forked child.

A lock another thread holds at ``fork()`` stays held in the child forever, and
the child's next ``with lock:`` hangs. The first test reads the sources: each
``threading`` lock, condition or event is registered with ``reinit_at_fork``,
made new by a fork hook, or listed below with the reason it needs neither. The
second forks while a thread holds, in turn, the locks that test found missing
once, and checks the child takes each at once.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _forks import exit_code, fork_quietly, held_by_another_thread

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "asynctrace", ROOT / "contrib" / "asynctrace_contrib"]
KINDS = {"Lock", "RLock", "Condition", "Event", "Semaphore", "BoundedSemaphore"}

# (file, name) -> why a forked child never waits on it
NEEDS_NOTHING: dict[tuple[str, str], str] = {
    ("asynctrace/_threads.py", "_lock"): (
        "one per to_thread call, taken by the executor thread running it; a child has "
        "neither that thread nor the future it would complete"
    ),
    ("asynctrace/_sigterm.py", "_claim"): (
        "a one-shot claim, never released; in a child the handler only hands the signal on"
    ),
    ("asynctrace/_fast/_deferred.py", "_done"): (
        "a deferred span's wake-up event: waited on for at most WAIT_S (a second), then "
        "the span is read as it is"
    ),
    ("asynctrace/_fast/_deferred.py", "event"): (
        "the same event, under the name the waiting thread gives it"
    ),
    ("asynctrace/export/_sync.py", "done"): (
        "a flush marker's event: the child's processor is inert and queues no marker"
    ),
    ("asynctrace/_stall_watchdog.py", "wake"): (
        "held from the start on purpose: the loop's heartbeat releases it to wake its "
        "watchdog; the child's fork hook stops every monitor, and releasing wakes no one"
    ),
    ("asynctrace/_prometheus_server.py", "_open_lock"): (
        "the Prometheus endpoint's open connections, taken by its serving threads and at "
        "its shutdown in the parent only; a child has no serving thread and closes none"
    ),
    ("contrib/asynctrace_contrib/demo/gym.py", "started"): "the demo's server start flag",
    ("contrib/asynctrace_contrib/demo/pump.py", "refit_done"): "the demo's own event",
}


def _target(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _makes_lock(value: ast.expr | None) -> bool:
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == "threading"
        and value.func.attr in KINDS
    )


def _locks(tree: ast.Module) -> Iterator[tuple[str, int, bool]]:
    """(name, line, inside a fork hook) for each lock made in *tree*."""
    hooks: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and ("fork" in node.name or "child" in node.name):
            hooks.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and _makes_lock(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = _target(target)
                if name is not None:
                    yield name, node.lineno, id(node) in hooks


def _registrations(tree: ast.Module) -> Iterator[ast.expr]:
    """What *tree* passes to ``reinit_at_fork(...)`` (or, in ``_forksafe``, ``_locks.add``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Name) and func.id == "reinit_at_fork") or (
            isinstance(func, ast.Attribute)
            and func.attr == "add"
            and isinstance(func.value, ast.Name)
            and func.value.id == "_locks"
        ):
            yield from node.args


def _registered(tree: ast.Module) -> set[str]:
    """Names registered in *tree*."""
    return {n for n in map(_target, _registrations(tree)) if n is not None}


def _registered_elsewhere(trees: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """(module, lock) registered from another module: ``reinit_at_fork(_state._lock)``."""
    found: set[tuple[str, str]] = set()
    for tree in trees.values():
        for arg in _registrations(tree):
            if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name):
                found.add((arg.value.id, arg.attr))
    return found


def _unsafe_locks() -> tuple[list[str], set[tuple[str, str]]]:
    """Locks neither registered, nor made new by a fork hook, nor listed; and the listed
    entries seen."""
    missing: list[str] = []
    seen: set[tuple[str, str]] = set()
    trees = {
        path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for base in SOURCES
        for path in sorted(base.rglob("*.py"))
    }
    elsewhere = _registered_elsewhere(trees)
    for rel, tree in trees.items():
        made = list(_locks(tree))
        renewed = {name for name, _, in_hook in made if in_hook}
        registered = _registered(tree) | {n for m, n in elsewhere if m == Path(rel).stem}
        for name, line, in_hook in made:
            if in_hook or name in renewed or name in registered:
                continue
            if (rel, name) in NEEDS_NOTHING:
                seen.add((rel, name))
                continue
            missing.append(f"{rel}:{line} {name}")
    return missing, seen


def test_every_lock_is_made_new_in_a_forked_child() -> None:
    """A lock added without ``reinit_at_fork`` (or a fork hook) fails here, by name."""
    missing, seen = _unsafe_locks()
    assert missing == [], "locks a forked child could inherit held:\n" + "\n".join(missing)
    assert seen == set(NEEDS_NOTHING), f"stale entries: {set(NEEDS_NOTHING) - seen}"


def _retry_processor() -> Any:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from asynctrace.export._retry import RetryingSpanProcessor

    return RetryingSpanProcessor(InMemorySpanExporter(), name="fork-test")


def _module_lock(module: str, name: str) -> Callable[[], Any]:
    __import__(module)
    return lambda: getattr(sys.modules[module], name)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.parametrize(
    "lock",
    [
        "asynctrace._goodput:_lock",
        "asynctrace.export._retry:_close_lock",
        "asynctrace._span_redacting:_REDACTING_LOCK",
        "asynctrace_contrib.areal._global:_lock",
        "asynctrace_contrib.areal._phases:_lock",
        "asynctrace_contrib.aiohttp_client._install:_install_lock",
    ],
)
def test_a_lock_held_at_fork_is_free_in_the_child(lock: str) -> None:
    """A thread holds the lock while the process forks: the child takes it at once."""
    module, name = lock.split(":")
    processor = _retry_processor() if name == "_close_lock" else None
    get = (lambda: processor._close_lock) if processor else _module_lock(module, name)
    try:
        with held_by_another_thread(get()):
            pid = fork_quietly()
            if pid == 0:
                os._exit(0 if get().acquire(timeout=5) else 3)
            assert exit_code(pid, what=f"the child taking {lock}") == 0
    finally:
        if processor is not None:  # its export thread ends with it
            processor.shutdown()
