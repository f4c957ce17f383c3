"""Session phases AReaL code names on first use, registered with asynctrace (bounded)."""

from __future__ import annotations

import os
import threading
from typing import Final

import asynctrace

from ._values import _warn_once

_lock = threading.Lock()  # one registration at a time


def _new_lock_in_child() -> None:
    """A lock another thread held at ``fork()`` would stay held in the child: a new one."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)

_MAX_NEW_PHASES: Final = 32  # phases registered on first use, per process
_known_phases: set[str] = set()
_registered = 0  # registered here (each adds a ``<phase>_s`` field to every record)
refused = 0  # phase events ignored past that bound (SessionTracer.stats())


def _phase_ok(phase: str) -> bool:
    """Whether *phase* can be recorded: registered with asynctrace on first use (a phase
    AReaL users add by editing its enum), up to 32 of them; a name asynctrace refuses
    (``Generate``, ``total``, ``finalized``), or one past that bound (counted in
    ``SessionTracer.stats()["refused_phases"]``), is ignored, as AReaL ignores an event
    it has no rule for, and warned about once."""
    global _registered, refused
    if phase in _known_phases:
        return True
    with _lock:
        try:
            if phase not in asynctrace.registered_phases():
                if _registered >= _MAX_NEW_PHASES:
                    refused += 1
                    _warn_once(
                        "phase-bound",
                        "perf_tracer: session phase %r ignored: %d phases were registered "
                        "on first use already (the bound; each adds a field to every "
                        "record); register it with asynctrace.register_phase to record it",
                        phase,
                        _MAX_NEW_PHASES,
                    )
                    return False
                asynctrace.register_phase(phase)
                _registered += 1
        except asynctrace.ConfigurationError as exc:
            _warn_once("phase", "perf_tracer: session phase %r ignored: %s", phase, exc)
            return False
        _known_phases.add(phase)
    return True
