"""AReaL's ``SessionTracer`` API over asynctrace's session tracer."""

from __future__ import annotations

import enum
import numbers
import os
import sys
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final

import asynctrace

from . import _phases
from ._phases import _phase_ok
from ._values import _warn_once

_MAX_COUNT: Final = sys.float_info.max  # the increments asynctrace's counters take


_NONE: Final = object()  # no task known for a session
_PRUNE_MIN: Final = 1024  # the task maps are pruned past this many sessions at least


class SessionTraceEvent(str, enum.Enum):
    """AReaL's session lifecycle events (``trace_session_event("mark_<value>", ...)``).

    Example:
        >>> SessionTraceEvent.FINALIZED.value
        'finalized'
    """

    FINALIZED = "finalized"
    GENERATE_START = "generate_start"
    GENERATE_END = "generate_end"
    REWARD_START = "reward_start"
    REWARD_END = "reward_end"
    TOOLCALL_START = "toolcall_start"
    TOOLCALL_END = "toolcall_end"


class SessionTracer:
    """AReaL's ``SessionTracer`` API over asynctrace's session tracer.

    What ``get_session_tracer()`` returns, so code written against AReaL's
    object runs unchanged: :meth:`register_task`, :meth:`register_session`
    (numeric ids), :meth:`get_session_ids`, :meth:`record_event`,
    :meth:`increment_counter`, ``flush(force=...)`` and :meth:`reset`.
    Anything else (``stats()``, ``path``) is asynctrace's tracer's.

    AReaL's constructor, ``SessionTracer(config, output_path=..., rank=...)``,
    is accepted: it wraps the session tracer asynctrace is running (the
    records go where asynctrace's configuration puts them), since a second
    writer for the same process is not something asynctrace has. That
    tracer must give sequential ids (``session_tracer.ids: sequential``):
    AReaL's API numbers its sessions.

    Once another configuration replaced the one this object wraps (another
    :class:`PerfTracer` recorded, ``asynctrace.configure`` or ``shutdown``
    ran), nothing more is recorded through it: :meth:`register_session`
    returns ``None``, events and counters are dropped, each counted in
    ``stats()["not_running"]`` and warned about once.

    Example:
        >>> tracer = get_session_tracer()
        >>> tracer is None or isinstance(tracer.register_session(7), int)
        True
    """

    def __init__(
        self,
        config: Any = None,
        *,
        output_path: str | None = None,
        rank: int = 0,
        role: str | None = None,
        tracer: Any = None,
    ) -> None:
        ids = "sequential"  # a tracer given here is a PerfTracer's (ids checked there)
        if tracer is None:
            running = asynctrace.current_telemetry()
            if running is not None:
                tracer, ids = running.sessions, running.settings.session_tracer.ids
        if tracer is None:
            raise RuntimeError(
                "no asynctrace session tracer is running: configure one first "
                "(perf_tracer.configure(...) with session_tracer.enabled)"
            )
        if ids != "sequential":
            raise asynctrace.ConfigurationError(
                f"session_tracer.ids: {ids!r} is not accepted by perf_tracer's SessionTracer; "
                "accepted: sequential (AReaL's API numbers its sessions)"
            )
        self._inner = tracer
        self.rank = rank
        self.role = role
        self._not_running = 0
        self._lock = threading.Lock()
        self._tasks: dict[Any, set[int]] = {}
        self._task_of: dict[int, Any] = {}  # session id -> its task: finalize in O(1)
        # The maps hold sessions asynctrace may have written since (evicted past
        # max_pending, or at a shutdown): pruned to the pending ones when they grow past this.
        self._prune_at = _PRUNE_MIN
        _session_tracers.add(self)  # a forked child gets a new lock and no sessions

    def _after_fork_in_child(self) -> None:
        """A forked child starts with a new lock (another thread may have held this one at
        the fork) and no sessions, as asynctrace's own session tracer does there."""
        self._lock = threading.Lock()
        self._tasks = {}
        self._task_of = {}
        self._prune_at = _PRUNE_MIN

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def _running(self) -> bool:
        """Whether the session tracer this object wraps is asynctrace's running one; when it
        is not, what the caller was about to record is counted and warned about once."""
        running = asynctrace.current_telemetry()
        if running is not None and running.sessions is self._inner:
            return True
        with self._lock:
            self._not_running += 1
        _warn_once(
            "sessions-not-running",
            "perf_tracer: this session tracer's asynctrace configuration is no longer the "
            "running one (another PerfTracer recorded, or asynctrace was configured or shut "
            "down): its sessions, events and counters are not recorded from now on "
            "(counted in stats()['not_running'])",
        )
        return False

    def stats(self) -> dict[str, int]:
        """asynctrace's session tracer's counters; ``not_running``: registrations, events and
        counters not recorded because that tracer is no longer the running one;
        ``refused_phases``: phase events ignored (process-wide) because 32 phases were
        registered on first use already."""
        stats = dict(self._inner.stats())
        stats["not_running"] = self._not_running
        stats["refused_phases"] = _phases.refused
        return stats

    def register_task(self, task_id: int) -> None:
        """Declare a task (AReaL's ``register_task``).

        Nothing is stored for it: a task without sessions has none in
        :meth:`get_session_ids`, declared or not, so the map holds only tasks
        with pending sessions (a task per submitted sample, never a session of
        its own, would otherwise stay there for good). An unhashable task id
        raises ``TypeError``, as in AReaL.
        """
        hash(task_id)

    def _track(self, task_id: Any, session_id: str) -> int | None:
        number = int(session_id) if session_id.isdigit() else None
        if number is not None:
            try:
                with self._lock:
                    self._tasks.setdefault(task_id, set()).add(number)
                    self._task_of[number] = task_id
                    if len(self._task_of) > self._prune_at:
                        self._prune()
            except TypeError:  # an unhashable task id: the session is still recorded
                _warn_once("task-type", "perf_tracer: task id %r cannot be looked up", task_id)
        return number

    def _prune(self) -> None:
        """Forget the sessions asynctrace no longer holds pending (caller holds the lock).

        Called when the map has doubled since the last prune: amortized O(1) a
        registration, and the maps stay within twice the pending sessions
        (which asynctrace bounds by ``session_tracer.max_pending``).
        """
        pending = self._inner.is_pending
        gone = [number for number in self._task_of if not pending(str(number))]
        for number in gone:
            self._drop(number)
        self._prune_at = max(_PRUNE_MIN, 2 * len(self._task_of))

    def _drop(self, session_id: int) -> None:
        """Remove one session from both maps (caller holds the lock)."""
        task_id = self._task_of.pop(session_id, _NONE)
        sessions = self._tasks.get(task_id) if task_id is not _NONE else None
        if sessions is not None:
            sessions.discard(session_id)
            if not sessions:
                del self._tasks[task_id]

    def register_session(self, task_id: Any) -> int | None:
        """Register a pending session under *task_id* (``None`` too, as AReaL); its id.

        ``None`` when nothing is registered: the tracer is no longer running
        (see the class), or asynctrace refused (warned once).
        """
        if not self._running():
            return None
        try:
            return self._track(task_id, self._inner.register(_task_key(task_id)))
        except Exception as exc:  # never into the host
            _warn_once("register", "perf_tracer: register_session(%r) failed: %r", task_id, exc)
            return None

    def get_session_ids(self, task_id: Any) -> list[int]:
        """The pending sessions of *task_id*: not finalized, and not written by asynctrace
        (evicted past ``max_pending``, or at a shutdown)."""
        try:
            with self._lock:
                numbers = self._tasks.get(task_id)
                if not numbers:
                    return []
                pending = self._inner.is_pending
                for number in [n for n in numbers if not pending(str(n))]:
                    self._drop(number)
                return sorted(numbers)
        except TypeError:
            return []

    def _forget(self, session_id: int) -> None:
        with self._lock:
            self._drop(session_id)

    def record_event(self, session_id: int, event: Any, **payload: Any) -> None:
        """Apply AReaL event *event* (``SessionTraceEvent`` or its value) to one session.

        ``finalized`` takes ``status`` and ``reason`` (a status asynctrace has
        no name for is recorded as ``dropped``, with the status as the reason,
        warned once; no status, or ``"pending"``, leaves the session pending,
        as in AReaL);
        ``<phase>_start``/``_end`` time a phase. Other payload is not
        recorded, as AReaL does not record it. Nothing here raises.
        """
        try:
            if not self._running():
                return
            name = event.value if isinstance(event, enum.Enum) else str(event)
            target = str(session_id)
            if name == "finalized":
                self._finalize(session_id, target, payload)
                return
            phase, _, edge = name.rpartition("_")
            if edge in ("start", "end") and _phase_ok(phase):
                asynctrace.trace_session_event(name, target)
        except Exception as exc:  # an event never breaks the host
            _warn_once("event", "perf_tracer: event dropped: %r", exc)

    def _finalize(self, session_id: int, target: str, payload: Mapping[str, Any]) -> None:
        status = payload.get("status")
        if status is None:  # AReaL stamps finalized_ts and keeps the session pending
            return
        text = status.value if isinstance(status, enum.Enum) else str(status)
        if text == "pending":  # AReaL's status before any: the session stays pending
            return
        reason = payload.get("reason")
        if text not in _STATUSES:
            _warn_once(  # one key: status texts may be made per call
                "status",
                "perf_tracer: status %r is not one of %s; recorded as 'dropped' (warned once)",
                text,
                ", ".join(_STATUSES),
            )
            reason = reason if reason is not None else f"status {text}"
            text = "dropped"
        asynctrace.trace_session_event("finalized", target, status=text, reason=reason)
        self._forget(session_id)

    def increment_counter(self, session_id: int, name: str, value: Any = 1) -> None:
        """Add *value* to counter *name* of one session.

        A bool counts as ``int(value)`` (AReaL adds ``True`` as 1). A non-number,
        or a number that is not finite or is past a float's range (``10**400``),
        is ignored, warned once: nothing here raises.
        """
        if isinstance(value, bool):
            value = int(value)
        elif not isinstance(value, numbers.Real):
            _warn_once("counter", "perf_tracer: counter %r: %r is not a number", name, value)
            return
        try:
            number = int(value) if isinstance(value, numbers.Integral) else float(value)
            # Compared, not math.isfinite(): an int past a float's range raises there.
            usable = -_MAX_COUNT <= number <= _MAX_COUNT  # NaN is not
        except Exception:  # a number type whose int()/float() raises
            usable = False
        if not usable:
            _warn_once(
                "counter",
                "perf_tracer: counter %r: %r is not a finite float-range number",
                name,
                value,
            )
            return
        if not self._running():
            return
        try:
            self._inner.count(str(session_id), str(name), number)
        except Exception as exc:
            _warn_once("count", "perf_tracer: counter %r dropped: %r", name, exc)

    def flush(self, force: bool = False) -> None:
        """Write every finalized session (AReaL's ``flush``).

        With *force*, AReaL also writes the pending ones; asynctrace keeps
        them until they are finalized or the tracer shuts down (then they are
        written as ``pending``), so both calls write the finalized sessions.
        """
        self._inner.flush()

    def reset(self) -> None:
        """Write the finalized sessions and forget the task map (AReaL's ``reset``)."""
        self.flush(force=True)
        with self._lock:
            self._tasks.clear()
            self._task_of.clear()
            self._prune_at = _PRUNE_MIN


_STATUSES: Final = ("accepted", "rejected", "failed", "dropped")
_session_tracers: weakref.WeakSet[SessionTracer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for tracer in list(_session_tracers):
        tracer._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # once for the module: a WeakSet, not one hook per tracer
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _task_ok(task_id: Any) -> bool:
    return not isinstance(task_id, bool) and isinstance(task_id, int | str)


def _task_key(task_id: Any) -> int | str | None:
    """A task id as asynctrace records it: numpy's integers as ints, other objects as text."""
    if task_id is None or _task_ok(task_id):
        return task_id  # type: ignore[no-any-return]
    if isinstance(task_id, numbers.Integral):
        return int(task_id)
    return str(task_id)
