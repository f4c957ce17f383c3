"""SDK spans made to record exceptions, statuses and URL attributes redacted, in place.

An SDK span asynctrace hands out is made to redact what it records as the
fast provider's spans do by :func:`redacting`: its class becomes a subclass
of the SDK's whose ``record_exception``, ``set_status`` and ``__exit__``
redact (the same object, so processors, the current context and the caller
all hold it), so ``with span:``, ``use_span(span)`` and a
``span.record_exception(exc)`` by hand record what the fast provider records;
its URL attributes (on the span, its events and its links) are redacted as
the fast provider's spans redact them too.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util import types

from ._errors import report_internal_error
from ._exception_text import exception_reason, secrets_of
from ._forksafe import reinit_at_fork
from ._span_errors import STACKTRACE as _STACKTRACE  # (under the names record_exception reads)
from ._span_errors import stack_text as _stack_text
from ._url_attributes import URL_ATTRIBUTES, redact_url_attributes, redact_url_value

__all__ = ["PRE_REDACTED", "redact_started", "redacting"]

# An SDK span class -> the subclass of it :func:`redacting` gives its spans; any
# other class (and each such subclass) -> itself. One entry per class seen.
_REDACTING: dict[type, type] = {}
_REDACTING_LOCK = threading.Lock()
reinit_at_fork(_REDACTING_LOCK)  # held by another thread at fork(): new in the child


def redacting(span: trace.Span) -> trace.Span:
    """*span*, recording exceptions and ``ERROR`` descriptions redacted from now on.

    An SDK span (``opentelemetry.sdk.trace``'s, whose ``record_exception``,
    ``set_status`` and ``__exit__`` are the SDK's own) becomes, in place, an
    object of a subclass whose three methods redact as the fast provider's
    span does; any other span is left as it is. A dictionary look-up and a
    class assignment: cheap enough for every span. Never raises.

    Example:
        >>> from opentelemetry import trace
        >>> redacting(trace.INVALID_SPAN) is trace.INVALID_SPAN
        True
    """
    cls = span.__class__
    new = _REDACTING.get(cls)
    if new is None:
        new = _redacting_class(cls)
    if new is not cls:
        try:
            span.__class__ = new
        except Exception as err:  # a layout the subclass cannot take: left raw
            _REDACTING[cls] = cls
            report_internal_error(("redacting", cls.__name__), err)
    return span


_AUTHORITY_END = re.compile(r"[/?#]")


class _PreRedacted(threading.local):
    """Set on a thread while a ``RedactingTracer`` starts a span whose attributes it has
    redacted: :func:`redact_started` takes it (once) and leaves them alone."""

    on = False


PRE_REDACTED = _PreRedacted()


def redact_started(span: trace.Span, attributes: bool = True) -> None:
    """Make an SDK *span* that has just started redact as asynctrace's own do, whatever
    tracer started it (for a span processor's ``on_start``: the processors after it set
    their attributes through the redacting class). Never raises.

    *span* becomes :func:`redacting`; with *attributes* (a span that another
    tracer than asynctrace's started, whose attributes nobody redacted yet),
    the URL attributes it started with are redacted in place, and cut to the
    span's ``max_attribute_length`` again. The SDK cut them to it before: a URL
    cut before its authority ends (inside a userinfo, with no ``@`` left to tell
    a password or a token by, looks as a cut host does) keeps its scheme only.

    Example:
        >>> redact_started(trace.INVALID_SPAN)
    """
    try:
        redacting(span)
        if PRE_REDACTED.on:  # its tracer redacted them; taken once (a span this start's
            PRE_REDACTED.on = False  # processors start themselves is redacted as any)
            return
        if not attributes:
            return
        own = getattr(getattr(span, "_attributes", None), "_dict", None)
        if own and not URL_ATTRIBUTES.isdisjoint(own):
            limits = getattr(span, "_limits", None)
            limit = getattr(limits, "max_attribute_length", None)
            for key in URL_ATTRIBUTES.intersection(own):
                own[key] = _started_url(key, own[key], limit)
    except Exception as err:
        report_internal_error(("redact_started", type(span).__name__), err)


def _started_url(key: str, value: Any, limit: int | None) -> Any:
    """A starting URL attribute's value redacted, within *limit* characters (a ``str``)."""
    if limit is None or value.__class__ is not str:
        return redact_url_value(key, value)
    if len(value) >= limit:  # maybe cut by the SDK: inside its userinfo, say
        scheme = value.find("://")
        if scheme != -1 and not _AUTHORITY_END.search(value, scheme + 3):
            return value[: scheme + 3][:limit]  # a cut username looks like a cut host
    text = redact_url_value(key, value)
    return text[:limit] if text.__class__ is str and len(text) > limit else text


def _redacting_class(cls: type) -> type:
    """The class :func:`redacting` gives spans of *cls* (made once per class)."""
    with _REDACTING_LOCK:
        found = _REDACTING.get(cls)
        if found is None:
            found = _subclass(cls)
            _REDACTING[cls] = found
            _REDACTING[found] = found
        return found


def _subclass(cls: type) -> type:
    """*cls* with :class:`_RedactingSdkSpan`'s methods if it is a plain SDK span; else *cls*."""
    sdk = sys.modules.get("opentelemetry.sdk.trace")
    base = getattr(sdk, "Span", None)
    if base is None or not isinstance(base, type) or not issubclass(cls, base):
        return cls
    for name in ("record_exception", "set_status", "__exit__"):
        if getattr(cls, name, None) is not getattr(base, name, None):
            return cls  # a subclass with its own: it is left to its author
    namespace = {"__module__": __name__, "__qualname__": cls.__qualname__}
    meta: Any = type(cls)  # the SDK span's ABCMeta
    made: type = meta(cls.__name__, (_RedactingSdkSpan, cls), namespace)
    return made


class _RedactingSdkSpan(trace.Span):
    """What an SDK span records of an exception, redacted (see :func:`redacting`).

    Mixed in before the SDK's span class. The ``exception`` event has the
    fast provider's attributes (the type's qualified name, the message and
    the stack trace redacted with the secrets remembered for the exception,
    ``exception.escaped``); attributes passed by the caller override them, a
    caller's own stack trace included, as OpenTelemetry specifies. An
    ``ERROR`` description is redacted as it is set (with the secrets of the
    exception being handled), and so are the URL attributes (on the span, its
    events and its links), as on the fast provider.
    """

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        """Set one attribute, a URL one redacted (see ``redact_url_value``)."""
        if isinstance(key, str) and key in URL_ATTRIBUTES:
            value = redact_url_value(key, value)
        super().set_attribute(key, value)  # type: ignore[safe-super]

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        """Set several attributes, the URL ones redacted."""
        if attributes:
            attributes = redact_url_attributes(attributes)
        super().set_attributes(attributes)  # type: ignore[safe-super]

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        """Record an event, its URL attributes redacted."""
        if attributes:
            attributes = redact_url_attributes(attributes)
        super().add_event(name, attributes, timestamp)  # type: ignore[safe-super]

    def add_link(self, context: trace.SpanContext, attributes: types.Attributes = None) -> None:
        """Link to another span's context, its URL attributes redacted."""
        if attributes:
            attributes = redact_url_attributes(attributes)
        super().add_link(context, attributes)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Record *exception* as an ``exception`` event, its message and stack trace redacted."""
        if not self.is_recording():
            return
        try:
            from ._fast._span_events import exception_attributes

            secrets = secrets_of(exception)
            own = attributes is not None and _STACKTRACE in attributes
            stack = "" if own else _stack_text(exception, secrets)
            event: dict[str, Any] = exception_attributes(exception, stack, escaped, secrets)
            if attributes:
                event.update(attributes)
        except Exception as err:
            report_internal_error(("record_exception", "sdk"), err)
            return
        self.add_event("exception", event, timestamp)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """Set the status as the SDK does; an ``ERROR`` description is redacted first,
        with the secrets of the exception being handled (``use_span`` quotes it)."""
        if self.is_recording():
            if isinstance(status, Status):
                text = status.description
                if status.status_code is StatusCode.ERROR and text and isinstance(text, str):
                    status = Status(StatusCode.ERROR, _error_description()(text))
            elif status is StatusCode.ERROR and description and isinstance(description, str):
                description = _error_description()(description)
        super().set_status(status, description)  # type: ignore[safe-super]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """End the span; an escaping exception is recorded and sets ERROR, redacted."""
        if exc_val is not None and self.is_recording():
            if getattr(self, "_record_exception", True):
                self.record_exception(exc_val, escaped=True)
            if getattr(self, "_set_status_on_exception", True):
                self.set_status(Status(StatusCode.ERROR, exception_reason(type(exc_val), exc_val)))
        self.end()


def _error_description() -> Callable[[str], str]:
    """The fast provider's ``error_description``, imported at first use (as in
    :mod:`._span_errors`, which that package imports)."""
    from ._fast._span_events import error_description

    return error_description
