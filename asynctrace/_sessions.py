"""Per-sample session lifecycle: tasks own sessions, sessions run phases, then finalize.

A *task* is a dataset item; each *session* is one sample generated for it.
A session is registered (``submit_ts``), runs registered phases (each a list
of executions with start and end), and is finalized with a status. Finalized
sessions are handed to a background writer (:mod:`asynctrace._session_writer`)
that appends one JSON line per session to ``sessions-r{rank}.jsonl``.

The record of a live session is only ever changed through the tracer's live
map, under its lock. Finalizing removes it from that map, so nothing can touch
a record after it was finalized: a late phase end or event is dropped and
counted instead.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, cast

from ._cm import SyncAndAsync
from ._errors import ConfigurationError
from ._scopes import SCOPES, ScopeState, leave
from ._session_writer import SessionWriter

__all__ = [
    "SessionTracer",
    "atrace_session_phase",
    "current_session_id",
    "current_task_id",
    "increment_counter",
    "register_phase",
    "registered_phases",
    "session_context",
    "session_scope",
    "task_scope",
    "trace_session",
    "trace_session_event",
    "trace_session_phase",
]

F = TypeVar("F", bound=Callable[..., Any])

STATUSES: Final = ("accepted", "rejected", "failed", "dropped")
FINALIZED: Final = "finalized"

# phase name -> allow_multiple
_phases: dict[str, bool] = {"generate": True, "reward": True, "toolcall": True}
_phases_lock = threading.Lock()


def register_phase(name: str, *, allow_multiple: bool = True) -> None:
    """Declare a session phase; its time appears as ``<name>_s`` in the records.

    ``generate``, ``reward`` and ``toolcall`` are pre-registered. Registering
    the same definition again is a no-op; a different one raises.

    Args:
        name: lower-case identifier (``validation``, ``safety_filter``, ...).
        allow_multiple: whether a session may run the phase more than once;
            a second execution of a single-shot phase is dropped and counted.

    Example:
        >>> register_phase("validation", allow_multiple=False)
    """
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise ConfigurationError(
            f"register_phase(name): {name!r} is not accepted; accepted: a lower-case "
            "identifier such as 'validation'"
        )
    if name in (FINALIZED, "total", "submit"):
        raise ConfigurationError(f"register_phase(name): {name!r} is reserved")
    with _phases_lock:
        previous = _phases.get(name)
        if previous is not None and previous != allow_multiple:
            raise ConfigurationError(
                f"register_phase({name!r}): already registered with "
                f"allow_multiple={previous}, got allow_multiple={allow_multiple}"
            )
        _phases[name] = bool(allow_multiple)


def registered_phases() -> dict[str, bool]:
    """Registered phases and whether each may run more than once.

    Example:
        >>> registered_phases()["generate"]
        True
    """
    with _phases_lock:
        return dict(_phases)


def _check_phase(phase: object) -> str:
    if isinstance(phase, str) and phase in _phases:
        return phase
    raise ConfigurationError(
        f"session phase {phase!r} is not registered; accepted: {', '.join(sorted(_phases))} "
        "(declare new ones with register_phase())"
    )


def _check_payload(payload: object, where: str) -> dict[str, Any] | None:
    """A JSON-ready copy of a payload mapping with string keys (``None`` when empty), or raise."""
    if payload is None:
        return None
    if not isinstance(payload, Mapping) or not all(isinstance(k, str) for k in payload):
        raise ConfigurationError(
            f"{where}: expected a mapping with str keys (or None), got {payload!r}"
        )
    return _plain_payload(payload) or None


_PAYLOAD_DEPTH = 16


def _plain_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A copy made of JSON values only, taken when the payload is given.

    Copying now means a caller may change its objects afterwards without
    changing the record; converting now means the record reads the same
    whichever JSON encoder writes it: non-finite floats become ``"nan"``,
    ``"inf"``, ``"-inf"``; keys become strings; tuples and sets become lists;
    anything else (and anything nested deeper than 16 levels) its ``str()``.
    A value that cannot be read (its ``str()`` raises, say) is written as
    ``"<unreadable TYPE>"``: a payload never breaks the caller.
    """
    out: dict[str, Any] = {}
    for key, value in payload.items():
        try:
            out[key] = _plain(value, _PAYLOAD_DEPTH)
        except Exception:
            out[key] = f"<unreadable {type(value).__name__}>"
    return out


