"""asynctrace's own threads leave process signals to the application's threads.

A signal sent to the process (SIGTERM from a scheduler, SIGINT from Ctrl-C, a
profiler's SIGALRM) goes to any one thread that does not block it. Python runs
its handlers on the main thread, but wakes the main thread only when the signal
lands there: one delivered to an exporter's writer or a watchdog waits until the
main thread's blocking call (``time.sleep``, a join, a read) returns on its own,
a minute later or never. Each thread asynctrace starts blocks these signals
first, so the kernel delivers them to a thread of the application. Faults
(SIGSEGV and the like) are not blocked: they belong to the thread that caused
them.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from typing import Any, Final, TypeVar

__all__ = ["APPLICATION_SIGNALS", "leaving_signals"]

F = TypeVar("F", bound=Callable[..., Any])

APPLICATION_SIGNALS: Final = frozenset(
    getattr(signal, name)
    for name in (
        "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
        "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGCHLD", "SIGWINCH",
    )
    if hasattr(signal, name)
)  # fmt: skip
"""The signals asynctrace's threads block: those a process is sent, not its faults."""


def leaving_signals(target: F) -> F:
    """*target*, blocking :data:`APPLICATION_SIGNALS` in its thread before it runs.

    For the ``target`` of every thread asynctrace starts. Where threads cannot
    block signals (no ``pthread_sigmask``), *target* runs as it is.

    Example:
        >>> import threading
        >>> threading.Thread(target=leaving_signals(lambda: None)).start()
    """

    @functools.wraps(target)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, APPLICATION_SIGNALS)
        except (AttributeError, OSError, ValueError):  # a platform without it
            pass
        return target(*args, **kwargs)

    return run  # type: ignore[return-value]
