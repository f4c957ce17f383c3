"""The phase timers: one execution of a registered phase of the current session.

The hot path of a session: :meth:`trace_session_phase.__enter__` and
``__exit__`` inline the tracer's :meth:`~asynctrace._session_marks.SessionMarks.phase_start`
and :meth:`~asynctrace._session_marks.SessionMarks.phase_end`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TypeVar

from . import _session_tracer
from ._cm import DONE, Done, SyncAndAsync
from ._payloads import check_payload
from ._phases import _phases, check_phase
from ._scopes import SCOPES
from ._session_record import merge_payload
from ._session_tracer import SessionTracer

__all__ = ["atrace_session_phase", "trace_session_phase"]

P = TypeVar("P", bound="trace_session_phase")


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
