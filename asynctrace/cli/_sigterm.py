"""SIGTERM taken like Ctrl-C while ``watch`` runs: the view ends with its last view drawn."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["sigterm_leaves"]


class _Terminated(KeyboardInterrupt):
    """SIGTERM, taken like Ctrl-C."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


@contextmanager
def sigterm_leaves() -> Iterator[None]:
    """SIGTERM (``timeout``, a batch scheduler, ``kill``) raises :class:`_Terminated`
    while the view runs, so it ends with its last view as Ctrl-C does. Only the
    main thread can set a handler; elsewhere SIGTERM keeps its own. A SIGTERM the
    process was started ignoring (``trap '' TERM``) stays ignored."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    ):
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        # None: a handler not set from Python, which cannot be put back: the default
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
