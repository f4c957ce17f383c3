"""AReaL's ``perf_tracer`` API on asynctrace (``from asynctrace_contrib import areal``).

A drop-in for ``areal.utils.perf_tracer`` (AReaL 1.0.4): the same functions,
configured from the same ``perf_tracer:`` block, writing the same directory
layout (``<fileroot>/logs/<user>/<experiment>/<trial>/perf_tracer/traces-r{rank}.jsonl``
and ``.../session_tracer/sessions-r{rank}.jsonl``) with AReaL's field names,
and recording through asynctrace: scopes are asynctrace spans (so OTLP export,
``asynctrace goodput`` and ``report`` work on them), sessions are asynctrace
sessions (with AReaL's numeric ids).

Categories become span groups and goodput buckets by :data:`DEFAULT_CATEGORY_MAP`
(``compute`` is productive, ``sync`` idle, ``comm``/``io``/``scheduler``/``instr``
overhead, ``misc`` and unknown categories unbucketed umbrellas); pass
``category_map=`` to :func:`configure` to change it. A scope whose ``args``
hold ``global_step`` runs inside :func:`asynctrace.iteration_scope`, so its
span and everything under it carry ``rl.iteration``, and an unbucketed one is
the step ``asynctrace goodput`` reports.

Example:
    >>> from asynctrace_contrib import areal as perf_tracer
    >>> with perf_tracer.trace_scope("train.step", args={"global_step": 3}):
    ...     pass
"""

from __future__ import annotations

import contextvars
import enum
import functools
import getpass
import importlib.util
import inspect
import json
import logging
import numbers
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar, Union

import asynctrace

__all__ = [
    "DEFAULT_CATEGORY_MAP",
    "GLOBAL_TRACER",
    "Category",
    "CategoryLike",
    "PerfTraceCategory",
    "PerfTracer",
    "PerfTracerConfig",
    "SessionTraceEvent",
    "SessionTracer",
    "SessionTracerConfig",
    "atrace_scope",
    "atrace_session_phase",
    "configure",
    "get_session_id",
    "get_session_tracer",
    "get_task_id",
    "get_tracer",
    "instant",
    "is_configured",
    "register_session",
    "register_task",
    "reset",
    "save",
    "session_context",
    "set_session_id",
    "set_task_id",
    "trace_perf",
    "trace_scope",
    "trace_session",
    "trace_session_event",
    "trace_session_phase",
]

F = TypeVar("F", bound=Callable[..., Any])
NAMESPACE: Final = "areal"
"""The namespace AReaL's category groups are registered under."""

_MAX_COUNT: Final = sys.float_info.max  # the increments asynctrace's counters take
_log = logging.getLogger("asynctrace_contrib.areal")
_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: object) -> None:
    """Log *message* the first time *key* comes up (AReaL warns and goes on; so does this)."""
    if key in _warned:
        return
    _warned.add(key)
    try:  # an exception's repr may name a URL with its token: redacted as asynctrace logs
        text = asynctrace.redact_text(message % args if args else message)
    except Exception:
        text = f"{message} (arguments left out: they could not be formatted)"
    _log.warning("%s", text)


class PerfTraceCategory(str, enum.Enum):
    """AReaL's trace categories.

    Example:
        >>> PerfTraceCategory.COMPUTE.value
        'compute'
    """

    COMPUTE = "compute"
    COMM = "comm"
    IO = "io"
    SYNC = "sync"
    SCHEDULER = "scheduler"
    INSTR = "instr"
    MISC = "misc"


Category = PerfTraceCategory
CategoryLike = Union[PerfTraceCategory, str, None]  # noqa: UP007

_ALIASES: Final = {
    "communication": "comm",
    "synchronization": "sync",
    "scheduling": "scheduler",
    "instrumentation": "instr",
}

DEFAULT_CATEGORY_MAP: Final[Mapping[str, asynctrace.Bucket | None]] = {
    "compute": asynctrace.Bucket.PRODUCTIVE,
    "comm": asynctrace.Bucket.OVERHEAD,
    "io": asynctrace.Bucket.OVERHEAD,
    "sync": asynctrace.Bucket.IDLE,
    "scheduler": asynctrace.Bucket.OVERHEAD,
    "instr": asynctrace.Bucket.OVERHEAD,
    "misc": None,
}
"""AReaL category -> goodput bucket (``None``: an unbucketed umbrella).

Each category is the span group ``areal.<category>``; a category not in the
table (AReaL accepts any string) is treated as ``misc``. The same table is
``asynctrace goodput``'s default for AReaL's own trace files.
"""

asynctrace.register_span_groups(
    NAMESPACE,
    [
        asynctrace.SpanGroup(
            f"areal.{name}",
            bucket if bucket is not None else asynctrace.Bucket.OVERHEAD,
            description=f"AReaL category {name!r}",
        )
        for name, bucket in DEFAULT_CATEGORY_MAP.items()
    ],
    presets={NAMESPACE: [f"areal.{name}" for name in DEFAULT_CATEGORY_MAP]},
)


def _category(category: CategoryLike) -> str:
    """AReaL's normalisation: enum value, alias, lower-cased name; ``misc`` for none."""
    if isinstance(category, PerfTraceCategory):
        return category.value
    if isinstance(category, str) and category.strip():
        lowered = category.strip().lower()
        return _ALIASES.get(lowered, lowered)
    return "misc"


