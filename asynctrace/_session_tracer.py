"""The session tracer: live sessions, the task map, counters, and the hand-off to the writer.

The record of a live session is only ever changed through the tracer's live
map, under its lock. Finalizing removes it from that map and hands it to the
writer under the same lock, so a record is always in exactly one place (live,
or queued for writing) and nothing can touch it after it was finalized: a
late phase end or event is dropped and counted instead.

The lock is reentrant: the cyclic garbage collector may run a finalizer (a
``__del__`` that finalizes its sample's session, a weakref callback) at an
allocation while this thread holds it, and that finalizer may use the session
API. Such a re-entered call sees and changes the tracer as any call does, but
a session it finalizes is only taken out of the live map then: the code it
interrupted may still be changing that record, so the record (and its
finalize payload) is handed to the writer by the next registration,
finalization or flush on any thread, or at shutdown.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ._errors import ConfigurationError
from ._forksafe import call_in_child, reinit_at_fork
from ._payloads import truncated_payloads
from ._phases import _phases
from ._session_record import Record, merge_payload
from ._session_writer import SessionWriter

__all__ = ["DEFAULT_MAX_PENDING", "EVICTED", "SessionTracer", "current_tracer", "install"]

logger = logging.getLogger("asynctrace")

DEFAULT_MAX_PENDING = 100_000
"""Pending sessions a tracer keeps by default (``session_tracer.max_pending``)."""

EVICTED = "evicted"
"""The reason of a session written as ``pending`` to keep the pending ones within bounds."""

_STYLES = ("asynctrace", "areal")  # record styles (see SessionTracer.set_record_style)
_EVICT_SHARE = 100  # past the bound, the oldest 1/100 of it goes at once (see _evict)


def _ids(pending: str | set[str] | None) -> list[str]:
    """The session ids of a task entry."""
    if pending is None:
        return []
    return [pending] if isinstance(pending, str) else list(pending)


_session_numbers = itertools.count(1).__next__
# With the pid, what tells this process's session ids from another's: 64 random
# bits, since many processes of a run may share a rank and a pid (Ray actors
# left at rank 0, each its container's pid 1). A forked child draws its own: it
# inherits the parent's counter, and a pid freed by one child may be given to
# the next.
_NONCE_BYTES = 8
_nonce = (os.getpid(), os.urandom(_NONCE_BYTES).hex())


def _process_nonce() -> str:
    """This process's nonce, drawn again in a forked child (read when ids get a prefix)."""
    global _nonce
    if _nonce[0] != os.getpid():
        _nonce = (os.getpid(), os.urandom(_NONCE_BYTES).hex())
    return _nonce[1]


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
        sequential_ids: bool = False,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self._lock = threading.RLock()  # reentrant: see the module's docstring
        # Whether this thread holds the lock already: a finalizer run by the GC inside it.
        self._owned: Callable[[], bool] = self._lock._is_owned  # type: ignore[attr-defined]
        # Finalized by such a re-entered call, handed to the writer once outside it.
        self._later: list[tuple[Record, str, str | None, int, dict[str, Any] | None]] = []
        self._truncated_base = truncated_payloads()  # payloads cut before this tracer
        self._live: dict[str, Record] = {}
        # task -> its pending sessions: one id (the common case, no set to make
        # and collect), or a set once a task has several.
        self._tasks: dict[int | str, str | set[str]] = {}
        # The counter is process-wide (a reconfigured tracer never reuses an id)
        # and the process tag carries random bits (two hosts may share a pid).
        self._next = _session_numbers
        self._prefix = "" if sequential_ids else f"{rank}-{os.getpid():x}{_process_nonce()}-"
        self.dropped_events = 0
        self._max_pending = max(1, int(max_pending))
        self.evicted = 0  # sessions written as pending, reason EVICTED
        self._closed = False  # shut down: a session registered now is never written
        # What waits for the writer is bounded too: a write that never returns (a
        # hung mount) would otherwise keep every finished session (see the writer).
        self._writer = SessionWriter(
            path,
            rank=rank,
            role=role,
            run_id=run_id,
            flush_threshold=flush_threshold,
            max_queued=self._max_pending,
        )
        # Evicted records held for the writer at most: max_pending, and never less than
        # two flush thresholds (the writer wakes at one, and is given the lock while
        # it is behind). A thread that registers nothing but leaked sessions outruns
        # the writer; past this, what it evicts is refused, not kept.
        self._evict_room = max(self._max_pending, 2 * self._writer.threshold)
        reinit_at_fork(self._lock)
        call_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """A forked child does not own the parent's sessions: it starts with none.

        Its writer is inert there (the parent's file is the parent's): until
        the child configures its own tracer, sessions registered in it are not
        kept, and their events are dropped and counted (``dropped_events``).
        """
        self._live = {}
        self._tasks = {}
        self._later = []
        self._closed = True
        self._prefix = f"{self._prefix.split('-', 1)[0]}-{os.getpid():x}{_process_nonce()}-"

    # -- registration and phases ------------------------------------------------

    def register(self, task_id: int | str | None) -> str:
        """Register a new pending session under *task_id*; returns its id.

        After :meth:`finalize_all_pending` (shutdown), or in a forked child,
        the session is not kept: the registration is counted as a dropped
        event, and so is each of its later events.
        """
        kind = type(task_id)
        if kind is not int and kind is not str and isinstance(task_id, str):  # numpy.str_
            task_id = str.__str__(task_id)  # hashed and redacted as the plain str it holds
        session_id = self._prefix + str(self._next())
        record = Record(session_id, task_id, time.time_ns())
        if self._later and not self._owned():
            self._hand_over_later()
        with self._lock:
            if self._closed:  # a caller that found this tracer just before its shutdown
                self.dropped_events += 1
                return session_id
            self._live[session_id] = record
            if task_id is not None:
                tasks = self._tasks
                while True:
                    pending = tasks.get(task_id)
                    if pending is None:
                        tasks[task_id] = session_id
                    elif isinstance(pending, str):
                        both = {pending, session_id}  # may run a finalizer that changes tasks
                        if tasks.get(task_id) is not pending:
                            continue
                        tasks[task_id] = both
                    else:
                        pending.add(session_id)
                    break
            over = len(self._live) > self._max_pending  # sessions nobody finalizes: a leak
        if over:
            self._evict()
        return session_id

    def _evict(self) -> None:
        """Write the oldest pending sessions as ``pending``, reason :data:`EVICTED`.

        Called past ``max_pending`` live sessions. The oldest hundredth of
        the bound goes at once: a dict's first key is found by skipping the
        slots its removed keys left, so taking them one at a time would cost
        a scan per registration. A registration by a finalizer the garbage
        collector ran inside the tracer leaves it to the next one (the code
        it interrupted may be changing one of these records). Warned once.
        """
        if self._owned():
            return
        with self._lock:
            count = len(self._live) - self._max_pending
            if count <= 0:
                return
            count += self._max_pending // _EVICT_SHARE
            oldest = list(itertools.islice(self._live, count))
            records = [record for sid in oldest if (record := self._take(sid)) is not None]
            self._writer.add(records, "pending", EVICTED, time.time_ns(), self._evict_room)
            first = not self.evicted
            self.evicted += len(records)
        # Outside the lock: a writer starved by this thread catches up.
        self._writer.behind(self._evict_room)
        if first:
            logger.warning(
                "asynctrace: more than %d sessions are pending (session_tracer.max_pending); "
                "the oldest are written as pending with reason %r and counted in "
                "stats()['evicted'] (those evicted while %d records wait to be written are "
                "not kept, and are counted in stats()['failed']; further evictions are "
                "not logged): finalize every session, or raise session_tracer.max_pending",
                self._max_pending,
                EVICTED,
                self._evict_room,
            )

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
                        merge_payload(record, handle, payload)
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
                merge_payload(record, handle, payload)

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
                        merge_payload(record, handle, payload)
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
                fresh: dict[str, float] = {}  # may run a finalizer that counts too
                counters = record.counters
                if counters is None:
                    counters = record.counters = fresh
            total = counters.get(name, 0)
            try:
                counters[name] = total + value
            except OverflowError:  # an int sum past a float's range, then a float
                big = total if type(total) is int else value
                counters[name] = math.inf if big > 0 else -math.inf

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
        if self._owned():  # a finalizer the GC ran while this thread was inside the tracer
            return self._finalize_later(session_id, task_id, status, reason, payload, now)
        if session_id is not None:  # the common case: one session, no list
            with self._lock:
                if self._later:
                    self._hand_over_later()
                record = self._take(session_id)
                if record is None:
                    self.dropped_events += 1
                    return 0
                if payload:
                    merge_payload(record, -1, payload)
                # Handed over under the same lock: a shutdown on another thread sees
                # the record either live or queued, never neither, never both.
                behind = self._writer.add_one(record, status, reason, now)
            if behind:  # outside the lock: the hand-off may sleep
                self._writer.behind()
            return 1
        with self._lock:
            if self._later:
                self._hand_over_later()
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
                    merge_payload(record, -1, payload)
            refused = self._writer.add(finished, status, reason, now)
        if refused:  # outside the lock: the writer warns once
            self._writer.behind()
        return len(finished)

    def _finalize_later(
        self,
        session_id: str | None,
        task_id: int | str | None,
        status: str,
        reason: str | None,
        payload: dict[str, Any] | None,
        now: int,
    ) -> int:
        """:meth:`finalize` re-entered: take the sessions now, hand them over later.

        The interrupted code may hold one of these records and go on changing it
        (its payloads too): the writer must not have it before that code is done.
        """
        with self._lock:
            if session_id is not None:
                ids = [session_id]
            else:
                ids = _ids(self._tasks.get(task_id)) if task_id is not None else []
            taken = 0
            for sid in ids:
                record = self._take(sid)
                if record is not None:
                    self._later.append((record, status, reason, now, payload))
                    taken += 1
            if not taken:
                self.dropped_events += 1
            return taken

    def _hand_over_later(self) -> None:
        """Give the writer what re-entered finalizations took (the interrupted code is done)."""
        with self._lock:
            later, self._later = self._later, []
            for record, status, reason, now, payload in later:
                if payload:
                    merge_payload(record, -1, payload)
                self._writer.add([record], status, reason, now)

    def _take(self, session_id: str) -> Record | None:
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
        """At shutdown: write every still-pending session as ``pending``.

        Sessions registered after it are not kept (their events are dropped
        and counted): nothing would ever write them.
        """
        now = time.time_ns()
        outside = not self._owned()
        with self._lock:
            self._closed = True
            records = list(self._live.values())  # may run a finalizer that finalizes some
            self._live.clear()
            self._tasks.clear()
            if self._later and outside:
                self._hand_over_later()
            if records:  # at most max_pending: all are queued, for the shutdown to write
                self._writer.add(records, "pending", reason, now, bounded=False)
        return len(records)

    # -- lifecycle --------------------------------------------------------------

    def set_record_style(self, style: str) -> None:
        """Write this tracer's records, from the next one written, in *style*.

        ``"asynctrace"`` (the default) is the format of
        ``docs/sessions.md``. ``"areal"`` is the one ``asynctrace_contrib.areal``
        writes, closer to AReaL's own records: a numeric session id
        (``session_tracer.ids: sequential``) is a JSON integer, and a session
        written as ``pending`` (at shutdown, or evicted past ``max_pending``)
        has no ``finalized_ts`` and no ``total_s``, as it never ended; in any
        record, an execution still open when it is written has ``end_ts``
        ``null``, and ``<phase>_s`` counts only the executions that ended.

        Raises:
            ConfigurationError: *style* is neither ``"asynctrace"`` nor ``"areal"``.

        Example:
            >>> import tempfile
            >>> tracer = SessionTracer(f"{tempfile.mkdtemp()}/sessions-r0.jsonl")
            >>> tracer.set_record_style("areal")
            >>> tracer.shutdown()
            True
        """
        if style not in _STYLES:
            raise ConfigurationError(
                f"set_record_style(style): {style!r} is not accepted; "
                f"accepted: {', '.join(_STYLES)}"
            )
        self._writer.set_style(style)

    def is_pending(self, session_id: str) -> bool:
        """Whether *session_id* is registered here and not finalized, written or evicted yet.

        Example:
            >>> import tempfile
            >>> tracer = SessionTracer(f"{tempfile.mkdtemp()}/sessions-r0.jsonl")
            >>> tracer.is_pending(tracer.register(7))
            True
            >>> tracer.shutdown()
            True
        """
        return session_id in self._live  # one dict lookup: atomic, no lock needed

    @property
    def path(self) -> str:
        """The ``sessions-*.jsonl`` file."""
        return str(self._writer.path)

    def stats(self) -> dict[str, int]:
        """Counters: live sessions, live tasks, records written and lost, dropped events.

        ``failed`` counts records that could not be written (a full disk, an
        unencodable value, a writer that did not finish within the shutdown
        timeout) or were not kept for a writer that fell behind: a session
        finished while the writer held the largest of ``max_pending``, 100,000
        and twice ``flush_threshold`` records, or one evicted while it held
        the larger of ``max_pending`` and twice ``flush_threshold``;
        ``evicted`` sessions written as ``pending`` past ``max_pending``
        pending ones; ``lost`` those written to a file that was then
        deleted or replaced (found at the next write, which reopens the file).
        ``truncated_payloads`` counts payloads cut to their bounds since this
        tracer started (see :func:`asynctrace._payloads.plain_payload`).
        """
        with self._lock:  # finalized from inside the lock, not yet handed over: still live
            live, tasks = len(self._live) + len(self._later), len(self._tasks)
        writer = self._writer
        return {
            "live_sessions": live,
            "live_tasks": tasks,
            "written": writer.written,
            "failed": writer.failed,
            "lost": writer.lost,
            "evicted": self.evicted,
            "dropped_events": self.dropped_events,
            "truncated_payloads": truncated_payloads() - self._truncated_base,
        }

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Write every finalized session; ``False`` if that took longer than *timeout_s*."""
        if self._later and not self._owned():
            self._hand_over_later()
        return self._writer.flush(timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Write pending sessions as ``pending``, drain the writer and close the file.

        Waits at most *timeout_s* in all; what the writer has not written by
        then is counted in ``failed`` and logged (see :meth:`SessionWriter.shutdown`).
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        self.finalize_all_pending("unfinished at shutdown")
        if self._later:  # shut down from inside the lock: written now, or never
            self._hand_over_later()
        return self._writer.shutdown(max(0.0, deadline - time.monotonic()))


_tracer: SessionTracer | None = None


def install(tracer: SessionTracer | None) -> SessionTracer | None:
    """Make *tracer* the process's session tracer; returns the previous one."""
    global _tracer
    previous, _tracer = _tracer, tracer
    return previous


def current_tracer() -> SessionTracer | None:
    """The running session tracer, if any."""
    return _tracer
