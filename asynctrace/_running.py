"""The telemetry this process runs, and what ``flush()`` and ``shutdown()`` answer.

:func:`asynctrace.configure` makes a handle current; its shutdown forgets
it, and once that shutdown is over the module-level functions answer its
result, until the next configuration.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ._forksafe import reinit_at_fork
from ._timeouts import wait_s

if TYPE_CHECKING:
    from ._telemetry import Telemetry
    from ._telemetry_shutdown import TelemetryShutdown

__all__ = ["current_telemetry", "ended", "flush", "forget", "make_current", "shutdown"]

# _current itself: held only to read or swap it, never while waiting, so that a
# shutdown running on another thread (on SIGTERM, at exit) can forget its handle
# while a configure() holding _lock waits for that shutdown to end.
_current_lock = threading.RLock()  # (a signal handler's shutdown may come in while held)
reinit_at_fork(_current_lock)  # held at fork(): new in the child
_current: Telemetry | None = None
# The handle forgotten last, while its shutdown finishes, and then its result: what the
# module-level shutdown() and flush() answer once nothing runs (True before any shutdown).
_stopping: TelemetryShutdown | None = None
_last_result = True


def make_current(telemetry: Telemetry) -> None:
    """*telemetry* is the running one: a new run, the last one's shutdown no longer asked."""
    global _current, _last_result
    with _current_lock:
        _current = telemetry
        _last_result = True


def forget(telemetry: TelemetryShutdown) -> None:
    """*telemetry* shuts down: no longer current, its result answered once it has ended."""
    global _current, _stopping
    with _current_lock:
        if _current is telemetry:
            _current = None
            _stopping = telemetry


def ended(telemetry: TelemetryShutdown, result: bool) -> None:
    """Its shutdown is over: the module-level functions answer its *result* from now on."""
    global _stopping, _last_result
    with _current_lock:
        if _stopping is telemetry:
            _stopping, _last_result = None, result


def current_telemetry() -> Telemetry | None:
    """The running :class:`Telemetry` of this process, if any.

    Example:
        >>> current_telemetry() is None
        True
    """
    return _current


def flush(timeout_s: float = 5.0) -> bool:
    """Flush the running telemetry (see :meth:`Telemetry.flush`).

    With none running: the result of the last shutdown (``True`` if none ever
    ran), as a flush after shutdown answers on the handle.

    Example:
        >>> flush(1.0)
        True
    """
    wait_s(timeout_s)  # a bad argument is refused whether or not telemetry runs
    telemetry = _current or _stopping
    return _last_result if telemetry is None else telemetry.flush(timeout_s)


def shutdown(timeout_s: float | None = None) -> bool:
    """Shut the running telemetry down (see :meth:`Telemetry.shutdown`).

    With none running: the result of the last shutdown (``True`` if none ever
    ran), as a second shutdown answers on the handle; a shutdown still
    finishing on another thread is waited for.

    Example:
        >>> shutdown()
        True
    """
    if timeout_s is not None:
        wait_s(timeout_s)  # a bad argument is refused whether or not telemetry runs
    telemetry = _current or _stopping
    return _last_result if telemetry is None else telemetry.shutdown(timeout_s)
