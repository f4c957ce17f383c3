"""The context manager of an enabled span: starts, attaches, detaches, ends."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from opentelemetry.trace import (
    Span,
)

from ._cm import SyncAndAsync
from ._errors import report_internal_error
from ._group_types import Bucket
from ._span_context import (
    attach,
    detach,
    finish,
)
from ._span_noop import AMBIENT_SPAN, Reentered, mark_refused, take_refused
from ._span_rules import (
    Attributes,
    site,
)
from ._span_start import _DONE, _new, start

__all__ = ["LiveSpan"]


class LiveSpan(SyncAndAsync[Span]):
    """Context manager of an enabled span: starts, attaches, detaches, ends.

    Used on any provider but the fast one (which has
    :class:`~asynctrace._managed_span.ManagedSpan`).
    Like the spans it stands for, it is entered once; entering it again
    (nested on itself, or after its block) yields the shared disabled span.
    """

    __slots__ = ("_attributes", "_bucket", "_group", "_name", "_shape", "_span", "_token")

    def __init__(
        self,
        group: str,
        name: str,
        shape: int,
        attributes: Attributes | None,
        bucket: Bucket | None,
    ) -> None:
        self._group = group
        self._name = name
        self._shape = shape
        self._attributes = attributes
        self._bucket = bucket
        self._span: Any = None  # None, then the span while open, then _DONE
        self._token: Any = None  # the context token (a Reentered while refused entries are open)

    def __enter__(self) -> Span:
        if self._span is not None:
            return self._refuse()
        span = start(self._name, self._group, self._shape, self._attributes, self._bucket)
        if span is None:
            return AMBIENT_SPAN  # not entered: its exit does nothing
        self._span = span
        self._token = attach(span)
        return span

    def _refuse(self) -> Span:
        """A second ``with`` on this object: the disabled span, and its exit will do nothing."""
        report_internal_error(
            ("reenter", site(self._group)),
            RuntimeError("this managed_span() was entered already; make a new one"),
        )
        if self._span is not _DONE:  # entered while open: its exit must end nothing
            token = self._token
            if token.__class__ is Reentered:
                token.count += 1
            else:
                self._token = Reentered(token)
            mark_refused(self)
        return AMBIENT_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if span is None or span is _DONE:  # never entered (starting failed), or exited
            token = self._token
            if token.__class__ is Reentered and token.count and take_refused(self):
                token.count -= 1  # a refused entry exiting after the first entry did
            return
        token = self._token  # a `with` on this object while it was open, exiting first:
        if token.__class__ is Reentered and token.count and take_refused(self):
            token.count -= 1
            return  # the exit of that refused entry: the span goes on
        detach(self.release(), self._group)
        finish(span, exc_type, exc)

    def release(self) -> object:
        """Mark the span exited and return the token its first entry attached.

        Refused entries still open (in other tasks) keep the :class:`Reentered`
        marker, with nothing left under it to exit again.
        """
        token = self._token
        if token.__class__ is Reentered:
            reentered, token = token, token.previous
            self._token = reentered if reentered.count else None
            reentered.previous = None
        else:
            self._token = None
        self._span = _DONE
        return token


def _live(
    group: str, name: str, shape: int, attributes: Attributes | None, bucket: Bucket | None
) -> LiveSpan:
    """``LiveSpan(...)`` without the ``__init__`` frame (this runs once per span)."""
    live = _new(LiveSpan)
    live._group = group
    live._name = name
    live._shape = shape
    live._attributes = attributes
    live._bucket = bucket
    live._span = None
    live._token = None
    return live
