"""Coalesced waits: one efficiency span over the starved iterations of a poll loop."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Final

from opentelemetry.trace import Span

from ._cm import SyncAndAsync
from ._efficiency import gate_open as _gate_open  # (under the names the wait paths read)
from ._efficiency import start_wait as _start_wait
from ._efficiency_table import lookup as _lookup
from ._errors import report_internal_error
from ._semconv import RL_IDLE_POLLS
from ._span_context import finish
from ._span_rules import Attributes

__all__ = ["PollWait", "start_efficiency_span"]


def _zero() -> int:
    return 0


def _reraise(exc: BaseException) -> int:
    raise exc


def _raising(exc: BaseException) -> Iterator[int]:
    """A counter that raises *exc* at its first poll, then is exhausted (the chain goes on)."""
    return map(_reraise, (exc,))


_POLL_LIMIT: Final = 2**62  # polls one wait can count: a C long on every 64-bit platform


class PollWait(SyncAndAsync["PollWait"]):
    """One coalesced efficiency span over the starved iterations of a poll loop.

    Call :meth:`poll` once per starved iteration: the first call opens the span
    (its start time is that poll), later calls only count. :meth:`end` closes
    it with ``rl.idle.polls``; a wait that was never polled emits nothing. The
    span is never made current, so tasks created during the wait are not its
    children. Also a context manager. After :meth:`end` the object can be
    polled again for the next wait. ``poll`` is one callable for the object's
    whole life, so it may be saved in a local (``poll = wait.poll``) before or
    after the first call. A ``KeyboardInterrupt`` raised while the first poll
    opens the span propagates from that poll only; the next poll opens the
    wait. Not thread-safe: one owner per wait. Polled from two threads, it
    raises into neither: overlapping first polls share the wait (rarely, each
    opens a span, and one is never ended nor exported).

    Example:
        >>> wait = start_efficiency_span("idle/buffer_starvation")
        >>> for _ in range(3):
        ...     _ = wait.poll()
        >>> wait.end()
    """

    poll: Callable[[], int]
    """Count one starved iteration; returns the number of polls so far."""

    def __init__(
        self, category: str, attributes: Attributes | None = None, *, _enabled: bool = True
    ) -> None:
        self.category = category
        self._attributes = attributes
        self._span: Span | None = None
        self._polls: Iterator[int] | None = None  # the current wait's counter
        self._enabled = _enabled
        self.poll = self._new_poll() if _enabled else _zero

    def _new_poll(self) -> Callable[[], int]:
        # Polls are C-level: a chain over one counter per wait, whose iterable
        # of counters calls _open_wait when asked for the next counter -- at the
        # first poll of each wait. end() exhausts the counter, so the next poll
        # (through any saved reference) starts the next wait. No Python frame
        # runs on the other polls. The iterable is a plain call, not a
        # generator: two threads may be in it at once, and nothing is raised
        # through it (the chain would drop it and every later poll would stop).
        return itertools.chain.from_iterable(iter(self._open_wait, None)).__next__

    def _open_wait(self) -> Iterator[int]:
        """The next wait's counter, its span started (the first poll of a wait)."""
        polls = self._polls
        if polls is not None:  # another thread's first poll opened this wait: share it
            return polls
        self._polls = polls = iter(range(1, _POLL_LIMIT))  # claimed before the span starts
        try:
            self._span = _start_wait(self.category, self._attributes)
        except Exception as exc:  # pragma: no cover - _start_wait already contains errors
            report_internal_error(("poll",), exc)
        except BaseException as exc:  # Ctrl-C, SystemExit: raised by this poll alone
            self._polls = None  # no wait opened: the next poll opens it
            return _raising(exc)
        return polls

    @property
    def polls(self) -> int:
        """Polls counted in the current wait (0 before the first poll)."""
        polls = self._polls
        if polls is None:
            return 0
        return _POLL_LIMIT - 1 - operator.length_hint(polls)

    def end(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """Close the wait span (if any poll happened) with ``rl.idle.polls``."""
        counter = self._polls
        if counter is None:  # not polled since the last end()
            return
        self._polls = None
        polls = _POLL_LIMIT - 1 - operator.length_hint(counter)
        # Exhausted: the next poll, through any reference, asks for the next wait.
        counter.__setstate__(_POLL_LIMIT)  # type: ignore[attr-defined]
        span, self._span = self._span, None
        if span is None:
            return
        try:
            span.set_attribute(RL_IDLE_POLLS, polls)
        except Exception as err:
            report_internal_error(("poll_end",), err)
        finish(span, exc_type, exc)

    def __enter__(self) -> PollWait:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end(exc_type, exc)


_NOOP_WAIT: Final = PollWait("idle/disabled", _enabled=False)


def start_efficiency_span(category: str, *, attributes: Attributes | None = None) -> PollWait:
    """Start a coalesced wait for a poll loop; see :class:`PollWait`.

    Gated (on ``efficiency``, or ``per_prompt`` inside a per-prompt scope) at
    this call; a disabled wait is a shared object whose ``poll`` does nothing.

    Example:
        >>> wait = start_efficiency_span("idle/buffer_starvation")
        >>> while not wait.poll() >= 0:  # doctest: +SKIP
        ...     pass
        >>> wait.end()
    """
    if not _gate_open():
        return _NOOP_WAIT
    try:
        _lookup(category)
    except Exception as exc:  # never raise on the span path
        report_internal_error(("start_efficiency_span",), exc)
        return _NOOP_WAIT
    return PollWait(category, attributes)