def _areal_category(category: CategoryLike) -> str:
    """The category as AReaL writes it in ``cat``: aliases resolved, any other text as given."""
    if isinstance(category, PerfTraceCategory):
        return category.value
    if isinstance(category, str) and category.strip():
        lowered = category.strip().lower()
        if lowered in _ALIASES or lowered in DEFAULT_CATEGORY_MAP:
            return _ALIASES.get(lowered, lowered)
        return category
    return "misc"


@dataclass
class SessionTracerConfig:
    """AReaL 1.0.4's ``SessionTracerConfig`` (fields and defaults).

    Example:
        >>> SessionTracerConfig(enabled=True).flush_threshold
        256
    """

    enabled: bool = False
    flush_threshold: int = 256


@dataclass
class PerfTracerConfig:
    """AReaL 1.0.4's ``PerfTracerConfig`` (fields and defaults), the ``perf_tracer:`` block.

    AReaL's own config object (``areal.api.cli_args.PerfTracerConfig``) or a
    mapping with these keys is accepted by :func:`configure` as well.

    Example:
        >>> PerfTracerConfig(enabled=True, fileroot="/tmp/x").save_interval
        1
    """

    experiment_name: str = "???"
    trial_name: str = "???"
    fileroot: str = "???"
    enabled: bool = False
    save_interval: int = 1
    profile_steps: list[int] | None = None
    session_tracer: SessionTracerConfig | None = field(default=None)


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


