"""Per-sample session lifecycle: tasks own sessions, sessions run phases, then finalize.

A *task* is a dataset item; each *session* is one sample generated for it.
A session is registered (``submit_ts``), runs registered phases (each a list
of executions with start and end), and is finalized with a status. This
module is the public API: the scopes, the phase timers and decorators, the
lifecycle events and counters. The tracer they report to lives in
:mod:`asynctrace._session_tracer`, the records in
:mod:`asynctrace._session_record`, the writer in
:mod:`asynctrace._session_writer`.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import numbers
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from . import _session_tracer
from ._cm import DONE, Done, SyncAndAsync
from ._decorator_checks import check_callable
from ._decorators import _classified
from ._errors import ConfigurationError
from ._exception_text import EXCEPTION_TEXT_CHARS, exception_reason
from ._payloads import _count_cut, check_payload, plain_payload
from ._phases import FINALIZED, STATUSES, _phases, check_phase, register_phase, registered_phases
from ._scopes import SCOPES, ScopeState, leave
from ._session_record import bounded_text, merge_payload
from ._session_tracer import SessionTracer
from ._wrappers import default_name

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
P = TypeVar("P", bound="trace_session_phase")

# ---------------------------------------------------------------------------
# Scopes.


_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _check_task_id(task_id: object, where: str = "task_scope(task_id)") -> int | str:
    """*task_id* as a plain str or a plain int that a 64-bit attribute holds, else a
    :class:`ConfigurationError` naming *where*.

    A str subclass (``numpy.str_``) becomes the plain str it holds (str's own
    ``__str__``, not an override): the record and the spans redact and bound
    the same plain value, and it hashes as a str does (the task map keys on
    it). numpy's integers and an ``IntEnum`` become the int they stand for.
    """
    if not isinstance(task_id, bool):
        if isinstance(task_id, str):
            return str.__str__(task_id)
        if isinstance(task_id, (int, numbers.Integral)):
            number = int(task_id)
            if _INT64_MIN <= number <= _INT64_MAX:
                return number
    raise ConfigurationError(
        f"{where}: expected an int or str (an int from -2**63 to 2**63 - 1), got {task_id!r}"
    )


class task_scope(SyncAndAsync["int | str"]):
    """Run a block as dataset item *task_id*; sessions opened inside belong to it.

    Stamps ``rl.task_id`` on every span started inside. ``with`` and
    ``async with``. Entered again while entered, it raises ``RuntimeError``.

    Example:
        >>> with task_scope(23):
        ...     assert current_task_id() == 23
    """

    __slots__ = ("_state", "_task_id", "_token")

    def __init__(self, task_id: int | str) -> None:
        cls = type(task_id)
        # A str, or an int within +-2**30 (one-digit ints: the cheapest compare), as is;
        # anything else (a larger int too) is checked against the 64-bit range.
        self._task_id = (
            task_id
            if (cls is int and -0x3FFFFFFF <= task_id <= 0x3FFFFFFF) or cls is str  # type: ignore[operator]
            else _check_task_id(task_id)
        )
        self._token: Any = None
        self._state: Any = None

    def __enter__(self) -> int | str:
        if self._token is not None:
            raise RuntimeError("task_scope is already entered")
        under = SCOPES.get()  # ScopeState.replace, inline: this runs once per sample
        self._state = state = ScopeState(
            under.bucket, under.per_prompt, under.iteration, self._task_id, under.session_id
        )
        state._under_task_id = under  # for leave, if scopes exit out of order
        self._token = SCOPES.set(state)
        return self._task_id

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Done:
        token, self._token = self._token, None
        if token is not None:
            leave("task_id", token, self._state)
        return DONE

    __aexit__ = __exit__  # type: ignore[assignment]  # DONE: awaited, it finishes at once


class session_scope(SyncAndAsync[str]):
    """Register a new session under the current task and make it current.

    Stamps ``rl.session_id`` (and ``rl.task_id``) on every span started
    inside, so spans and session records can be joined. An exception escaping
    the block finalizes the session as ``failed``; otherwise the session stays
    pending until :func:`trace_session_event` finalizes it (by session or by
    task). With the session tracer off, a session id is still made, so spans
    are stamped the same way. Entered again while entered, it raises
    ``RuntimeError`` (make one object per session).

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
        if self._token is not None:
            raise RuntimeError("session_scope is already entered")
        tracer = _session_tracer._tracer
        under = SCOPES.get()  # read once; ScopeState.replace below, inline (once per sample)
        session_id = tracer.register(under.task_id) if tracer is not None else _untracked_id()
        self._session_id = session_id
        self._state = state = ScopeState(
            under.bucket, under.per_prompt, under.iteration, under.task_id, session_id
        )
        state._under_session_id = under  # for leave, if scopes exit out of order
        self._token = SCOPES.set(state)
        return session_id

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Done:
        token, self._token = self._token, None
        if token is not None:
            leave("session_id", token, self._state)
        if exc_type is not None:
            tracer = _session_tracer._tracer
            if tracer is not None and self._session_id is not None:
                status = "failed" if issubclass(exc_type, Exception) else "dropped"
                tracer.finalize(self._session_id, None, status, _exception_text(exc_type, exc))
        return DONE

    __aexit__ = __exit__  # type: ignore[assignment]  # DONE: awaited, it finishes at once


