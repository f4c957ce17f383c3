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
calls) has time to happen; then the gate drops the audit, and the names still
unregistered are told in one summary (``UserWarning`` and the ``asynctrace``
logger): on an asyncio loop as a callback of the loop, after the span call
that closed the window, elsewhere as that call returns. A name is told once.

Group names built from data by mistake (a prompt, an id) are many and may be
long: the audit keeps the first :data:`KEPT_NAMES` names, each cut to
:data:`NAME_CHARS` characters, and only counts the others (up to
:data:`COUNTED_NAMES`, by hash), so what it holds and what it writes are
bounded whatever the names. The window is the process's, counted from its first configuration:
setting the groups again (a reconfiguration) carries the remaining budget
over rather than starting a new window, so a program that reconfigures often
does not stay audited.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import Final

from . import _groups
from ._errors import ConfigurationError, is_strict, report_internal_error
from ._forksafe import reinit_at_fork

__all__ = [
    "AUDIT_CHECKS",
    "AUDIT_SECONDS",
    "COUNTED_NAMES",
    "KEPT_NAMES",
    "NAME_CHARS",
    "Audit",
    "audited",
    "report_later",
    "report_quietly",
    "report_unregistered",
    "unregistered_requests",
]

AUDIT_SECONDS: Final = 60.0
AUDIT_CHECKS: Final = 100_000
KEPT_NAMES: Final = 32  # names kept whole (cut to NAME_CHARS) for the report, per report
NAME_CHARS: Final = 200  # a kept name is cut to this many characters
COUNTED_NAMES: Final = 1024  # further names counted (by hash), per report; then "more than"
_TOLD_NAMES: Final = 4096  # names told already, remembered (by hash) so as not to tell again
_LOG = logging.getLogger("asynctrace")
_lock = threading.Lock()
reinit_at_fork(_lock)  # held by another thread at fork(): new in the child
# Names asked for while not registered, not told yet: the first KEPT_NAMES, by name
# (insertion order: the first asked for), then the next COUNTED_NAMES by hash only.
_requested: dict[str, None] = {}
_others: set[int] = set()
_more: list[bool] = [False]  # more names than could be counted since the last report
_told: set[int] = set()  # hashes of the names told already (at most _TOLD_NAMES)
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
        # A name kept already is one dict look-up (no lock, no call).
        if (
            isinstance(name, str)
            and name not in _requested
            and name not in _groups._REGISTRY.groups
            and name not in self._pending
        ):
            _note(name)
        checks = self._checks = self._checks - 1
        if (checks <= 0 or (checks & 255 == 0 and time.monotonic() >= self._deadline)) and (
            not is_strict()
        ):
            _window[1:] = [0.0]  # the process's window is over: off the gate, and the report
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
    key = name if len(name) <= NAME_CHARS else name[:NAME_CHARS] + "\u2026"
    digest = hash(key)
    # Reads without the lock: a name kept, counted or told already (the common case).
    if key in _requested or digest in _others or digest in _told:
        return
    with _lock:
        if key in _requested or digest in _others or digest in _told:
            return
        if len(_requested) < KEPT_NAMES:
            _requested[key] = None
        elif len(_others) < COUNTED_NAMES:
            _others.add(digest)
        else:
            _more[0] = True
    if is_strict():
        report_internal_error(
            ("unregistered group", key),
            ConfigurationError(
                f"a span was requested for span group {key!r}, which no library registered; "
                f"it can never be enabled. {_groups.known_names_message()}"
            ),
        )


def report_unregistered() -> list[str]:
    """Warn once about the names asked for and still not registered; return those kept.

    One summary (``UserWarning`` and the ``asynctrace`` logger), however many
    names: the kept ones by name (cut to :data:`NAME_CHARS` characters), the
    others as a count. A name told is not told again.
    """
    with _lock:
        registered = _groups._REGISTRY.groups
        names = sorted(n for n in _requested if n not in registered)
        others = _others - {hash(g) for g in registered}
        more = _more[0]
        if len(_told) < _TOLD_NAMES:
            _told.update(hash(n) for n in _requested)
            _told.update(_others)
        _requested.clear()
        _others.clear()
        _more[0] = False
    count = len(names) + len(others)
    if not count and not more:
        return names
    if count == 1 and names and not more:
        what = (
            f"span group {names[0]!r}, which no library registered, so they are never "
            f"recorded (a typo, or a module that registers it was not imported)"
        )
    else:
        listed = ", ".join(repr(n) for n in names)
        rest = f"{len(others)}{' or more' if more else ''} other names"
        example = f"{listed} and {rest}" if names and (others or more) else (listed or rest)
        what = (
            f"{'more than ' if more else ''}{count} span groups, which no library registered, "
            f"so they are never recorded (a typo, a name built from data, or a module that "
            f"registers them was not imported): {example}"
        )
    message = f"asynctrace: spans were requested for {what}. {_groups.known_names_message()}"
    _LOG.warning(message)
    try:  # may run on the hot path: a warnings filter set to "error" must not raise there
        warnings.warn(message, stacklevel=2)
    except Exception:
        pass
    return names


def report_quietly() -> None:
    """:func:`report_unregistered`, never raising (a broken logging handler is told once)."""
    try:
        report_unregistered()
    except Exception as exc:  # a broken handler: told once, never raised into a loop
        report_internal_error(("unregistered group report",), exc)


def report_later() -> None:
    """Run :func:`report_unregistered` off the span call that closed the audit window.

    On an asyncio (or uvloop) loop the report is a callback of the loop, run
    after the step that made the call; a loop that stops before running it
    leaves the names to the report at shutdown. Elsewhere (a plain thread, a
    trio task) it runs now, as the call returns: one summary, bounded.
    """
    loop = asyncio._get_running_loop()
    if loop is not None:
        try:
            loop.call_soon(report_quietly)
            return
        except Exception:  # a loop that is closed: now, then
            pass
    report_quietly()


def unregistered_requests() -> frozenset[str]:
    """Group names (as kept) spans were requested for, not registered now and not told yet."""
    with _lock:
        return frozenset(n for n in _requested if n not in _groups._REGISTRY.groups)
