"""The chrome file's metadata lines: the process's name and labels, and each track's name."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .._redact import redact_text

__all__ = ["owner_name", "process_events", "thread_name"]


def thread_name(pid: int, tid: int, name: str, ident: Mapping[str, Any]) -> dict[str, Any]:
    """The ``thread_name`` event naming track *tid* (*ident*: the writer's rank and role)."""
    return {
        "ph": "M",
        "name": "thread_name",
        "pid": pid,
        "tid": tid,
        "args": {"name": name, **ident},
    }


def process_events(
    resource: Mapping[str, Any], pid: int, ident: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The process's name, sort index and labels, from the *resource* attributes."""
    rank = resource.get("asynctrace.rank", 0)
    world = resource.get("asynctrace.world_size", 1)
    role = resource.get("asynctrace.role")
    service = resource.get("service.name", "asynctrace")
    label = f"{service} rank {rank}/{world}" + (f" {role}" if role else "")
    args = {
        "name": f"{label} (pid {pid})",
        "service": service,
        "rank": rank,
        "world_size": world,
        "role": role,
        "run_id": resource.get("asynctrace.run_id"),
        "host": resource.get("host.name"),
    }
    sort = rank if isinstance(rank, int) else 0
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "args": args},
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": pid,
            "args": {"sort_index": sort},
        },
        {
            "ph": "M",
            "name": "process_labels",
            "pid": pid,
            "args": {"labels": label, **ident},
        },
    ]


def owner_name(owner: object) -> str:
    """``thread: NAME``, or ``task: NAME [THREAD]`` (the thread of the task's loop, if known)."""
    if isinstance(owner, threading.Thread):
        return f"thread: {redact_text(owner.name)}"
    get_name = getattr(owner, "get_name", None)
    name = str(get_name()) if callable(get_name) else str(getattr(owner, "name", "") or "task")
    thread = None
    get_loop = getattr(owner, "get_loop", None)
    if callable(get_loop):
        ident = getattr(get_loop(), "_thread_id", None)
        found = threading._active.get(ident) if ident is not None else None  # type: ignore[attr-defined]
        thread = redact_text(found.name) if found is not None else None
    name = redact_text(name)  # create_task(..., name=f"GET {url}") names a URL, token and all
    return f"task: {name} [{thread}]" if thread else f"task: {name}"
