"""Session phases and statuses: the vocabulary of a session's lifecycle.

Phases are registered, not hard-coded (``generate``, ``reward`` and
``toolcall`` are pre-registered); the statuses and the ``finalized`` event are
fixed. Checked by the public API (:mod:`asynctrace._sessions`) and read by the
tracer (:mod:`asynctrace._session_tracer`).
"""

from __future__ import annotations

import threading
from typing import Final

from ._errors import ConfigurationError
from ._forksafe import reinit_at_fork

__all__ = ["FINALIZED", "STATUSES", "check_phase", "register_phase", "registered_phases"]

STATUSES: Final = ("accepted", "rejected", "failed", "dropped")
FINALIZED: Final = "finalized"

# phase name -> allow_multiple
_phases: dict[str, bool] = {"generate": True, "reward": True, "toolcall": True}
_phases_lock = threading.Lock()
reinit_at_fork(_phases_lock)  # a lock held at fork() is made new in the child


def register_phase(name: str, *, allow_multiple: bool = True) -> None:
    """Declare a session phase; its time appears as ``<name>_s`` in the records.

    ``generate``, ``reward`` and ``toolcall`` are pre-registered. Registering
    the same definition again is a no-op; a different one raises.

    Args:
        name: lower-case identifier (``validation``, ``safety_filter``, ...).
        allow_multiple: whether a session may run the phase more than once
            (``True`` or ``False``); a second execution of a single-shot phase
            is dropped and counted.

    Raises:
        ConfigurationError: *name* is not a lower-case identifier or is
            reserved, *allow_multiple* is not a bool, or *name* is registered
            already with the other *allow_multiple*.

    Example:
        >>> register_phase("validation", allow_multiple=False)
    """
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise ConfigurationError(
            f"register_phase(name): {name!r} is not accepted; accepted: a lower-case "
            "identifier such as 'validation'"
        )
    if name in (FINALIZED, "total", "submit"):
        raise ConfigurationError(
            f"register_phase(name): {name!r} is reserved (finalized, total and submit name "
            "the record's own fields); accepted: any other lower-case identifier"
        )
    if allow_multiple is not True and allow_multiple is not False:  # 'no' would mean True
        raise ConfigurationError(
            f"register_phase(allow_multiple): {allow_multiple!r} is not accepted; "
            "accepted: True or False"
        )
    with _phases_lock:
        previous = _phases.get(name)
        if previous is not None and previous != allow_multiple:
            raise ConfigurationError(
                f"register_phase({name!r}): already registered with "
                f"allow_multiple={previous}, got allow_multiple={allow_multiple}; accepted: "
                f"allow_multiple={previous} (a phase's definition is fixed for the process)"
            )
        _phases[name] = allow_multiple


def registered_phases() -> dict[str, bool]:
    """Registered phases and whether each may run more than once.

    Example:
        >>> registered_phases()["generate"]
        True
    """
    with _phases_lock:
        return dict(_phases)


def check_phase(phase: object) -> str:
    """*phase* if it is a registered session phase; else a :class:`ConfigurationError`."""
    if isinstance(phase, str) and phase in _phases:
        return phase
    raise ConfigurationError(
        f"session phase {phase!r} is not registered; accepted: {', '.join(sorted(_phases))} "
        "(declare new ones with register_phase())"
    )