def _is_coroutine(fn: Callable[..., Any], where: str, instead: str) -> bool:
    """Whether calls of *fn* are to be awaited, as the span decorators decide it (a
    callable object by its class's ``__call__``, a partial by what it wraps).

    A :class:`ConfigurationError` for what a wrapper cannot time: a class or a
    non-callable, and a (async) generator function, whose wrapper would cover
    the making of the generator, not its body.
    """
    check_callable(fn, where)
    kind = _classified(fn)
    if inspect.isgeneratorfunction(kind) or inspect.isasyncgenfunction(kind):
        raise ConfigurationError(
            f"{where}: {default_name(fn)!r} is a generator function; accepted: a function "
            f"or a coroutine function (for a generator, {instead})"
        )
    return inspect.iscoroutinefunction(kind)


_untracked = itertools.count(1).__next__
_untracked_prefix = f"u{os.getpid():x}{_session_tracer._process_nonce()}-"  # again in a child


def _untracked_id() -> str:
    return _untracked_prefix + str(_untracked())


def _new_untracked_prefix() -> None:
    global _untracked_prefix
    _untracked_prefix = f"u{os.getpid():x}{_session_tracer._process_nonce()}-"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_untracked_prefix)


def session_context() -> Callable[[F], F]:
    """Decorator: each call of the function runs in a new :class:`session_scope`.

    Works on plain and coroutine functions, on callable objects (as their
    class's ``__call__`` is: an ``async def __call__`` is awaited inside), and
    above ``@staticmethod`` or ``@classmethod`` (the function inside is
    wrapped, and the method kind kept).

    Raises:
        ConfigurationError: the function is a generator or async generator
            function (the wrapper would cover only the making of the generator),
            or a class, or not callable.

    Example:
        >>> @session_context()
        ... async def collect_sample(engine, request): ...
    """

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return cast("F", type(fn)(decorator(fn.__func__)))
        if _is_coroutine(fn, "session_context()", "open session_scope() inside its body"):

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

    One object times one execution at a time: it may be entered again once
    exited (each entry is a new execution), not while it is entered. A copy
    (``copy.copy``, ``copy.deepcopy``, or pickled and loaded) is a new object
    for the same phase and payloads, not entered whatever the original is.

    Entered outside any session while the session tracer runs (a thread the
    session's context did not reach), it records nothing and counts one
    dropped event.

    Raises:
        ConfigurationError: *phase* is not registered, or a payload is not a
            mapping with string keys (checked even when the session tracer is
            off).
        RuntimeError: the object is entered while an entry of it is open
            (nested on itself, or shared by concurrent tasks or threads), tracer
            on or off: that entry would take over the open one's execution.

    Example:
        >>> with trace_session_phase("reward", end_payload={"accepted": True}):
        ...     pass
    """

    __slots__ = ("_end", "_free", "_handle", "_phase", "_session_id", "_start", "_tracer")

    def __init__(
        self,
        phase: str,
        start_payload: Mapping[str, Any] | None = None,
        end_payload: Mapping[str, Any] | None = None,
    ) -> None:
        self._phase = phase if type(phase) is str and phase in _phases else check_phase(phase)
        self._tracer: SessionTracer | None = None
        self._session_id: str | None = None
        self._handle = -1
        # One token while no entry is open (tracer or not: the same rule everywhere). An
        # entry takes it with list.pop, one call that two threads cannot both make good:
        # a flag tested, then set, could let both in.
        self._free = [True]
        # The checks cost a call each: only made when a payload is given.
        self._start = None
        self._end = None
        if start_payload is not None:
            self._start = check_payload(start_payload, "trace_session_phase(start_payload)")
        if end_payload is not None:
            self._end = check_payload(end_payload, "trace_session_phase(end_payload)")

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickled or copied (copy and deepcopy go through here too), it is a new object:
        # never entered, with its own token.
        return (
            _fresh_phase,
            (type(self), self._phase, self._start, self._end),
            getattr(self, "__dict__", None) or None,
        )

    # phase_start/phase_end inlined: a session runs several phases, this is the hot path.
    def __enter__(self) -> None:
        try:
            self._free.pop()
        except IndexError:
            raise RuntimeError(
                f"trace_session_phase({self._phase!r}) is already entered; "
                "make one object per execution"
            ) from None
        tracer = _session_tracer._tracer
        if tracer is None:
            return
        session_id = SCOPES.get().session_id
        if session_id is None:  # no session to time it for (a thread the context missed)
            with tracer._lock:
                tracer.dropped_events += 1
            return
        self._tracer = tracer
        self._session_id = session_id
        self._handle = -1  # this entry's, once its start is recorded
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
                        merge_payload(record, self._handle, self._start)
                    return
            tracer.dropped_events += 1

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Done:
        # This entry's state is read before the token is put back: from then on,
        # another thread's entry may set it.
        tracer, self._tracer = self._tracer, None
        session_id, handle = self._session_id, self._handle
        free = self._free
        if not free:  # an exit with no entry open gives back no second token
            free.append(True)
        if tracer is None:
            return DONE
        now = time.time_ns()
        with tracer._lock:
            record = tracer._live.get(session_id)  # type: ignore[arg-type]
            if record is None or handle < 0:
                tracer.dropped_events += 1
            else:
                record.runs[handle + 2] = now
                if self._end is not None:
                    merge_payload(record, handle, self._end)
        return DONE

    __aexit__ = __exit__  # type: ignore[assignment]  # DONE: awaited, it finishes at once

    def __aenter__(self) -> Done:  # type: ignore[override]
        self.__enter__()  # None, which awaiting DONE gives, with no coroutine to make
        return DONE


def _fresh_phase(
    cls: type[P], phase: str, start: dict[str, Any] | None, end: dict[str, Any] | None
) -> P:
    """An object of *cls* for *phase*, not entered, its payloads taken as checked already
    (copies and pickles: see :meth:`trace_session_phase.__reduce__`)."""
    new = object.__new__(cls)
    new._phase = phase
    new._tracer = None
    new._session_id = None
    new._handle = -1
    new._free = [True]
    new._start = start
    new._end = end
    return new


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

    Works on plain and coroutine functions, on callable objects (as their
    class's ``__call__`` is), and above ``@staticmethod`` or ``@classmethod``
    (the function inside is wrapped, and the method kind kept); the phase is
    validated when decorating.

    Raises:
        ConfigurationError: *phase* is not registered, or the function is a
            generator or async generator function (the wrapper would time only
            the making of the generator), or a class, or not callable.

    Example:
        >>> @trace_session("reward")
        ... async def compute_reward(response): ...
    """
    check_phase(phase)

    def decorator(fn: F) -> F:
        if isinstance(fn, (staticmethod, classmethod)):  # the function inside, wrapped again
            return cast("F", type(fn)(decorator(fn.__func__)))
        if _is_coroutine(
            fn, f"trace_session({phase!r})", "open trace_session_phase() inside its body"
        ):

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


def _reason_text(reason: object) -> str | None:
    """A ``finalized`` reason as recorded: redacted like exception text (it often quotes
    one), and bounded as a payload's string is (see :func:`bounded_text`)."""
    if reason is None:
        return None
    if isinstance(reason, BaseException):
        return _exception_text(type(reason), reason)
    try:
        text = reason if isinstance(reason, str) else str(reason)
    except Exception:
        return f"<unprintable {type(reason).__name__}>"
    return bounded_text(text)


def _exception_text(exc_type: type[BaseException], exc: BaseException | None) -> str:
    """``"ValueError: <message>"``, redacted and bounded as on a span (a huge message
    costs the caller bounded time), a cut counted as a payload's is."""
    text = exception_reason(exc_type, exc)
    if len(text) > EXCEPTION_TEXT_CHARS:
        _count_cut()
    return text


def _check_session_id(session_id: object) -> None:
    if not isinstance(session_id, str):
        raise ConfigurationError(
            f"trace_session_event(session_id): expected a str (a session id), got {session_id!r}"
        )


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
    dropped; optional ``reason``, a string or an exception, recorded redacted
    as exception text is: no URL userinfo, secret query value or credential),
    and ``<phase>_start`` / ``<phase>_end`` for every registered phase.
    Without *session_id* or *task_id* the current session (else the current
    task) is meant. Finalizing closes open phase executions at
    ``finalized_ts`` (flagged ``truncated``); events for a session that was
    already finalized are dropped and counted.

    Any other keyword is *payload*: on ``finalized`` it joins the record's
    ``payload``; on a phase event, the execution's ``payload``. It is copied
    now, as plain JSON values (NaN as ``"nan"``, other objects as their
    ``str()``).

    Raises:
        ConfigurationError: unknown event, bad status, ``status``/``reason``
            on a phase event, or a *session_id* that is not a str or a
            *task_id* that is not an int or str (checked even when the
            session tracer is off).

    Example:
        >>> trace_session_event("finalized", status="rejected", reason="stale_weight")
        >>> trace_session_event("finalized", status="accepted", reward=0.75)
    """
    if session_id is not None and type(session_id) is not str:
        _check_session_id(session_id)
    if task_id is not None and type(task_id) is not int and type(task_id) is not str:
        task_id = _check_task_id(task_id, "trace_session_event(task_id)")
    if event == FINALIZED:
        if status not in STATUSES:
            raise ConfigurationError(
                f"trace_session_event('finalized', status=...): {status!r} is not accepted; "
                f"accepted: {', '.join(STATUSES)}"
            )
        tracer = _session_tracer._tracer
        if tracer is None:
            return
        text = None if reason is None else _reason_text(reason)
        if session_id is None and task_id is None:
            session_id = SCOPES.get().session_id
            if session_id is None:
                task_id = SCOPES.get().task_id
        tracer.finalize(
            session_id, task_id, status, text, plain_payload(payload) if payload else None
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
    tracer = _session_tracer._tracer
    if tracer is None:
        return
    if session_id is None and task_id is not None:  # every pending session of the task
        tracer.mark_task(task_id, phase, edge == "start", plain_payload(payload) or None)
        return
    plain = plain_payload(payload) if payload else None
    tracer.mark(session_id or SCOPES.get().session_id, phase, edge == "start", plain)


_MAX_COUNT = sys.float_info.max  # an increment a float can hold: sums never raise


def _counter_increment(value: object) -> float:
    """*value* as an int or float increment, or a :class:`ConfigurationError`.

    Any real number but a bool is accepted (numpy's integers and floats, a
    ``Fraction``), as a plain int or float, if it is finite and within a
    float's range.
    """
    number: float | None = None
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        try:
            number = int(value) if isinstance(value, numbers.Integral) else float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
    if number is None or not -_MAX_COUNT <= number <= _MAX_COUNT:  # NaN is not either
        raise ConfigurationError(
            f"increment_counter(value): expected a finite int or float, got {value!r}"
        )
    return number


def increment_counter(name: str, value: float = 1) -> None:
    """Add *value* to counter *name* of the current session (written in ``counters``).

    Example:
        >>> increment_counter("retries")
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(
            f"increment_counter(name): expected a non-empty str, got {name!r}"
        )
    kind = type(value)
    if (kind is not int and kind is not float) or not -_MAX_COUNT <= value <= _MAX_COUNT:
        value = _counter_increment(value)
    tracer = _session_tracer._tracer
    session_id = SCOPES.get().session_id
    if tracer is not None and session_id is not None:
        tracer.count(session_id, name, value)
