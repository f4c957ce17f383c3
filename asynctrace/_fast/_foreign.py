"""Spans of other instrumentations: their URL attributes redacted as they are set.

Installed as the global provider, the fast provider records for every
OpenTelemetry instrumentation in the process, and some record more of a URL
than asynctrace would: FastAPI's built-in telemetry keeps ``url.query`` as
sent, tokens and all. A tracer asked for by anyone but asynctrace itself
makes :class:`ForeignSpan` objects, whose URL attributes
(:data:`asynctrace._url_attributes.URL_ATTRIBUTES`; on the span, its events, its
links and its recorded exceptions) go through the same redaction as
exception text when they are set (an ``ERROR`` status description does on
every :class:`FastSpan`): nothing secret is held, queued or exported.
asynctrace's own spans, which redact their URLs where they make them, pay
nothing for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.trace import SpanContext
from opentelemetry.util import types

from .._url_attributes import URL_ATTRIBUTES, redact_url_attributes, redact_url_value
from ._span import SPAN_TYPES, FastSpan

__all__ = ["ForeignSpan", "is_own_scope"]


def is_own_scope(name: str) -> bool:
    """Whether the scope *name* is asynctrace's own (its spans redact their URLs themselves)."""
    return name == "asynctrace" or name.startswith(("asynctrace.", "asynctrace_contrib"))


class ForeignSpan(FastSpan):
    """A :class:`FastSpan` of another instrumentation's tracer (see the module).

    Its tracer passes its starting attributes through
    :func:`~asynctrace._url_attributes.redact_url_attributes` too.
    """

    __slots__ = ()

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        """Set one attribute, a URL one redacted (whatever its type: see ``redact_url_value``)."""
        if isinstance(key, str) and key in URL_ATTRIBUTES:
            value = redact_url_value(key, value)
        FastSpan.set_attribute(self, key, value)

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        """Set several attributes, the URL ones redacted (keys made strings first)."""
        if self._end is not None or not attributes:
            return
        # The URL keys are looked up, whatever the mapping's size (a str subclass key
        # equal to one is found too); FastSpan.set_attributes then takes the keys as the
        # SDK does and reads only what can stay past the limit.
        FastSpan.set_attributes(self, redact_url_attributes(attributes))

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        """Record an event, its URL attributes redacted."""
        if attributes:
            attributes = redact_url_attributes(attributes)
        FastSpan.add_event(self, name, attributes, timestamp)

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        """Link to another span's context (links given at start too), URL attributes redacted."""
        if attributes:
            attributes = redact_url_attributes(attributes)
        FastSpan.add_link(self, context, attributes)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Record *exception* (see :meth:`FastSpan.record_exception`), URL attributes redacted."""
        if attributes:
            attributes = redact_url_attributes(attributes)
        FastSpan.record_exception(self, exception, attributes, timestamp, escaped)


SPAN_TYPES.add(ForeignSpan)
