"""The advisory lock (``flock``) an output file is held by while a writer has it open.

``flock`` locks belong to the open file: a child forked from this process
shares the lock (and never releases it: no ``LOCK_UN`` is ever made, closing
is enough), while a child that opens the file again, as its own
``init_worker()`` does, meets it. A writer of this process that meets the
lock of another writer of this process (a reconfigure) is not told apart
from the owner: only another process's lock counts as shared.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from ._forksafe import reinit_at_fork

_flock: Callable[[int, int], None] | None
_LOCK_FLAGS = 0
try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock, no warning
    _flock = None
else:
    _flock, _LOCK_FLAGS = _fcntl.flock, _fcntl.LOCK_EX | _fcntl.LOCK_NB

__all__ = ["HeldKey", "release_lock", "take_lock"]

HeldKey = tuple[tuple[int, int], int]
"""A lock held: the file (device, inode) and the pid of the process holding it."""

_held: dict[HeldKey, int] = {}
"""The files (device, inode) this process (pid) holds the lock of, with how many writers."""
_held_lock = threading.Lock()
reinit_at_fork(_held_lock)


def take_lock(fd: int, identity: tuple[int, int]) -> tuple[HeldKey | None, bool]:
    """Take the lock of *fd*, the file *identity* (device, inode), without waiting.

    Returns ``(the key to release it by, or None; whether another process
    holds it)``: a file another process holds is written all the same. A file
    system without locks, or a platform without ``flock``, holds nothing and
    tells nothing.
    """
    if _flock is None:
        return None, False
    try:
        _flock(fd, _LOCK_FLAGS)
    except BlockingIOError:
        key = (identity, os.getpid())
        with _held_lock:
            ours = _held.get(key, 0) > 0  # another writer of this process (a reconfigure)
        return None, not ours
    except OSError:
        return None, False  # a file system without locks: nothing to tell
    with _held_lock:
        key = (identity, os.getpid())
        _held[key] = _held.get(key, 0) + 1
    return key, False


def release_lock(key: HeldKey | None) -> None:
    """Forget a writer's lock *key* (closing its descriptor releases the lock)."""
    if key is None:
        return
    with _held_lock:
        left = _held.get(key, 0) - 1
        if left > 0:
            _held[key] = left
        else:
            _held.pop(key, None)
