"""Locks and state a forked child must not inherit as they were.

``fork()`` copies only the forking thread. A lock another thread held at that
instant stays held in the child forever, and the next ``with lock:`` there
hangs. Every lock asynctrace takes is registered here (:func:`reinit_at_fork`)
and made new in the child, before any code of the child runs; objects with
more state than a lock (the session tracer and writer, the open-span tracker)
register a method that resets them (:func:`call_in_child`).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["call_in_child", "reinit_at_fork"]

_locks: weakref.WeakSet[Any] = weakref.WeakSet()
_methods: list[weakref.WeakMethod[Callable[[], None]]] = []
_methods_lock = threading.Lock()
_locks.add(_methods_lock)  # made new in the child before _methods is read there
# Dead references are dropped when the list reaches this length, which then doubles
# what is alive: each configure() adds methods, and a process that never forks would
# otherwise keep one dead reference per object ever registered.
_prune_at = 16


def reinit_at_fork(*locks: Any) -> None:
    """Make each lock (or ``Condition``) new in a forked child (kept by weak reference).

    Example:
        >>> import threading
        >>> reinit_at_fork(threading.Lock())
    """
    for lock in locks:
        _locks.add(lock)


def call_in_child(method: Callable[[], None]) -> None:
    """Call the bound *method* in a forked child, after the locks are new (weakly held).

    Example:
        >>> class Thing:
        ...     def reset(self) -> None: ...
        >>> thing = Thing()
        >>> call_in_child(thing.reset)
    """
    global _prune_at
    ref = weakref.WeakMethod(method)
    with _methods_lock:
        _methods.append(ref)
        if len(_methods) >= _prune_at:
            _methods[:] = [r for r in _methods if r() is not None]
            _prune_at = max(16, 2 * len(_methods))


def _after_fork_in_child() -> None:
    for lock in list(_locks):
        try:
            lock._at_fork_reinit()
        except Exception:  # pragma: no cover - every lock type in use has it
            pass
    alive = []
    for ref in _methods:
        method = ref()
        if method is None:
            continue
        alive.append(ref)
        try:
            method()
        except Exception:  # pragma: no cover - a reset never breaks the child
            pass
    _methods[:] = alive


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
