"""The read side of a fast span: what the exporters read once it ended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.status import Status, StatusCode

from ._pending import SEEN, has_long_urls, resolve_long_urls

if TYPE_CHECKING:
    from ._span_events import SpanEvent

__all__ = ["SpanRecord"]

_UNSET = StatusCode.UNSET


class SpanRecord(trace.Span):
    """The properties of :class:`~._span.FastSpan` that read its fields (its base class).

    Unchecked: the exporters apply the limits. No slots of its own: the span's
    are declared by :class:`~._span.FastSpan`.
    """

    __slots__ = ()
    _attributes: dict[str, Any]
    _start: int
    _end: int | None
    _events: list[SpanEvent] | None
    _parent_id: int
    _kind: SpanKind
    _status: Status | None

    @property
    def attributes(self) -> Mapping[str, Any]:
        """The attributes as recorded, read-only, as the SDK's span gives them (unchecked:
        the exporters apply the limits); a long URL value redacted first."""
        own: dict[str, Any] | None = self._attributes
        if own is None:  # a managed_span() object not entered
            return None  # type: ignore[return-value]
        if SEEN.long and has_long_urls(own):
            resolve_long_urls(self)
        return MappingProxyType(own)

    @property
    def start_time(self) -> int:
        """Start, in nanoseconds since the epoch."""
        return self._start

    @property
    def end_time(self) -> int | None:
        """End, in nanoseconds since the epoch (``None`` while recording)."""
        return self._end

    @property
    def events(self) -> Sequence[SpanEvent]:
        """The recorded events, oldest first (a long URL value redacted first)."""
        if SEEN.long:
            resolve_long_urls(self)
        return tuple(getattr(self, "_events", None) or ())  # (none before a managed span's entry)

    @property
    def links(self) -> Sequence[Link]:
        """The links, oldest first (a long URL value redacted first)."""
        if SEEN.long:
            resolve_long_urls(self)
        return tuple(getattr(self, "_links", None) or ())

    @property
    def parent_span_id(self) -> int:
        """The parent's span id (``0`` for a root)."""
        return self._parent_id

    @property
    def kind(self) -> SpanKind:
        """The span's kind."""
        return self._kind

    @property
    def status(self) -> Status:
        """The status (``UNSET`` unless set)."""
        return self._status if self._status is not None else Status(_UNSET)
