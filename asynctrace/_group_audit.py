"""Spans asked for under a group nobody registered: reported, not silently dropped.

A span of a group that is not enabled is a no-op, which is what makes a
disabled group cost one set lookup. A group that *no library ever
registered* is never enabled either, so a typo (``"optimiser"``) or a missing
registration (a module whose import registers the group was never imported)
is a hole in the trace that nothing points at.

While an audit runs, the gate hands every name it did not find enabled to an
:class:`Audit`, which notes a name that is not registered either; a name
found enabled is registered, so hits are never audited and cost the plain
``frozenset`` lookup. Under ``ASYNCTRACE_STRICT=1`` the first such request
raises (through :func:`report_internal_error`), so a test suite catches it at
the call. Otherwise the audit runs for :data:`AUDIT_SECONDS` or
:data:`AUDIT_CHECKS` misses after the groups were last set, whichever comes
first, so late registration (an import side effect that comes after the first
calls) has time to happen; then each name still unregistered is warned about
once (``UserWarning`` and the ``asynctrace`` logger), and the gate drops the
audit. The window is the process's, counted from its first configuration:
setting the groups again (a reconfiguration) carries the remaining budget
over rather than starting a new window, so a program that reconfigures often
does not stay audited.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import Final

from . import _groups
from ._errors import ConfigurationError, is_strict, report_internal_error
from ._forksafe import reinit_at_fork

__all__ = ["AUDIT_CHECKS", "AUDIT_SECONDS", "Audit", "audited", "unregistered_requests"]

AUDIT_SECONDS: Final = 60.0
AUDIT_CHECKS: Final = 100_000
_LOG = logging.getLogger("asynctrace")
_lock = threading.Lock()
reinit_at_fork(_lock)  # held by another thread at fork(): new in the child
# name -> where it was first asked for (a short description), per process
_requested: dict[str, str] = {}
_warned: set[str] = set()
# The process's audit window: [deadline, gate checks left], set at the first audit.
_window: list[float] = []


class Audit:
    """Called by the gate with each name it did not find enabled (a hit is not audited)."""

    __slots__ = ("_checks", "_deadline", "_pending", "_retire")

    def __init__(
        self,
        deadline: float,
        checks: int,
        pending: frozenset[str],
        retire: Callable[[Audit], None],
    ) -> None:
        self._deadline = deadline
        self._checks = checks
        self._pending = pending
        self._retire = retire

    def __call__(self, name: object) -> None:
        if (
            isinstance(name, str)
            and name not in _groups._REGISTRY.groups
            and name not in self._pending
        ):
            _note(name)
        checks = self._checks = self._checks - 1
        if (checks <= 0 or (checks & 255 == 0 and time.monotonic() >= self._deadline)) and (
            not is_strict()
        ):
            _window[1:] = [0.0]  # the process's window is over: report, with this name
            self._retire(self)


def audited(
    enabled: frozenset[str],
    retire: Callable[[Audit], None],
    pending: frozenset[str] = frozenset(),
) -> Audit | None:
    """The audit for a gate enabling *enabled*, or ``None`` (nothing enabled, or the window over).

    Names in *pending* (named by the spec and already warned about as not
    registered yet) are not noted again. *retire* is called with the audit
    once its time is over; it should take it off the gate and report
    (:func:`report_unregistered`).
    """
    if not enabled:
        return None
    now = time.monotonic()
    with _lock:
        if not _window:
            _window[:] = [now + AUDIT_SECONDS, float(AUDIT_CHECKS)]
        previous = _current[0] if _current else None
        if previous is not None:  # carry the budget over from the audit this one replaces
            _window[1] = float(min(_window[1], max(previous._checks, 0)))
        deadline, left = _window
    if not is_strict() and (left <= 0 or now >= deadline):
        report_unregistered()  # the window is over: no audit, and what it found
        return None
    audit = Audit(deadline, int(left), pending, retire)
    _current[:] = [audit]
    return audit


_current: list[Audit] = []  # the audit in use, whose remaining budget carries over


def reset_window() -> None:
    """Start a new audit window at the next configuration (for tests)."""
    with _lock:
        _window.clear()
        _current.clear()


def _note(name: str) -> None:
    with _lock:
        if name in _requested:
            return
        _requested[name] = "first asked for while not registered"
    if is_strict():
        report_internal_error(
            ("unregistered group", name),
            ConfigurationError(
                f"a span was requested for span group {name!r}, which no library registered; "
                f"it can never be enabled. {_groups.known_names_message()}"
            ),
        )


def report_unregistered() -> list[str]:
    """Warn once per name asked for but still not registered; return those names."""
    with _lock:
        names = sorted(
            n for n in _requested if n not in _groups._REGISTRY.groups and n not in _warned
        )
        _warned.update(names)
    for name in names:
        message = (
            f"asynctrace: spans were requested for span group {name!r}, which no library "
            f"registered, so they are never recorded (a typo, or a module that registers it "
            f"was not imported). {_groups.known_names_message()}"
        )
        _LOG.warning(message)
        try:  # called from the hot path: a warnings filter set to "error" must not raise there
            warnings.warn(message, stacklevel=2)
        except Exception:
            pass
    return names


def unregistered_requests() -> frozenset[str]:
    """Group names spans were requested for that are not registered now."""
    with _lock:
        return frozenset(n for n in _requested if n not in _groups._REGISTRY.groups)