def _field(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


_SCALARS: Final = frozenset({bool, int, float, str})
_NONE: Final = object()  # no task known for a session


def _json_text(value: Any) -> str:
    """*value* as the JSON text AReaL writes for it (other objects as their ``str()``)."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:  # a circular value, a str() that raises: never break the caller
        try:
            return str(value)
        except Exception:
            return f"<unreadable {type(value).__name__}>"


_REDACTED: Final = "REDACTED"  # what a credential key's value becomes, as in session payloads
_MAX_KEYS_CACHED: Final = 4096
_credential_keys: dict[str, bool] = {}  # key -> asynctrace.is_credential_key(key), bounded
_plain_texts: set[str] = set()  # short strings found to hold nothing to redact, bounded
_MAX_PLAIN_LEN: Final = 256


def _is_credential(key: str) -> bool:
    """``asynctrace.is_credential_key(key)``, remembered: ``args`` keys repeat every step."""
    found = _credential_keys.get(key)
    if found is None:
        found = asynctrace.is_credential_key(key)
        if len(_credential_keys) < _MAX_KEYS_CACHED:
            _credential_keys[key] = found
    return found


def _text(value: str) -> str:
    """*value* redacted (``asynctrace.redact_text``).

    ``args`` strings repeat every step: a short one that redaction leaves as
    it is is remembered (a bounded set), so next time it costs a set lookup.
    """
    redacted = asynctrace.redact_text(value)
    if redacted == value and len(value) <= _MAX_PLAIN_LEN and len(_plain_texts) < _MAX_KEYS_CACHED:
        _plain_texts.add(value)
    return redacted


def _attribute(value: Any) -> Any:
    """One ``args`` value as a span attribute, as close to AReaL's JSON as attributes go.

    Numbers stay as they are (numpy's numbers as the int or float they stand
    for), a string is redacted (:func:`_text`), a list or tuple of one scalar
    type stays a list (of redacted strings), anything else (mappings, mixed or
    nested lists) is its JSON text, redacted: a ``headers`` mapping loses its
    ``Authorization`` value.
    """
    cls = value.__class__
    if cls is int or cls is float or cls is bool:
        return value
    if cls is str:
        return value if value in _plain_texts else _text(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):  # a str enum: its value, as json.dumps writes it
        return _text(str.__str__(value))
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, list | tuple):
        kinds = {v.__class__ for v in value}
        if len(kinds) == 1 and kinds <= _SCALARS:
            return [_text(v) for v in value] if str in kinds else list(value)
    return _text(_json_text(value))


def _attributes(
    args: Mapping[str, Any] | None, category: str | None = None
) -> dict[str, Any] | None:
    """AReaL's ``args`` as span attributes (see :func:`_attribute`), with ``areal.category``.

    ``None`` values are left out: an attribute cannot hold ``null``. The value
    of a credential key (``asynctrace.is_credential_key``: ``api_key``,
    ``access_token``, ``Authorization``) is ``"REDACTED"``, whatever its type.
    """
    out: dict[str, Any] = {}
    if args:
        for key, value in args.items():
            if value is None:
                continue
            name = key if key.__class__ is str else str(key)
            secret = _credential_keys.get(name)  # inline: args keys repeat every step
            if secret is None:
                secret = _is_credential(name)
            cls = value.__class__
            if secret:
                out[name] = _REDACTED
            elif (
                cls is int or cls is float or cls is bool or (cls is str and value in _plain_texts)
            ):  # inline, no call: what args hold every step
                out[name] = value
            else:
                out[name] = _attribute(value)
    if category is not None:
        out["areal.category"] = category
    return out or None


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
        _session_tracers.add(self)  # a forked child gets a new lock and no sessions

    def _after_fork_in_child(self) -> None:
        """A forked child starts with a new lock (another thread may have held this one at
        the fork) and no sessions, as asynctrace's own session tracer does there."""
        self._lock = threading.Lock()
        self._tasks = {}
        self._task_of = {}

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
        stats["refused_phases"] = _refused_phases
        return stats

    def register_task(self, task_id: int) -> None:
        """Declare a task (AReaL's ``register_task``)."""
        with self._lock:
            self._tasks.setdefault(task_id, set())

    def _track(self, task_id: Any, session_id: str) -> int | None:
        number = int(session_id) if session_id.isdigit() else None
        if number is not None:
            try:
                with self._lock:
                    self._tasks.setdefault(task_id, set()).add(number)
                    self._task_of[number] = task_id
            except TypeError:  # an unhashable task id: the session is still recorded
                _warn_once("task-type", "perf_tracer: task id %r cannot be looked up", task_id)
        return number

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
        """The sessions of *task_id* not finalized through this layer."""
        try:
            with self._lock:
                return sorted(self._tasks.get(task_id, ()))
        except TypeError:
            return []

    def _forget(self, session_id: int) -> None:
        with self._lock:
            task_id = self._task_of.pop(session_id, _NONE)
            sessions = self._tasks.get(task_id) if task_id is not _NONE else None
            if sessions is not None:
                sessions.discard(session_id)
                if not sessions:
                    del self._tasks[task_id]

    def record_event(self, session_id: int, event: Any, **payload: Any) -> None:
        """Apply AReaL event *event* (``SessionTraceEvent`` or its value) to one session.

        ``finalized`` takes ``status`` and ``reason`` (a status asynctrace has
        no name for is recorded as ``dropped``, with the status as the reason,
        warned once; no status leaves the session pending, as in AReaL);
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
        reason = payload.get("reason")
        text = status.value if isinstance(status, enum.Enum) else str(status)
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


_STATUSES: Final = ("accepted", "rejected", "failed", "dropped")
_session_tracers: weakref.WeakSet[SessionTracer] = weakref.WeakSet()


_perf_tracers: weakref.WeakSet[PerfTracer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for tracer in list(_session_tracers):
        tracer._after_fork_in_child()
    for perf in list(_perf_tracers):
        perf._after_fork_in_child()


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


class PerfTracer:
    """The configured tracer, as ``perf_tracer.get_tracer()`` returns it.

    Built as AReaL's is, ``PerfTracer(config, rank=0, role=None)`` (what
    :func:`configure` does, without making it the module's tracer; the
    extra keywords are :func:`configure`'s). Building one changes nothing
    else: it configures asynctrace when it first records (a scope, an
    instant, its :attr:`session_tracer`), or when :func:`configure` makes it
    the module's. ``telemetry`` is the :class:`asynctrace.Telemetry` it runs
    (``None`` until then; a disabled tracer without sessions leaves asynctrace
    alone until :meth:`set_enabled`); ``trace_path`` and ``session_path`` are
    AReaL's file locations.

    asynctrace runs one configuration per process. A tracer that starts
    while another one's configuration is running replaces it (warned once);
    the replaced tracer records nothing more: its scopes and instants are
    skipped and counted in :meth:`stats` (``not_running``), warned once, and
    its session tracer does the same (:class:`SessionTracer`). So does a
    tracer whose configuration ``asynctrace.configure`` or ``shutdown``
    replaced.

    Example:
        >>> tracer = PerfTracer(PerfTracerConfig(), rank=0)
        >>> tracer.enabled, tracer.telemetry
        (False, None)
    """

    def __init__(
        self,
        config: Any,
        *,
        rank: int,
        role: str | None = None,
        telemetry: Mapping[str, Any] | None = None,
        category_map: Mapping[str, asynctrace.Bucket | str | None] | None = None,
    ) -> None:
        if rank < 0:
            raise ValueError("rank must be a non-negative integer")
        self.rank = rank
        self.role = role
        self._buckets = _category_map(category_map)
        self._groups = {name: (f"areal.{name}", b) for name, b in self._buckets.items()}
        base = _base_dir(config).absolute()
        trace_dir = base / "perf_tracer"
        session_dir = base / "session_tracer"
        if role:
            trace_dir, session_dir = trace_dir / role, session_dir / role
        sessions = _field(config, "session_tracer")
        self._sessions_on = bool(sessions is not None and _field(sessions, "enabled", False))
        self._enabled = bool(_field(config, "enabled", False))
        extra = _deep_merge({}, telemetry or {})
        ids = _field(extra.get("session_tracer") or {}, "ids", "sequential")
        if ids != "sequential":
            raise asynctrace.ConfigurationError(
                f"telemetry['session_tracer']['ids']: {ids!r} is not accepted; accepted: "
                "sequential (AReaL's API numbers its sessions)"
            )
        groups = ",".join(filter(None, [NAMESPACE, extra.pop("span_groups", "")]))
        settings: dict[str, Any] = {
            "enabled": True,
            "span_groups": groups,
            "exporters": ["chrome"],
            "output_dir": str(trace_dir),
            "session_tracer": {
                "enabled": self._sessions_on,
                "flush_threshold": _flush_threshold(sessions) if self._sessions_on else 100,
                "output_dir": str(session_dir),
                "ids": "sequential",
            },
        }
        steps = _field(config, "profile_steps")
        if steps and "profiler" not in extra:
            kept = _profile_steps(steps)
            if kept:
                settings["profiler"] = {"steps": kept, "backend": _profiler_backend()}
        self._settings = _deep_merge(settings, extra)
        # Checked now, though asynctrace is configured later: a bad key fails here, not in
        # the first scope.
        asynctrace.TelemetryConfig.from_mapping(self._settings)
        self._world_size = _world_size(rank)
        name = (
            f"traces-r{rank}.jsonl" if role in (None, "worker") else f"traces-{role}-r{rank}.jsonl"
        )
        self.trace_path = trace_dir / name
        self.session_path: Path | None = None
        self.telemetry: asynctrace.Telemetry | None = None
        self._session_tracer: SessionTracer | None = None
        self._not_running = 0
        self._count_lock = threading.Lock()
        self._start_lock = threading.Lock()  # one lazy configuration, whichever thread asks
        self._start_error: Exception | None = None
        _perf_tracers.add(self)

    def _after_fork_in_child(self) -> None:
        """New locks: one held by another thread at fork() would never be released."""
        self._count_lock = threading.Lock()
        self._start_lock = threading.Lock()

    def _activate(self) -> None:
        """Configure asynctrace now if this tracer records anything (:func:`configure`)."""
        if self.telemetry is None and (self._enabled or self._sessions_on):
            self._start()

    def _start(self) -> None:
        """Configure asynctrace (only now: a disabled tracer leaves its state alone).

        Disabled with sessions on, asynctrace runs the session tracer alone:
        no span pipeline, OpenTelemetry's global provider left as it is.
        """
        global _last_started
        previous = _last_started() if _last_started is not None else None
        if (
            previous is not None
            and previous is not self
            and previous.telemetry is not None
            and previous.telemetry is asynctrace.current_telemetry()
        ):
            _warn_once(
                "replaced",
                "perf_tracer: a PerfTracer writing to %s replaces the running one (%s): "
                "asynctrace runs one configuration per process, so the replaced tracer "
                "records nothing more (counted in its stats()['not_running'])",
                self.trace_path.parent,
                previous.trace_path.parent,
            )
        handle = asynctrace.configure(
            {**self._settings, "enabled": self._enabled},
            rank=self.rank,
            world_size=self._world_size,
            role=self.role,
        )
        self.telemetry = handle
        _last_started = weakref.ref(self)
        if handle.sessions is not None:
            self.session_path = Path(handle.sessions.path)
            self._session_tracer = SessionTracer(
                rank=self.rank, role=self.role, tracer=handle.sessions
            )

    @property
    def enabled(self) -> bool:
        """Whether scopes and instants are recorded."""
        return self._enabled

    def set_enabled(self, flag: bool) -> None:
        """Turn recording of scopes and instants on or off (AReaL's switch).

        Turning it on for a tracer configured disabled starts asynctrace's span
        pipeline then (a reconfiguration: sessions still open are written as
        ``pending`` by the session tracer it replaces).
        """
        self._enabled = bool(flag)
        if self._enabled and (self.telemetry is None or not self.telemetry.enabled):
            self._start()

    @property
    def session_tracer(self) -> SessionTracer | None:
        """AReaL's session tracer API (:class:`SessionTracer`), when ``session_tracer.enabled``
        (asking for it starts this tracer, as recording does)."""
        if self.telemetry is None and self._sessions_on:
            self._start_lazily()
        return self._session_tracer

    def _start_lazily(self) -> bool:
        """Start from the host's recording calls: once, whichever thread asks first; a
        failure (an output directory that cannot be written, say) is said once, never
        raised into the host and not tried again: this tracer then records nothing."""
        with self._start_lock:
            if self.telemetry is not None:
                return True
            if self._start_error is not None:
                return False
            try:
                self._start()
            except Exception as exc:
                self._start_error = exc
                _warn_once(
                    "start-failed",
                    "perf_tracer: asynctrace could not be configured for %s (%s); this "
                    "tracer records nothing",
                    self.trace_path.parent,
                    exc,
                )
                return False
            return True

    def stats(self) -> dict[str, int]:
        """``not_running``: scopes and instants not recorded because this tracer's asynctrace
        configuration is no longer the running one (see the class)."""
        return {"not_running": self._not_running}

    def _runs(self) -> bool:
        """Whether scopes may be recorded: started now if need be; ``False`` (counted, warned
        once) when another configuration replaced this tracer's."""
        telemetry = self.telemetry
        if telemetry is None:
            return self._start_lazily()
        if telemetry is asynctrace.current_telemetry():
            return True
        with self._count_lock:
            self._not_running += 1
        _warn_once(
            "scopes-not-running",
            "perf_tracer: the PerfTracer writing to %s is no longer asynctrace's running "
            "configuration (another PerfTracer recorded, or asynctrace was configured or "
            "shut down): its scopes and instants are not recorded from now on (counted in "
            "its stats()['not_running'])",
            self.trace_path.parent,
        )
        return False

    def bucket_of(self, category: str) -> tuple[str, asynctrace.Bucket | None]:
        """The span group and bucket of a (normalised) category."""
        found = self._groups.get(category)
        return found if found is not None else self._groups["misc"]

    def trace_scope(
        self,
        name: str,
        *,
        category: CategoryLike = None,
        enable_profiler: bool = False,
        profiler_args: dict[str, Any] | None = None,
        args: dict[str, Any] | None = None,
    ) -> _Scope | _NullContext:
        """A span around the block (``with`` or ``async with``); see :func:`trace_scope`."""
        if not self._enabled:
            return _NULL
        telemetry = self.telemetry  # the common case inline: this tracer's config is running
        if (telemetry is None or telemetry is not asynctrace.current_telemetry()) and not (
            self._runs()
        ):
            return _NULL
        return _Scope(self, name, category, args, enable_profiler)

    atrace_scope = trace_scope

    def instant(
        self, name: str, *, category: CategoryLike = None, args: dict[str, Any] | None = None
    ) -> None:
        """A point in time; see :func:`instant`."""
        if self._enabled and self._runs():
            group, _ = self.bucket_of(_category(category))
            asynctrace.instant(
                group, name, attributes=_attributes(args, _areal_category(category))
            )

    def save(self, *, step: int | None = None, force: bool = False) -> None:
        """Write out what was recorded; see :func:`save`."""
        if force and self.telemetry is not None:
            self.telemetry.flush()

    def reset(self) -> None:
        """Flush and stop, as AReaL's ``reset`` does before a new ``configure``."""
        if self.telemetry is not None:
            self.telemetry.shutdown()


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """*base* with *extra* merged in, nested mappings key by key (copies; neither changes)."""
    out = dict(base)
    for key, value in extra.items():
        current = out.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = _deep_merge(dict(current), value)
        elif isinstance(value, Mapping):
            out[key] = _deep_merge({}, value)
        else:
            out[key] = value
    return out


def _flush_threshold(sessions: Any) -> int:
    """AReaL's rule: an int of at least 1; anything else is 1, with a warning."""
    raw = _field(sessions, "flush_threshold", 256)
    try:
        return max(int(raw), 1)
    except (TypeError, ValueError, OverflowError):
        _warn_once("flush_threshold", "Invalid flush_threshold=%r; defaulting to 1", raw)
        return 1


def _world_size(rank: int) -> int:
    """``WORLD_SIZE`` (at least ``rank + 1``); a value that is not an integer is warned about."""
    raw = os.environ.get("WORLD_SIZE", "")
    try:
        size = int(raw) if raw.strip() else 1
    except ValueError:
        _warn_once("world_size", "perf_tracer: WORLD_SIZE=%r is not an integer; using 1", raw)
        size = 1
    return max(size, rank + 1)


class _NullContext:
    """The disabled scope: nothing, with and async with."""

    def __enter__(self) -> _NullContext:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> _NullContext:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


_NULL: Final = _NullContext()


class _Scope:
    """One ``trace_scope``: the iteration scope (for ``global_step``), then the span.

    ``args`` are read on entry and again on exit, as AReaL copies them when the
    scope ends: a key the block adds or changes in the same dict is recorded
    (``global_step`` set in the block stamps no ``rl.iteration``: that is fixed
    on entry; a key the block removes stays recorded).
    """

    __slots__ = (
        "_args",
        "_category",
        "_entry",
        "_live",
        "_name",
        "_profile",
        "_scope",
        "_span",
        "_tracer",
    )

    def __init__(
        self,
        tracer: PerfTracer,
        name: str,
        category: CategoryLike,
        args: dict[str, Any] | None,
        profile: bool = False,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._category = category
        self._args = args
        self._profile = profile
        self._scope: Any = None
        self._span: Any = None
        self._live: Any = None
        self._entry: dict[str, Any] | None = None

    def __enter__(self) -> _Scope:
        args = self._args
        step = args.get("global_step") if args else None
        if step.__class__ is int:
            self._scope = scope = asynctrace.iteration_scope(step)
            scope.__enter__()
        category = self._category
        group, bucket = self._tracer.bucket_of(_category(category))
        attributes = _attributes(args, _areal_category(category))
        profile = self._profile
        if bucket is None:
            span = asynctrace.umbrella_span(
                group, self._name, attributes=attributes, profile=profile
            )
        else:
            span = asynctrace.managed_span(
                group, self._name, attributes=attributes, bucket=bucket, profile=profile
            )
        self._live = span.__enter__()
        self._span = span
        if args:  # what exit compares with: a shallow copy (values by identity first)
            self._entry = dict(args)
        return self

    def _update(self, args: dict[str, Any], entry: dict[str, Any] | None) -> None:
        """Set the attributes of ``args`` keys added or changed in the block."""
        try:
            now = _attributes(args) or {}
            changed = {
                key: value
                for key, value in now.items()
                if entry is None or key not in entry or entry[key] is not args.get(key)
            }
            if changed:
                self._live.set_attributes(changed)
        except Exception as exc:  # never into the host
            _warn_once("scope-args", "perf_tracer: args changed in a scope not recorded: %r", exc)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span, self._span = self._span, None
        scope, self._scope = self._scope, None
        try:
            if span is not None:
                args = self._args
                if args is not None:  # changed in the block? (values by identity first)
                    entry = self._entry
                    if entry is None:
                        if args:
                            self._update(args, None)
                    else:
                        try:
                            same = args == entry
                        except Exception:  # a changed value whose == raises (numpy)
                            same = False
                        if not same:
                            self._update(args, entry)
                span.__exit__(exc_type, exc, tb)
        finally:
            if scope is not None:
                scope.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> _Scope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


_lock = threading.Lock()
_last_started: weakref.ref[PerfTracer] | None = None  # whose configuration asynctrace runs
GLOBAL_TRACER: PerfTracer | None = None
"""The configured tracer (AReaL's name), ``None`` until :func:`configure`."""
_task_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "asynctrace_contrib.areal.task_id", default=None
)
_session_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "asynctrace_contrib.areal.session_id", default=None
)


def _base_dir(config: Any) -> Path:
    """AReaL's ``<fileroot>/logs/<user>/<experiment>/<trial>``."""
    fileroot = os.path.expanduser(os.path.expandvars(str(_field(config, "fileroot", "???"))))
    return Path(
        fileroot,
        "logs",
        getpass.getuser(),
        str(_field(config, "experiment_name", "???")),
        str(_field(config, "trial_name", "???")),
    )


def _profile_steps(steps: Any) -> list[int]:
    """``profile_steps`` as a list of steps; an entry that is not one is warned about and
    skipped, as AReaL does."""
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
        steps = [steps]
    kept: list[int] = []
    for raw in steps:
        try:
            step = int(raw)
        except (TypeError, ValueError, OverflowError):
            step = -1
        if step < 0 or isinstance(raw, bool) or (isinstance(raw, float) and raw != step):
            _warn_once(f"profile_steps:{raw!r}", "PerfTracer: invalid profile_steps entry %r", raw)
            continue
        kept.append(step)
    return kept


def _profiler_backend() -> str:
    """AReaL profiles with ``torch.profiler``: the torch backend where torch is installed."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except ValueError:  # a stand-in module in sys.modules, without a spec: not torch
        found = False
    return "torch" if found else "python"


def _category_map(
    overrides: Mapping[str, asynctrace.Bucket | str | None] | None,
) -> dict[str, asynctrace.Bucket | None]:
    table: dict[str, asynctrace.Bucket | None] = dict(DEFAULT_CATEGORY_MAP)
    for raw, value in (overrides or {}).items():
        name = _category(raw)
        if name not in table:
            raise asynctrace.ConfigurationError(
                f"category_map: {raw!r} is not a category; accepted: {', '.join(table)}"
            )
        if value is None or (isinstance(value, str) and value.lower() in ("none", "")):
            table[name] = None
            continue
        try:
            table[name] = asynctrace.Bucket(value)
        except ValueError:
            raise asynctrace.ConfigurationError(
                f"category_map[{raw!r}]: {value!r} is not accepted; accepted: "
                f"{', '.join(b.value for b in asynctrace.Bucket)} or none"
            ) from None
    return table


def configure(
    config: Any,
    *,
    rank: int,
    role: str | None = None,
    telemetry: Mapping[str, Any] | None = None,
    category_map: Mapping[str, asynctrace.Bucket | str | None] | None = None,
) -> PerfTracer:
    """Start tracing for this rank from a ``perf_tracer:`` block, as AReaL's ``configure``.

    *config* is AReaL's ``PerfTracerConfig``, this module's, or a mapping with
    its keys. Traces go to ``perf_tracer/traces-r{rank}.jsonl`` and, with
    ``session_tracer.enabled``, sessions to ``session_tracer/sessions-r{rank}.jsonl``
    under ``<fileroot>/logs/<user>/<experiment>/<trial>`` (a *role* adds a
    subdirectory, as in AReaL, and asynctrace names the files
    ``traces-{role}-r{rank}.jsonl``). *telemetry* is merged into the
    :class:`asynctrace.TelemetryConfig` (e.g. ``{"exporters": ["chrome",
    "otlp"]}``, more ``span_groups``); *category_map* overrides
    :data:`DEFAULT_CATEGORY_MAP` (``{"io": "idle", "misc": "overhead"}``).
    ``profile_steps`` schedules asynctrace's profiler (the ``profiler`` configuration)
    for those steps: a scope with ``enable_profiler=True`` whose ``global_step``
    (its own, else the enclosing scope's) is scheduled is profiled, as in AReaL,
    with ``torch.profiler`` when torch is installed (AReaL's profiler), else
    the ``python`` backend; a ``profiler`` block in *telemetry* wins.
    ``save_interval`` is accepted; asynctrace writes continuously, so it
    changes nothing. With ``enabled: false`` and no session tracer,
    asynctrace is left as it is (an application's own configuration keeps
    running) until ``get_tracer().set_enabled(True)``. *telemetry* is merged
    key by key into nested blocks; a bad ``flush_threshold``, ``WORLD_SIZE``
    or ``profile_steps`` entry is warned about, as AReaL does, not raised.

    Raises:
        RuntimeError: already configured (call :func:`reset` first), as in AReaL.
        ValueError: a negative *rank*.
        asynctrace.ConfigurationError: a bad *telemetry* key or *category_map*.

    Example:
        >>> tracer = configure({"enabled": True, "fileroot": "/tmp/run"}, rank=0)  # doctest: +SKIP
    """
    global GLOBAL_TRACER
    with _lock:
        if GLOBAL_TRACER is not None:
            raise RuntimeError(
                "PerfTracer has already been configured. Call perf_tracer.reset() "
                "before configuring again."
            )
        tracer = PerfTracer(
            config, rank=rank, role=role, telemetry=telemetry, category_map=category_map
        )
        tracer._activate()
        GLOBAL_TRACER = tracer
        return tracer


def is_configured() -> bool:
    """Whether :func:`configure` ran (and :func:`reset` did not since).

    Example:
        >>> isinstance(is_configured(), bool)
        True
    """
    return GLOBAL_TRACER is not None


def reset() -> None:
    """Flush, stop, and forget the tracer, so :func:`configure` may run again.

    Example:
        >>> reset()
    """
    global GLOBAL_TRACER
    with _lock:
        tracer, GLOBAL_TRACER = GLOBAL_TRACER, None
    if tracer is not None:
        tracer.reset()


def get_tracer() -> PerfTracer:
    """The configured :class:`PerfTracer`.

    Raises:
        RuntimeError: not configured, as in AReaL.

    Example:
        >>> get_tracer()  # doctest: +SKIP
    """
    tracer = GLOBAL_TRACER
    if tracer is None:
        raise RuntimeError("PerfTracer is not configured. Call perf_tracer.configure(...) first.")
    return tracer


def get_session_tracer() -> SessionTracer | None:
    """AReaL's session tracer API (:class:`SessionTracer`), or ``None`` when sessions are off
    or nothing is configured.

    Example:
        >>> get_session_tracer() is None or True
        True
    """
    tracer = GLOBAL_TRACER
    return None if tracer is None else tracer.session_tracer


def trace_scope(
    name: str,
    *,
    category: CategoryLike = None,
    enable_profiler: bool = False,
    profiler_args: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
) -> _Scope | _NullContext:
    """A span around the block: ``with trace_scope(name, category=..., args=...)``.

    The category picks the group and bucket (:data:`DEFAULT_CATEGORY_MAP`);
    *args* become attributes; ``args["global_step"]`` stamps ``rl.iteration``
    on the span and everything inside it. Works with ``async with`` too.
    *enable_profiler* asks for a profile of the block, taken when its step is
    in ``profile_steps`` (see :func:`configure`). *profiler_args* is accepted;
    asynctrace sets ``record_shapes`` and ``with_stack`` once, in the
    ``profiler`` block of ``configure(..., telemetry=...)``.

    Example:
        >>> with trace_scope("train.ppo_update", category="compute", args={"global_step": 1}):
        ...     pass
    """
    tracer = GLOBAL_TRACER
    if tracer is None or not tracer.enabled:
        return _NULL
    return tracer.trace_scope(name, category=category, enable_profiler=enable_profiler, args=args)


def atrace_scope(
    name: str,
    *,
    category: CategoryLike = None,
    enable_profiler: bool = False,
    profiler_args: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
) -> _Scope | _NullContext:
    """:func:`trace_scope` for ``async with``.

    Example:
        >>> async def rollout():
        ...     async with atrace_scope("rollout.batch", category="scheduler"):
        ...         pass
    """
    return trace_scope(name, category=category, enable_profiler=enable_profiler, args=args)


def instant(
    name: str, *, category: CategoryLike = None, args: dict[str, Any] | None = None
) -> None:
    """Mark a point in time (an event on the current span, or a zero-length span).

    Example:
        >>> instant("workflow_executor.wait", category="scheduler", args={"queue_size": 3})
    """
    tracer = GLOBAL_TRACER
    if tracer is not None:
        tracer.instant(name, category=category, args=args)


def save(*, step: int | None = None, force: bool = False) -> None:
    """``force=True`` writes out every ended span and finished session (``asynctrace.flush``).

    Without *force* it does nothing: asynctrace's writers run in the
    background, and the session tracer writes every ``flush_threshold``
    sessions. Sessions still pending are written at shutdown, as ``pending``.

    Example:
        >>> save(force=True)
    """
    tracer = GLOBAL_TRACER
    if tracer is not None:
        tracer.save(step=step, force=force)


def trace_perf(name: str, *, category: CategoryLike = None) -> Callable[[F], F]:
    """Decorate a function (sync or async) so each call runs in :func:`trace_scope`.

    Example:
        >>> @trace_perf("fsdp_engine.train_batch", category="compute")
        ... def train_batch():
        ...     return 1
        >>> train_batch()
        1
    """

    def decorator(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with trace_scope(name, category=category):
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with trace_scope(name, category=category):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


# --- sessions ----------------------------------------------------------------


def set_session_id(session_id: int | None) -> None:
    """Set the session id of the current context (AReaL's contextvar; no reset).

    Example:
        >>> set_session_id(None)
    """
    _session_id.set(session_id)


def get_session_id() -> int | None:
    """The session id of the current context.

    Example:
        >>> get_session_id() is None or True
        True
    """
    return _session_id.get()


def set_task_id(task_id: int | None) -> None:
    """Set the task id of the current context (AReaL's ``WorkflowExecutor`` does this).

    Example:
        >>> set_task_id(None)
    """
    _task_id.set(task_id)


def get_task_id() -> int | None:
    """The task id of the current context.

    Example:
        >>> get_task_id() is None or True
        True
    """
    return _task_id.get()


def register_task(task_id: int) -> None:
    """Declare a task (AReaL's ``register_task``).

    Example:
        >>> register_task(7)
    """
    tracer = get_session_tracer()
    if tracer is not None:
        tracer.register_task(task_id)


def register_session(task_id: int | None) -> int | None:
    """Register a session under *task_id* and return its (numeric) id; ``None`` when off.

    Example:
        >>> register_session(7) is None or True
        True
    """
    tracer = get_session_tracer()
    return None if tracer is None else tracer.register_session(task_id)


class _Activation:
    """The span scopes of one :func:`session_context` call: ``rl.task_id`` and
    ``rl.session_id`` on the spans inside, the session registered as AReaL does.

    The session is left pending whatever the call does (AReaL's orchestrator
    finalizes it), so the scopes are always left as if the block succeeded.
    """

    __slots__ = ("_scopes",)

    def __init__(self) -> None:
        self._scopes: list[Any] = []

    def __enter__(self) -> None:
        task_id = get_task_id()
        tracer = get_session_tracer()
        if task_id is None or tracer is None:  # AReaL: no task (or no tracer), no session
            set_session_id(None)
            return
        if not tracer._running():  # its sessions would go to another tracer: counted instead
            set_session_id(None)
            return
        if not _task_ok(task_id):  # no scope for it: registered, spans unstamped
            set_session_id(tracer.register_session(task_id))
            return
        try:
            task = asynctrace.task_scope(task_id)
            task.__enter__()
            self._scopes.append(task)
            session = asynctrace.session_scope()
            session_id = session.__enter__()
            self._scopes.append(session)
            set_session_id(tracer._track(task_id, session_id))
        except Exception as exc:  # never into the host
            self.__exit__()
            _warn_once("activate", "perf_tracer: session not registered: %r", exc)
            set_session_id(None)

    def __exit__(self, *exc: object) -> None:
        while self._scopes:
            self._scopes.pop().__exit__(None, None, None)


def session_context() -> Callable[[F], F]:
    """Each call registers a session for the current task and makes it current.

    As in AReaL: with no task in the context the session is ``None``, and
    the session is not finalized when the call returns or raises (the
    orchestrator finalizes it with ``trace_session_event("mark_finalized", ...)``).
    Spans started inside carry ``rl.task_id`` and ``rl.session_id``.

    Example:
        >>> @session_context()
        ... async def collect(engine, request): ...
    """

    def decorator(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with _Activation():
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _Activation():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


_MAX_NEW_PHASES: Final = 32  # phases registered on first use, per process
_known_phases: set[str] = set()
_new_phases = 0  # registered here (each adds a ``<phase>_s`` field to every record)
_refused_phases = 0  # phase events ignored past that bound (SessionTracer.stats())


def _phase_ok(phase: str) -> bool:
    """Whether *phase* can be recorded: registered with asynctrace on first use (a phase
    AReaL users add by editing its enum), up to 32 of them; a name asynctrace refuses
    (``Generate``, ``total``, ``finalized``), or one past that bound (counted in
    ``SessionTracer.stats()["refused_phases"]``), is ignored, as AReaL ignores an event
    it has no rule for, and warned about once."""
    global _new_phases, _refused_phases
    if phase in _known_phases:
        return True
    with _lock:
        try:
            if phase not in asynctrace.registered_phases():
                if _new_phases >= _MAX_NEW_PHASES:
                    _refused_phases += 1
                    _warn_once(
                        "phase-bound",
                        "perf_tracer: session phase %r ignored: %d phases were registered "
                        "on first use already (the bound; each adds a field to every "
                        "record); register it with asynctrace.register_phase to record it",
                        phase,
                        _MAX_NEW_PHASES,
                    )
                    return False
                asynctrace.register_phase(phase)
                _new_phases += 1
        except asynctrace.ConfigurationError as exc:
            _warn_once("phase", "perf_tracer: session phase %r ignored: %s", phase, exc)
            return False
        _known_phases.add(phase)
    return True


def trace_session_event(
    method: str,
    session_id: int | None = None,
    task_id: int | None = None,
    **payload: Any,
) -> None:
    """AReaL's ``trace_session_event``: ``mark_finalized``, ``mark_<phase>_start``/``_end``,
    ``increment_counter``, for one session (*session_id*) or every pending session of a task.

    As in AReaL: unknown methods are ignored; ``mark_finalized`` takes
    ``status`` and ``reason`` (no status leaves the session pending); other
    payload keys are not recorded; counters count on the session(s) named.
    Nothing raises into the caller (a failure is logged once).

    Example:
        >>> trace_session_event("mark_finalized", session_id=3, status="accepted")
    """
    tracer = get_session_tracer()
    if tracer is None:
        return
    if session_id is not None:
        session_ids = [session_id]
    elif task_id is not None:
        session_ids = tracer.get_session_ids(task_id)
    else:
        return
    if method == "increment_counter":
        name = payload.get("name")
        if not name:
            return
        for target in session_ids:
            tracer.increment_counter(target, name, payload.get("value", 1))
        return
    if not isinstance(method, str) or not method.startswith("mark_"):
        return
    event = method[len("mark_") :]
    for target in session_ids:
        tracer.record_event(target, event, **payload)


class _PhaseScope:
    """``mark_<phase>_start`` on entry and ``mark_<phase>_end`` on exit, sync or async."""

    __slots__ = ("_end", "_phase", "_session_id", "_start")

    def __init__(
        self,
        session_id: int,
        phase: str,
        start_payload: dict[str, Any] | None,
        end_payload: dict[str, Any] | None,
    ) -> None:
        self._session_id = session_id
        self._phase = phase
        self._start = start_payload or {}
        self._end = end_payload or {}

    def __enter__(self) -> _PhaseScope:
        trace_session_event(
            f"mark_{self._phase}_start", session_id=self._session_id, **self._start
        )
        return self

    def __exit__(self, *exc: object) -> None:
        trace_session_event(f"mark_{self._phase}_end", session_id=self._session_id, **self._end)

    async def __aenter__(self) -> _PhaseScope:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


def trace_session_phase(
    phase: str,
    *,
    start_payload: dict[str, Any] | None = None,
    end_payload: dict[str, Any] | None = None,
) -> _PhaseScope | _NullContext:
    """Time one execution of *phase* for the current session (``with`` or ``async with``).

    Example:
        >>> with trace_session_phase("reward"):
        ...     pass
    """
    session_id = get_session_id()
    if session_id is None:
        return _NULL
    return _PhaseScope(session_id, phase, start_payload, end_payload)


def atrace_session_phase(
    phase: str,
    *,
    start_payload: dict[str, Any] | None = None,
    end_payload: dict[str, Any] | None = None,
) -> _PhaseScope | _NullContext:
    """:func:`trace_session_phase` for ``async with``.

    Example:
        >>> async def generate(engine, request):
        ...     async with atrace_session_phase("generate"):
        ...         return await engine.agenerate(request)
    """
    return trace_session_phase(phase, start_payload=start_payload, end_payload=end_payload)


def trace_session(phase: str) -> Callable[[F], F]:
    """Each call of the decorated function (sync or async) is one execution of *phase*.

    Example:
        >>> @trace_session("reward")
        ... async def compute_rewards(response): ...
    """

    def decorator(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with atrace_session_phase(phase):
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with trace_session_phase(phase):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator
