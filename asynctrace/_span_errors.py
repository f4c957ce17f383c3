"""Current-span blocks that record an escaping exception redacted, on any provider.

OpenTelemetry's ``use_span`` (behind every ``start_as_current_span``) records
an exception that escapes its block as the span's ``record_exception`` does
and sets a ``"<type>: <message>"`` status description: on an SDK span, raw,
a URL's token and all. :func:`redacted_block` is that block with the same
event and status, redacted as asynctrace's own spans record them; the fast
provider's tracer and :class:`RedactingTracer` (the SDK tracer
:func:`asynctrace.get_tracer` hands out) open their blocks with it, and
:func:`record_error` is the recording alone, for a block of one's own.

The fast provider's spans redact whatever they record themselves. An SDK span
asynctrace hands out is made to do the same by :func:`redacting`: its class
becomes a subclass of the SDK's whose ``record_exception``, ``set_status``
and ``__exit__`` redact (the same object, so processors, the current context
and the caller all hold it), so ``with span:``, ``use_span(span)`` and a
``span.record_exception(exc)`` by hand record what the fast provider records;
its URL attributes (on the span, its events and its links) are redacted as
the fast provider's spans redact them too.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.util import types

from ._cm import otel_contextmanager
from ._errors import report_internal_error
from ._exception_text import exception_reason, redact_exception_text, secrets_of
from ._forksafe import reinit_at_fork
from ._scopes import SCOPES
from ._url_attributes import URL_ATTRIBUTES, redact_url_attributes, redact_url_value

__all__ = [
    "RedactingTracer",
    "record_error",
    "redacted_block",
    "redacted_links",
    "redacting",
    "restore_stamps",
    "stamp_started",
]

_STACKTRACE = "exception.stacktrace"


def redacted_block(
    span: trace.Span, end_on_exit: bool, record_exception: bool, set_status_on_exception: bool
) -> Iterator[trace.Span]:
    """``use_span(span, ...)`` as a generator, an escaping exception recorded redacted."""
    with trace.use_span(
        span, end_on_exit=end_on_exit, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except Exception as exc:
            if record_exception or set_status_on_exception:
                record_error(current, exc, event=record_exception, status=set_status_on_exception)
            raise


def record_error(
    span: trace.Span, exc: BaseException, *, event: bool = True, status: bool = True
) -> None:
    """Record *exc* on *span* as ``use_span`` does, redacted: the ``exception`` event
    (with *event*) and the ``"<type>: <message>"`` ERROR status (with *status*).

    The message and the stack trace lose URL credentials, secret-like values
    and the secrets remembered for *exc*. Never raises.

    Example:
        >>> from opentelemetry import trace
        >>> record_error(trace.INVALID_SPAN, ValueError("GET http://u:pw@h/?token=t"))
    """
    try:
        if not span.is_recording():
            return
        if event:
            if type(span).__module__.startswith("opentelemetry.sdk"):
                _record_sdk(span, exc)
            else:  # asynctrace's spans redact what they record themselves
                span.record_exception(exc)
        if status:
            span.set_status(Status(StatusCode.ERROR, exception_reason(type(exc), exc)))
    except Exception as err:
        report_internal_error(("exit", type(span).__name__), err)


def _record_sdk(span: trace.Span, exc: BaseException) -> None:
    """The SDK's own ``exception`` event, its message and stack trace redacted."""
    secrets = secrets_of(exc)
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {type(exc).__name__}>"
    span.record_exception(
        exc,
        {
            "exception.message": redact_exception_text(message, secrets),
            _STACKTRACE: _stack_text(exc, secrets),
        },
    )


def _stack_text(exc: BaseException, secrets: frozenset[str]) -> str:
    """*exc*'s stack trace as ``traceback.format_exception`` writes it, redacted."""
    try:
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception as err:  # a broken __str__ in the chain, say
        return f"<stack trace unavailable: {type(err).__name__}>"
    return redact_exception_text(stack, secrets, tail=True)


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


class RedactingTracer(trace.Tracer):
    """An SDK tracer whose spans record exceptions redacted (see :func:`redacting`).

    Its spans get the scope stamps from the provider's first span processor
    (:func:`stamp_started`), as every other tracer's spans on that provider do.
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        """The SDK tracer's ``start_span``; the span records exceptions redacted, and its
        URL attributes (links' too) are redacted as the fast provider's."""
        return redacting(self.tracer.start_span(
            name, context, kind,
            redact_url_attributes(attributes) if attributes else attributes,
            redacted_links(links), start_time, record_exception, set_status_on_exception,
        ))  # fmt: skip

    @otel_contextmanager
    def start_as_current_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        """Start a span and make it current for the block (also a decorator)."""
        span = self.start_span(
            name, context, kind, attributes, links, start_time, record_exception,
            set_status_on_exception,
        )  # fmt: skip
        yield from redacted_block(span, end_on_exit, record_exception, set_status_on_exception)


def redacted_links(links: Sequence[Link] | None) -> Sequence[Link] | None:
    """*links* with their URL attributes redacted (a new list if any changed)."""
    if not links:
        return links
    out: list[Link] | None = None
    for index, link in enumerate(links):
        attributes = link.attributes if link is not None else None
        if attributes and not URL_ATTRIBUTES.isdisjoint(attributes):
            if out is None:
                out = list(links)
            out[index] = Link(link.context, redact_url_attributes(attributes))
    return links if out is None else out


def _error_description() -> Callable[[str], str]:
    """The fast provider's ``error_description`` (imported late: that package imports
    this module)."""
    from ._fast._span_events import error_description

    return error_description


def stamp_started(span: Any) -> None:
    """Put the current scope stamps on an SDK *span* that has just started (for a span
    processor's ``on_start``): a key the span started with keeps its value, the stamps
    come after its attributes (past its count limit the SDK evicts the oldest: the
    span's own stamp keys are kept, as stamps) and no length limit cuts them. Outside
    scopes, and on a span stamped already (asynctrace's own), a ContextVar read and a
    look-up. Never raises.
    """
    try:
        scopes = SCOPES.get()
        stamps = scopes._stamps
        if stamps is None:
            stamps = scopes.stamps
        if not stamps:
            return
        stored = span._attributes
        missing = {key: value for key, value in stamps.items() if key not in stored}
        if missing:
            maxlen = getattr(stored, "maxlen", None)
            if maxlen is not None and len(stored) + len(missing) > maxlen:
                _stamp_past_the_limit(span, stored, missing)
            else:
                span.set_attributes(missing)
            limits = getattr(span, "_limits", None)
            if getattr(limits, "max_span_attribute_length", None) is not None:
                restore_stamps(span, missing)
    except Exception as exc:
        report_internal_error(("stamp_started", type(span).__name__), exc)


def _stamp_past_the_limit(span: Any, stored: Any, missing: dict[str, Any]) -> None:
    """Add the *missing* stamps to an SDK *span* whose attributes are full: the span's
    own stamp keys (:data:`~._fast._evict.STAMP_KEYS`) count as stamps, kept with their
    own values, and the oldest other attributes are evicted first."""
    own = {key: stored[key] for key in sorted(_stamp_keys().intersection(stored))}
    span.set_attributes(own)  # the newest end: an existing key evicts nothing
    span.set_attributes(missing)
    lost = {key: value for key, value in own.items() if key not in stored}
    if lost:  # more stamps than the limit: the span's own kept, the newest scope stamps go
        span.set_attributes(lost)
        if isinstance(getattr(stored, "dropped", None), int):
            stored.dropped -= len(lost)  # each was counted once when evicted, once again now


_STAMP_KEYS: frozenset[str] | None = None


def _stamp_keys() -> frozenset[str]:
    """The fast provider's ``STAMP_KEYS`` (imported late: that package imports this module)."""
    global _STAMP_KEYS
    if _STAMP_KEYS is None:
        from ._fast._evict import STAMP_KEYS

        _STAMP_KEYS = STAMP_KEYS
    return _STAMP_KEYS


def restore_stamps(span: trace.Span, attrs: Mapping[str, Any]) -> None:
    """Put the stamps a length limit cut on an SDK *span* back whole, from *attrs* (the
    values it was given)."""
    stored = getattr(getattr(span, "_attributes", None), "_dict", None)
    if isinstance(stored, dict):
        for key in _stamp_keys().intersection(stored):
            value = attrs.get(key)
            if value.__class__ is str:
                stored[key] = value
