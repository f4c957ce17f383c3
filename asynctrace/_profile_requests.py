"""Requests to profile the next step: the file ``profile-next-step`` watched per directory.

A request is the file appearing or changing (a new inode or modification
time) after the directory was first looked at; a capture answers it once.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ._forksafe import reinit_at_fork

__all__ = ["REQUESTS", "REQUEST_FILE", "Request", "poll_requests"]

REQUEST_FILE = "profile-next-step"
_POLL_S = 0.5


@dataclass
class Request:
    """The request file: (inode, mtime) of the pending request and of the last one honoured.

    One per directory for the process's life: a profiler configured again on the same
    directory answers a request pending or answered before, as its first one did.
    """

    pending: tuple[int, int] | None = None
    honoured: tuple[int, int] | None = None
    watched: bool = False  # polled once: a file there before is no request
    lock: threading.Lock = field(default_factory=threading.Lock)  # compare and set as one

    def __post_init__(self) -> None:
        reinit_at_fork(self.lock)


REQUESTS: dict[Path, Request] = {}  # directory -> its request state


def poll_requests(path: Path, request: Request, closed: threading.Event) -> None:
    """Record each change of the request file at *path* in *request* until *closed*
    (the watcher thread's body; it stops in a forked child, which starts its own)."""
    pid = os.getpid()
    first = True
    while not closed.wait(0.0 if first else _POLL_S) and os.getpid() == pid:
        first = False
        try:
            stat = path.stat()
            seen: tuple[int, int] | None = (stat.st_ino, stat.st_mtime_ns)
        except OSError:
            seen = None
        with request.lock:  # not between a capture's answer and its being recorded
            if not request.watched:  # a request older than this process is not for it
                request.honoured, request.watched = seen, True
            elif seen is not None and seen != request.honoured:
                request.pending = seen
