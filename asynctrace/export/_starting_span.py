"""What an SDK processor's ``on_start`` gets on the fast provider: the ended span, writable."""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Link, SpanContext
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util import types

from .._exception_text import redact_exception_text, secrets_of
from .._fast import SpanLimits
from .._fast._span import good_keys
from .._fast._span_events import exception_attributes
from .._url_attributes import URL_ATTRIBUTES, redact_url_attributes, redact_url_value
from ._convert import bounded, uncut_stamps

__all__ = ["StartingSpan"]


class StartingSpan(trace.Span, ReadableSpan):
    """What an SDK processor's ``on_start`` gets on the fast provider: the ended span, writable.

    A ``ReadableSpan`` (every field of the finished span, the end time
    included) that also takes the OpenTelemetry API's ``Span`` calls while
    ``on_start`` runs: ``set_attribute(s)``, ``add_event``,
    ``record_exception``, ``add_link``, ``set_status`` (``OK`` final,
    ``UNSET`` and anything not a status ignored), ``update_name``;
    ``is_recording()`` is true then. The changes go, with the span limits
    applied as the SDK applies them, into this object, which is what the same
    processor's ``on_end`` receives; no other exporter or processor sees them
    (each converts its own copy). ``end()`` does nothing: the span has ended.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recording = False
        self._limits = SpanLimits()

    def _open(self, limits: SpanLimits) -> None:
        """Take changes (under *limits*) until :meth:`_close`."""
        self._limits = limits
        old = self._attributes
        attributes = BoundedAttributes(
            limits.max_attributes, old, False, limits.max_attribute_length
        )
        if limits.max_attribute_length is not None:
            uncut_stamps(attributes, old or {})
        attributes.dropped = getattr(old, "dropped", 0)
        self._attributes = attributes
        self._recording = True

    def _close(self) -> None:
        self._recording = False

    def is_recording(self) -> bool:
        """True while the processor's ``on_start`` runs."""
        return self._recording

    def get_span_context(self) -> SpanContext:
        """The span's context."""
        return self._context  # type: ignore[return-value]

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        """Set one attribute (checked and limited as the SDK does; a URL one redacted)."""
        if self._recording:
            if isinstance(key, str) and key in URL_ATTRIBUTES:
                value = redact_url_value(key, value)
            self._attributes[key] = value  # type: ignore[index]

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        """Set several attributes; keys taken as the SDK takes a mapping's (see ``good_keys``)."""
        if self._recording:
            kept, bad = good_keys(attributes)
            kept = redact_url_attributes(kept)
            for key, value in kept.items():
                self._attributes[key] = value  # type: ignore[index]
            if bad:
                self._attributes.dropped += bad  # type: ignore[union-attr]

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        """Add an event (the oldest is dropped past ``max_events``)."""
        if self._recording:
            limits = self._limits
            cleaned = bounded(
                limits.max_event_attributes,
                redact_url_attributes(attributes or {}),
                limits.max_event_attribute_length,
            )
            when = time.time_ns() if timestamp is None else timestamp
            self._events.append(Event(name, cleaned, when))  # type: ignore[attr-defined]

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        """Add a link (the oldest is dropped past ``max_links``); as in the SDK, an invalid
        context is ignored unless the link has attributes or a trace state."""
        if self._recording and context is not None:
            if not context.is_valid and not attributes and not context.trace_state:
                return
            limits = self._limits
            cleaned = bounded(
                limits.max_link_attributes,
                redact_url_attributes(attributes or {}),
                limits.max_event_attribute_length,
            )
            self._links.append(Link(context, cleaned))  # type: ignore[attr-defined]

    def update_name(self, name: str) -> None:
        """Rename the span."""
        if self._recording:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """Set the status as the SDK does (``OK`` is final, ``UNSET`` is ignored)."""
        if not self._recording or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self._status = status
        elif isinstance(status, StatusCode) and status is not StatusCode.UNSET:
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Record *exception* as an ``exception`` event, its message and stack trace redacted."""
        if not self._recording:
            return
        secrets = secrets_of(exception)
        try:
            text = redact_exception_text(
                "".join(traceback.format_exception(exception)), secrets, tail=True
            )
        except Exception as exc:
            text = f"<stack trace unavailable: {type(exc).__name__}>"
        attrs = exception_attributes(exception, text, escaped, secrets)  # as a span's own
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        """Nothing: the span has ended."""