def _plain(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    if depth <= 0:
        return str(value)
    if isinstance(value, Mapping):
        return {(k if type(k) is str else str(k)): _plain(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, depth - 1) for v in value]
    if isinstance(value, (int, float)):  # int and float subclasses (enums, numpy scalars)
        return _plain(int(value) if isinstance(value, int) else float(value), depth)
    return str(value)


def _merge_payload(record: _Record, key: int, payload: dict[str, Any]) -> None:
    """Add *payload* to the record's payload *key* (-1: the session; else an execution)."""
    payloads = record.payloads
    if payloads is None:
        record.payloads = {key: dict(payload)}
    elif key in payloads:
        payloads[key].update(payload)
    else:
        payloads[key] = dict(payload)


def _ids(pending: str | set[str] | None) -> list[str]:
    """The session ids of a task entry."""
    if pending is None:
        return []
    return [pending] if isinstance(pending, str) else list(pending)


_session_numbers = itertools.count(1).__next__
_PROCESS_NONCE = os.urandom(2).hex()


class _Record:
    """One live session.

    ``runs`` is flat, three slots per execution: ``phase, start_ns, end_ns``
    (``end_ns`` is ``None`` while the execution is open). One list per session
    instead of a dict of lists of lists keeps sessions cheap to make and to
    collect. ``payloads`` holds what callers attached, made on first use:
    key ``-1`` for the session, an execution's handle (its index in ``runs``)
    for that execution.
    """

    __slots__ = (
        "counters",
        "finalized_ns",
        "payloads",
        "reason",
        "runs",
        "session_id",
        "status",
        "submit_ns",
        "task_id",
    )

    status: str
    reason: str | None
    finalized_ns: int

    def __init__(self, session_id: str, task_id: int | str | None, submit_ns: int) -> None:
        self.session_id = session_id
        self.task_id = task_id
        self.submit_ns = submit_ns
        self.runs: list[Any] = []
        self.counters: dict[str, float] | None = None  # made on first use
        self.payloads: dict[int, dict[str, Any]] | None = None  # made on first use
        # status, reason and finalized_ns are set once, by finalization (see
        # SessionWriter.add), after which nothing else touches the record.


class SessionTracer:
    """The process's session tracer: live sessions, task map, counters, writer.

    Created by :func:`asynctrace.configure` when ``session_tracer.enabled``;
    the module-level helpers are no-ops while none is running.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rank: int = 0,
        role: str | None = None,
        run_id: str = "",
        flush_threshold: int = 100,
    ) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, _Record] = {}
        # task -> its pending sessions: one id (the common case, no set to make
        # and collect), or a set once a task has several.
        self._tasks: dict[int | str, str | set[str]] = {}
        # The counter is process-wide (a reconfigured tracer never reuses an id)
        # and the process tag carries random bits (two hosts may share a pid).
        self._next = _session_numbers
        self._prefix = f"{rank}-{os.getpid():x}{_PROCESS_NONCE}-"
        self.dropped_events = 0
        self._writer = SessionWriter(
            path, rank=rank, role=role, run_id=run_id, flush_threshold=flush_threshold
        )

    # -- registration and phases ------------------------------------------------

    def register(self, task_id: int | str | None) -> str:
        """Register a new pending session under *task_id*; returns its id."""
        session_id = self._prefix + str(self._next())
        record = _Record(session_id, task_id, time.time_ns())
        with self._lock:
            self._live[session_id] = record
            if task_id is not None:
                pending = self._tasks.get(task_id)
                if pending is None:
                    self._tasks[task_id] = session_id
                elif isinstance(pending, str):
                    self._tasks[task_id] = {pending, session_id}
                else:
                    pending.add(session_id)
        return session_id

    def phase_start(
        self, session_id: str, phase: str, payload: dict[str, Any] | None = None
    ) -> int:
        """Open an execution of *phase*; returns its handle (-1: dropped and counted)."""
        now = time.time_ns()
        with self._lock:
            record = self._live.get(session_id)
            if record is not None:
                runs = record.runs
                if _phases[phase] or phase not in runs[::3]:
                    runs += (phase, now, None)
                    handle = len(runs) - 3
                    if payload:
                        _merge_payload(record, handle, payload)
                    return handle
            self.dropped_events += 1
        return -1

    def phase_end(
        self, session_id: str, handle: int, payload: dict[str, Any] | None = None
    ) -> None:
        """Close an execution, unless its session was finalized meanwhile (then drop it)."""
        now = time.time_ns()
        with self._lock:
            record = self._live.get(session_id)
            if record is None or handle < 0:
                self.dropped_events += 1
                return
            record.runs[handle + 2] = now
            if payload:
                _merge_payload(record, handle, payload)

    def mark(
        self,
        session_id: str | None,
        phase: str,
        start: bool,
        payload: dict[str, Any] | None = None,
    ) -> None:
        """``<phase>_start`` / ``<phase>_end`` sent as events."""
        if session_id is None:  # no session to apply it to
            with self._lock:
                self.dropped_events += 1
            return
        if start:
            self.phase_start(session_id, phase, payload)
            return
        now = time.time_ns()
        with self._lock:
            record = self._live.get(session_id)
            runs = record.runs if record is not None else []
            for handle in range(len(runs) - 3, -1, -3):  # the latest open one
                if runs[handle] == phase and runs[handle + 2] is None:
                    runs[handle + 2] = now
                    if payload and record is not None:
                        _merge_payload(record, handle, payload)
                    return
            self.dropped_events += 1

    def mark_task(
        self,
        task_id: int | str,
        phase: str,
        start: bool,
        payload: dict[str, Any] | None = None,
    ) -> None:
        """A phase event for every pending session of *task_id*."""
        with self._lock:
            session_ids = _ids(self._tasks.get(task_id))
            if not session_ids:
                self.dropped_events += 1
                return
        for session_id in session_ids:
            self.mark(session_id, phase, start, payload)

    def count(self, session_id: str, name: str, value: float) -> None:
        """Add *value* to the session's counter *name*."""
        with self._lock:
            record = self._live.get(session_id)
            if record is None:
                self.dropped_events += 1
                return
            counters = record.counters
            if counters is None:
                counters = record.counters = {}
            counters[name] = counters.get(name, 0) + value

    # -- finalization -----------------------------------------------------------

    def finalize(
        self,
        session_id: str | None,
        task_id: int | str | None,
        status: str,
        reason: str | None,
        payload: dict[str, Any] | None = None,
    ) -> int:
        """Finalize one session, or every pending session of a task; returns how many."""
        now = time.time_ns()
        if session_id is not None:  # the common case: one session, no list
            with self._lock:
                record = self._take(session_id)
                if record is None:
                    self.dropped_events += 1
                    return 0
                if payload:
                    _merge_payload(record, -1, payload)
            self._writer.add_one(record, status, reason, now)
            return 1
        with self._lock:
            if task_id is not None:
                finished = [
                    record
                    for sid in _ids(self._tasks.get(task_id))
                    if (record := self._take(sid)) is not None
                ]
            else:
                finished = []
            if not finished:
                self.dropped_events += 1
                return 0
            if payload:
                for record in finished:
                    _merge_payload(record, -1, payload)
        self._writer.add(finished, status, reason, now)
        return len(finished)

    def _take(self, session_id: str) -> _Record | None:
        """Remove a live session (and its task entry once empty); caller holds the lock."""
        record = self._live.pop(session_id, None)
        if record is not None and record.task_id is not None:
            pending = self._tasks.get(record.task_id)
            if isinstance(pending, str):
                if pending == session_id:
                    del self._tasks[record.task_id]
            elif pending is not None:
                pending.discard(session_id)
                if not pending:
                    del self._tasks[record.task_id]
        return record

    def finalize_all_pending(self, reason: str) -> int:
        """At shutdown: write every still-pending session as ``pending``."""
        now = time.time_ns()
        with self._lock:
            records = list(self._live.values())
            self._live.clear()
            self._tasks.clear()
        if records:
            self._writer.add(records, "pending", reason, now)
        return len(records)

    # -- lifecycle --------------------------------------------------------------

    @property
    def path(self) -> str:
        """The ``sessions-*.jsonl`` file."""
        return str(self._writer.path)

    def stats(self) -> dict[str, int]:
        """Counters: live sessions, live tasks, written records, dropped events."""
        with self._lock:
            live, tasks = len(self._live), len(self._tasks)
        return {
            "live_sessions": live,
            "live_tasks": tasks,
            "written": self._writer.written,
            "dropped_events": self.dropped_events,
        }

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Write every finalized session; ``False`` if that took longer than *timeout_s*."""
        return self._writer.flush(timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Write pending sessions as ``pending``, drain the writer and close the file."""
        self.finalize_all_pending("unfinished at shutdown")
        return self._writer.shutdown(timeout_s)


_tracer: SessionTracer | None = None


def install(tracer: SessionTracer | None) -> SessionTracer | None:
    """Make *tracer* the process's session tracer; returns the previous one."""
    global _tracer
    previous, _tracer = _tracer, tracer
    return previous


def current_tracer() -> SessionTracer | None:
    """The running session tracer, if any."""
    return _tracer


# ---------------------------------------------------------------------------
# Scopes.


def _check_task_id(task_id: object) -> int | str:
    if isinstance(task_id, bool) or not isinstance(task_id, (int, str)):
        raise ConfigurationError(f"task_scope(task_id): expected an int or str, got {task_id!r}")
    return task_id


class task_scope(SyncAndAsync["int | str"]):
    """Run a block as dataset item *task_id*; sessions opened inside belong to it.

    Stamps ``rl.task_id`` on every span started inside. ``with`` and
    ``async with``.

    Example:
        >>> with task_scope(23):
        ...     assert current_task_id() == 23
    """

    __slots__ = ("_state", "_task_id", "_token")

    def __init__(self, task_id: int | str) -> None:
        cls = type(task_id)
        self._task_id = task_id if cls is int or cls is str else _check_task_id(task_id)
        self._token: Any = None
        self._state: Any = None

    def __enter__(self) -> int | str:
        state = SCOPES.get()  # ScopeState.replace, inline: this runs once per sample
        self._state = state = ScopeState(
            state.bucket, state.per_prompt, state.iteration, self._task_id, state.session_id
        )
        self._token = SCOPES.set(state)
        return self._task_id

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            leave("task_id", token, self._state)


class session_scope(SyncAndAsync[str]):
    """Register a new session under the current task and make it current.

    Stamps ``rl.session_id`` (and ``rl.task_id``) on every span started
    inside, so spans and session records can be joined. An exception escaping
    the block finalizes the session as ``failed``; otherwise the session stays
    pending until :func:`trace_session_event` finalizes it (by session or by
    task). With the session tracer off, a session id is still made, so spans
    are stamped the same way.

    Example:
        >>> with task_scope(1), session_scope() as session_id:
        ...     assert current_session_id() == session_id
    """

    __slots__ = ("_session_id", "_state", "_token")

    def __init__(self) -> None:
        self._session_id: str | None = None
        self._token: Any = None
        self._state: Any = None

    def __enter__(self) -> str:
        tracer = _tracer
        state = SCOPES.get()  # read once; ScopeState.replace below, inline (once per sample)
        session_id = tracer.register(state.task_id) if tracer is not None else _untracked_id()
        self._session_id = session_id
        self._state = state = ScopeState(
            state.bucket, state.per_prompt, state.iteration, state.task_id, session_id
        )
        self._token = SCOPES.set(state)
        return session_id

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            leave("session_id", token, self._state)
        tracer = _tracer
        if exc_type is not None and tracer is not None and self._session_id is not None:
            status = "failed" if issubclass(exc_type, Exception) else "dropped"
            tracer.finalize(self._session_id, None, status, f"{exc_type.__name__}: {exc}")


_untracked = itertools.count(1).__next__


def _untracked_id() -> str:
    return f"u{os.getpid():x}-{_untracked()}"


def session_context() -> Callable[[F], F]:
    """Decorator: each call of the function runs in a new :class:`session_scope`.

    Works on plain and coroutine functions.

    Example:
        >>> @session_context()
        ... async def collect_sample(engine, request): ...
    """

    def decorator(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with session_scope():
                    return await fn(*args, **kwargs)

            return cast("F", async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with session_scope():
                return fn(*args, **kwargs)

        return cast("F", wrapper)

    return decorator


def current_task_id() -> int | str | None:
    """The task set by the innermost :class:`task_scope`, if any.

    Example:
        >>> current_task_id() is None
        True
    """
    return SCOPES.get().task_id


def current_session_id() -> str | None:
    """The session set by the innermost :class:`session_scope`, if any.

    Example:
        >>> current_session_id() is None
        True
    """
    return SCOPES.get().session_id


# ---------------------------------------------------------------------------
# Phases, events, counters.


class trace_session_phase(SyncAndAsync[None]):
    """Time one execution of *phase* for the current session (``with``).

    *start_payload* and *end_payload* (mappings with string keys) are attached
    to this execution in the record, as its ``payload``; on a key in both, the
    end wins.

    Raises:
        ConfigurationError: *phase* is not registered, or a payload is not a
            mapping with string keys (checked even when the session tracer is
            off).

    Example:
        >>> with trace_session_phase("reward", end_payload={"accepted": True}):
        ...     pass
    """

    __slots__ = ("_end", "_handle", "_phase", "_session_id", "_start", "_tracer")

    def __init__(
        self,
        phase: str,
        start_payload: Mapping[str, Any] | None = None,
        end_payload: Mapping[str, Any] | None = None,
    ) -> None:
        self._phase = phase if type(phase) is str and phase in _phases else _check_phase(phase)
        self._tracer: SessionTracer | None = None
        self._session_id: str | None = None
        self._handle = -1
        # The checks cost a call each: only made when a payload is given.
        self._start = None
        self._end = None
        if start_payload is not None:
            self._start = _check_payload(start_payload, "trace_session_phase(start_payload)")
        if end_payload is not None:
            self._end = _check_payload(end_payload, "trace_session_phase(end_payload)")

    # phase_start/phase_end inlined: a session runs several phases, this is the hot path.
    def __enter__(self) -> None:
        tracer = _tracer
        session_id = SCOPES.get().session_id
        if tracer is None or session_id is None:
            return
        self._tracer = tracer
        self._session_id = session_id
        phase = self._phase
        now = time.time_ns()
        with tracer._lock:
            record = tracer._live.get(session_id)
            if record is not None:
                runs = record.runs
                if _phases[phase] or phase not in runs[::3]:
                    runs += (phase, now, None)
                    self._handle = len(runs) - 3
                    if self._start is not None:
                        _merge_payload(record, self._handle, self._start)
                    return
            tracer.dropped_events += 1

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        tracer, self._tracer = self._tracer, None
        if tracer is None:
            return
        now = time.time_ns()
        with tracer._lock:
            record = tracer._live.get(self._session_id)  # type: ignore[arg-type]
            if record is None or self._handle < 0:
                tracer.dropped_events += 1
            else:
                record.runs[self._handle + 2] = now
                if self._end is not None:
                    _merge_payload(record, self._handle, self._end)


class atrace_session_phase(trace_session_phase):
    """The ``async with`` form of :class:`trace_session_phase`.

    Example:
        >>> async def generate(engine, request):
        ...     async with atrace_session_phase("generate"):
        ...         return await engine.agenerate(request)
    """

    __slots__ = ()


def trace_session(phase: str) -> Callable[[F], F]:
    """Decorator: every call of the function is one execution of *phase*.

    Works on plain and coroutine functions; the phase is validated when
    decorating.

    Example:
        >>> @trace_session("reward")
        ... async def compute_reward(response): ...
    """
    _check_phase(phase)

    def decorator(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with trace_session_phase(phase):
                    return await fn(*args, **kwargs)

            return cast("F", async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with trace_session_phase(phase):
                return fn(*args, **kwargs)

        return cast("F", wrapper)

    return decorator


def trace_session_event(
    event: str,
    session_id: str | None = None,
    task_id: int | str | None = None,
    *,
    status: str | None = None,
    reason: object = None,
    **payload: Any,
) -> None:
    """Record a lifecycle event for a session, or for every pending session of a task.

    Events: ``finalized`` (``status`` one of accepted, rejected, failed,
    dropped; optional ``reason``), and ``<phase>_start`` / ``<phase>_end`` for
    every registered phase. Without *session_id* or *task_id* the current
    session (else the current task) is meant. Finalizing closes open phase
    executions at ``finalized_ts`` (flagged ``truncated``); events for a
    session that was already finalized are dropped and counted.

    Any other keyword is *payload*: on ``finalized`` it joins the record's
    ``payload``; on a phase event, the execution's ``payload``. It is copied
    now, as plain JSON values (NaN as ``"nan"``, other objects as their
    ``str()``).

    Raises:
        ConfigurationError: unknown event, bad status, or ``status``/``reason``
            on a phase event (checked even when the session tracer is off).

    Example:
        >>> trace_session_event("finalized", status="rejected", reason="stale_weight")
        >>> trace_session_event("finalized", status="accepted", reward=0.75)
    """
    if event == FINALIZED:
        if status not in STATUSES:
            raise ConfigurationError(
                f"trace_session_event('finalized', status=...): {status!r} is not accepted; "
                f"accepted: {', '.join(STATUSES)}"
            )
        text = reason if reason is None or isinstance(reason, str) else str(reason)
        tracer = _tracer
        if tracer is None:
            return
        if session_id is None and task_id is None:
            session_id = SCOPES.get().session_id
            if session_id is None:
                task_id = SCOPES.get().task_id
        tracer.finalize(
            session_id, task_id, status, text, _plain_payload(payload) if payload else None
        )
        return
    phase, _, edge = event.rpartition("_") if isinstance(event, str) else ("", "", "")
    if edge not in ("start", "end") or phase not in _phases:
        accepted = ", ".join([FINALIZED, *(f"{p}_start, {p}_end" for p in sorted(_phases))])
        raise ConfigurationError(
            f"trace_session_event(event): {event!r} is not accepted; accepted: {accepted}"
        )
    if status is not None or reason is not None:
        named = (("status", status), ("reason", reason))
        given = sorted(key for key, value in named if value is not None)
        raise ConfigurationError(
            f"trace_session_event({event!r}): {', '.join(given)} only apply to 'finalized'"
        )
    tracer = _tracer
    if tracer is None:
        return
    if session_id is None and task_id is not None:  # every pending session of the task
        tracer.mark_task(task_id, phase, edge == "start", _plain_payload(payload) or None)
        return
    plain = _plain_payload(payload) if payload else None
    tracer.mark(session_id or SCOPES.get().session_id, phase, edge == "start", plain)


def increment_counter(name: str, value: float = 1) -> None:
    """Add *value* to counter *name* of the current session (written in ``counters``).

    Example:
        >>> increment_counter("retries")
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(
            f"increment_counter(name): expected a non-empty str, got {name!r}"
        )
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise ConfigurationError(
            f"increment_counter(value): expected a finite int or float, got {value!r}"
        )
    tracer = _tracer
    session_id = SCOPES.get().session_id
    if tracer is not None and session_id is not None:
        tracer.count(session_id, name, value)
