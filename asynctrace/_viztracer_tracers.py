"""viztracer's tracers, kept for the process: built under a budget, reused, freed with care."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from ._forksafe import reinit_at_fork

__all__ = [
    "BUDGET",
    "BUILT",
    "HOOKS",
    "IDLE",
    "SEEN",
    "TASKS",
    "TRACERS",
    "TracersBusy",
    "take",
    "tracers_built",
]

# Held while the threads' profile hook (threading.setprofile) is read and set: a
# tracer built on one thread must not undo the hook a capture set on another.
HOOKS = threading.Lock()
reinit_at_fork(HOOKS)
# viztracer's tracers. Each one built takes a thread-local storage key viztracer never
# gives back (a process has about 1024; a build past them exits the process), and freeing
# one calls threading.setprofile(None), which takes a running capture's hook away (the
# threads it starts go unrecorded). So every tracer is held in TRACERS until freed under
# HOOKS (take), with that call skipped; one saved, or never started, waits in IDLE for
# a later capture. A capture that put events on a task's track (asyncio, trio) may leave
# that task as a thread's current one in its tracer: viztracer forgets it only when the
# task's frame returns while tracing, never if the task has finished. Such a tracer is
# reused only once BUDGET tracers were built; until then it is freed, as before reuse.
TRACERS: list[Any] = []
IDLE: list[Any] = []
TASKS: set[int] = set()  # id() of the tracers that may keep a task (or a parent's thread)
BUDGET = 256
BUILT = [0]  # tracers built in this process
SEEN: dict[int, frozenset[int]] = {}  # id(tracer) -> threads its earlier captures named


def _inherited() -> None:
    # a forked child's tracers keep the parent's threads (the forking one's id among them)
    TASKS.update(id(tracer) for tracer in TRACERS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_inherited)


class TracersBusy(RuntimeError):
    """No tracer is free, and the process may build no more."""


def _free(doomed: list[Any]) -> None:
    """Free the tracers in *doomed* that nothing else holds (called holding HOOKS).

    Their deallocation's threading.setprofile(None) is skipped on this thread, and the
    hook put back if it changed all the same. One held elsewhere stays in TRACERS.
    """
    hook, setprofile, freeing = threading.getprofile(), threading.setprofile, threading.get_ident()

    def others_only(func: Any) -> None:
        if threading.get_ident() != freeing:
            setprofile(func)

    threading.setprofile = others_only
    try:
        for tracer in doomed:
            if tracer in IDLE:
                IDLE.remove(tracer)
            # held by TRACERS, doomed, this loop and getrefcount's argument only
            if sys.getrefcount(tracer) <= 4:
                TRACERS.remove(tracer)
                SEEN.pop(id(tracer), None)
                TASKS.discard(id(tracer))
        del tracer
        doomed.clear()  # frees the ones removed
    finally:
        threading.setprofile = setprofile
        if threading.getprofile() is not hook:
            setprofile(hook)


def take(entries: int) -> Any:
    """A free tracer of *entries* entries, or ``None`` (called holding HOOKS).

    A tracer nothing else holds (a spare dropped, a capture abandoned) becomes free. One
    of another size, or keeping a task while more may be built, is freed.
    """
    for tracer in TRACERS:
        # held by the list, this loop and getrefcount's argument only: unused
        if tracer not in IDLE and sys.getrefcount(tracer) <= 3 and not tracer.enable:
            tracer.clear()
            IDLE.append(tracer)
    may_build = BUILT[0] < BUDGET
    sized = [t for t in IDLE if t.tracer_entries == entries]
    found = next((t for t in sized if id(t) not in TASKS), None)
    if found is None and not may_build:
        found = next(iter(sized), None)
    doomed = [
        t
        for t in IDLE
        if t is not found and (t.tracer_entries != entries or (may_build and id(t) in TASKS))
    ]
    del sized  # its references would keep them
    if doomed:
        _free(doomed)
    if found is not None:
        IDLE.remove(found)
    return found


def tracers_built() -> int:
    """How many viztracer tracers this process has built."""
    return BUILT[0]
