"""The session tracer: the process's one tracer of live sessions, and its lifecycle.

:class:`SessionTracer` is made of one part per concern: the pending-session
bookkeeping (:mod:`asynctrace._session_pending`), registration within bounds
(:mod:`asynctrace._session_bounds`), the phase marks and counters
(:mod:`asynctrace._session_marks`), and the hand-off of finalized records to
the writer (:mod:`asynctrace._session_handoff`, which explains the reentrant
lock). This module makes it, resets it in a forked child, and holds the
running one.
"""

from __future__ import annotations

import os
import threading

from ._errors import ConfigurationError
from ._forksafe import call_in_child, reinit_at_fork
from ._payloads import truncated_payloads
from ._session_bounds import DEFAULT_MAX_PENDING, EVICTED, SessionBounds
from ._session_ids import next_session_number, process_nonce
from ._session_marks import SessionMarks
from ._session_writer import SessionWriter

__all__ = ["DEFAULT_MAX_PENDING", "EVICTED", "SessionTracer", "current_tracer", "install"]

_STYLES = ("asynctrace", "areal")  # record styles (see SessionTracer.set_record_style)


class SessionTracer(SessionMarks, SessionBounds):
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
        self._lock = threading.RLock()  # reentrant: see asynctrace._session_handoff
        # Whether this thread holds the lock already: a finalizer run by the GC inside it.
        self._owned = self._lock._is_owned  # type: ignore[attr-defined]
        # Finalized by such a re-entered call, handed to the writer once outside it.
        self._later = []
        self._truncated_base = truncated_payloads()  # payloads cut before this tracer
        self._live = {}
        # task -> its pending sessions: one id (the common case, no set to make
        # and collect), or a set once a task has several.
        self._tasks = {}
        # The counter is process-wide (a reconfigured tracer never reuses an id)
        # and the process tag carries random bits (two hosts may share a pid).
        self._next = next_session_number
        self._prefix = "" if sequential_ids else f"{rank}-{os.getpid():x}{process_nonce()}-"
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
        self._prefix = f"{self._prefix.split('-', 1)[0]}-{os.getpid():x}{process_nonce()}-"

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


_tracer: SessionTracer | None = None


def install(tracer: SessionTracer | None) -> SessionTracer | None:
    """Make *tracer* the process's session tracer; returns the previous one."""
    global _tracer
    previous, _tracer = _tracer, tracer
    return previous


def current_tracer() -> SessionTracer | None:
    """The running session tracer, if any."""
    return _tracer
