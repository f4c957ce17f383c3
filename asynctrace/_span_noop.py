"""The shared disabled span, and entries refused because their object was already entered.

Every helper yields :data:`AMBIENT_SPAN` when its group is off (through
:data:`NOOP_CM`, whose enter and exit are C-level callables) or when its span
object is entered a second time: spans are entered once. A refused entry is
noted in the context it was made in (:func:`mark_refused`), so that its exit,
and not the first entry's, is the one that ends nothing.
"""

from __future__ import annotations

import itertools
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, Span, SpanContext

__all__ = ["AMBIENT_SPAN", "NOOP_CM", "NoopSpanCM", "Reentered", "mark_refused", "take_refused"]


class _AmbientSpan(NonRecordingSpan):
    """The one span object every disabled helper yields.

    It records nothing, never raises, and reports the *current* span context
    as its own, so code that reads ``span.get_span_context()`` (to build a
    carrier, say) still sees the parent it runs under.
    """

    def __init__(self) -> None:
        super().__init__(INVALID_SPAN_CONTEXT)

    def get_span_context(self) -> SpanContext:
        current = trace.get_current_span()
        if current is self:
            return INVALID_SPAN_CONTEXT
        return current.get_span_context()

    def __repr__(self) -> str:
        return "<asynctrace disabled span>"


AMBIENT_SPAN: Final[Span] = _AmbientSpan()


class NoopSpanCM:
    """Shared context manager returned by every disabled span helper.

    ``__enter__`` and ``__exit__`` are C-level callables (no Python frame):
    ``__enter__`` returns the shared span, ``__exit__`` returns ``""``, which is
    falsy, so exceptions propagate unchanged.
    """

    __slots__ = ()

    if TYPE_CHECKING:  # what type checkers see: an ordinary context manager

        def __enter__(self) -> Span: ...

        def __exit__(
            self,
            exc_type: type[BaseException] | None,
            exc: BaseException | None,
            tb: TracebackType | None,
        ) -> None: ...

    else:
        __enter__ = staticmethod(itertools.repeat(AMBIENT_SPAN).__next__)
        __exit__ = staticmethod("".format)

    async def __aenter__(self) -> Span:
        return AMBIENT_SPAN

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


NOOP_CM: Final = NoopSpanCM()


# The objects entered again (and refused) in this context whose exits are still to
# come. Set only when an entry is refused, read only by an exit when one is open.
_REFUSED: ContextVar[tuple[object, ...]] = ContextVar("asynctrace.refused", default=())


def mark_refused(owner: object) -> None:
    """Note that *owner* was entered again, and refused, in the current context."""
    _REFUSED.set((*_REFUSED.get(), owner))


def take_refused(owner: object) -> bool:
    """Whether the current context holds a refused entry of *owner* (forgotten if so).

    Its exit is the one that ends nothing: the first entry's exit, in its own
    context (another task, another thread), finds no such note and ends the span.
    """
    marks = _REFUSED.get()
    for index, mark in enumerate(marks):
        if mark is owner:
            _REFUSED.set(marks[:index] + marks[index + 1 :])
            return True
    return False


class Reentered:
    """ManagedSpan._other (LiveSpan._token) while refused entries are open: *count* of them,
    each also noted in the context it was made in (:func:`mark_refused`), so that its
    exit, and not the first entry's, is the one skipped."""

    __slots__ = ("count", "previous")

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.count = 1
