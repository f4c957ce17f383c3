"""The fast provider's span: a compact, lock-free record of one operation.

A :class:`FastSpan` is both the live span (the OpenTelemetry API's ``Span``)
and, once ended, the record the exporters read: ``end()`` stamps the end time
and hands the object itself to each export queue, nothing more. Calls made
after ``end()`` change nothing, so the export threads read the fields without
locks; a setter already past its check on another thread when ``end()`` runs
may still write, which is why the export threads read copies of the
attribute dicts (one atomic ``dict`` copy each).

The hot path only stores values (a value that is not a ``str``, ``int`` or
``bool`` is taken as it is at that moment: see :func:`private_value`).
Everything else that costs (attribute value checks and length limits,
exception stack traces, conversion to the SDK's ``ReadableSpan``, encoding)
happens on the export threads. What the hot path does bound is memory: a
span keeps at most ``max_attributes`` attributes, ``max_events`` events and
``max_links`` links, evicting the oldest as the SDK does (but never
asynctrace's stamps, :data:`~._evict.STAMP_KEYS`), and counts what it dropped.
Those counts are exact when threads share a span: the over-limit path that
changes them takes one process-wide lock; the path below the limit takes none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Container, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util import types

from .._exception_text import redact_exception_text, secrets_of
from .._forksafe import reinit_at_fork
from .._url_attributes import URL_ATTRIBUTES, redact_url_value
from ._evict import (
    STAMP_KEYS,
    keep_stamps,
    newest_good,
    oldest_evictable,
    trim,
)

# (imported under the names the hot functions read: set_attributes, good_keys, __exit__)
from ._evict import evicted_early as _evicted_early
from ._evict import kept_key as _kept_key
from ._pending import LONG_URL, LongUrl, long_url
from ._span_events import (
    STACKTRACE,
    SpanEvent,
    capture_stack,
    error_description,
    exception_attributes,
)
from ._span_events import exception_message as _message
from ._span_record import SpanRecord

if TYPE_CHECKING:
    from ._provider import FastTracer

__all__ = [
    "NONFINITE",
    "SPAN_TYPES",
    "FastSpan",
    "good_keys",
    "private_value",
    "url_redacted",
]

_time_ns = time.time_ns
_new_tuple = tuple.__new__
_OK = StatusCode.OK
_UNSET = StatusCode.UNSET
_ERROR = StatusCode.ERROR
_LIST = list
_TRACE_FLAGS = tuple(TraceFlags(flags) for flags in range(256))  # made once, not per context
_MISSING: Any = object()
_URL_KEYS = URL_ATTRIBUTES  # (a global of this module: one lookup per set_attribute)
_COUNTS = threading.Lock()  # taken to change a drop counter (the over-limit paths only)
reinit_at_fork(_COUNTS)

NONFINITE: list[bool] = [False]
"""Set (for good) once a span stores a float that is NaN or infinite, alone or in a sequence.

The chrome writer searches its lines for the ``null`` msgspec writes for such a
float only after that; until then a batch of fast-provider spans is written as
encoded.
"""


def note_floats(values: Any, depth: int = 0) -> None:
    """Set :data:`NONFINITE` if any of *values* is (or holds) a NaN or an infinity."""
    for value in values:
        if value.__class__ is float:
            if value - value != 0.0:  # NaN and the infinities only
                NONFINITE[0] = True
                return
        elif depth < _DEPTH and isinstance(value, (tuple, list)):
            note_floats(value, depth + 1)


# kept as given: immutable, nothing to note (a LongUrl: the export thread's to redact)
_SIMPLE = frozenset({str, int, bool, type(None), LongUrl})
_DEPTH = 16  # containers deeper than this are kept as given (a list that holds itself, say)


def private_value(value: Any, depth: int = 0) -> Any:
    """*value* as a span keeps it, taken now as the SDK takes it: floats noted, the rest copied.

    Sequences become tuples and mappings dicts (subclasses too), at any depth;
    another object that has its own ``__str__`` or ``__repr__`` (a numpy array,
    say) becomes its text, as the SDK records it. A caller that changes a list,
    a dict or an array after setting it (or after ``end()``) changes nothing
    recorded, and an export thread never reads an object another thread is
    changing. Immutable values (strings, numbers, bytes, their subclasses) are
    kept as given, and so is an object whose text is ``object``'s own (the
    exporters drop it, as the SDK's ``None``) or whose ``str()`` raises.
    """
    cls = value.__class__
    if cls is float:
        if value - value != 0.0:  # NaN and the infinities only
            NONFINITE[0] = True
        return value
    if cls in _SIMPLE or depth >= _DEPTH:
        return value
    if cls is tuple and _SIMPLE.issuperset(map(type, value)):
        return value  # immutable all the way down: kept as it is
    if cls is tuple or cls is _LIST:
        return tuple([private_value(item, depth + 1) for item in value])
    if isinstance(value, _IMMUTABLE):  # a str or int subclass (an enum), numpy's float64...
        if isinstance(value, float) and value - value != 0.0:
            NONFINITE[0] = True
        return value
    if isinstance(value, Sequence):
        return tuple([private_value(item, depth + 1) for item in value])
    if isinstance(value, Mapping):
        return {key: private_value(item, depth + 1) for key, item in value.items()}
    if cls.__str__ is _OBJECT_STR and cls.__repr__ is _OBJECT_REPR:
        return value  # no text of its own: left to the exporters (which drop it)
    try:
        return str(value)
    except KeyboardInterrupt:
        raise
    except BaseException:  # SystemExit from a __str__ too: left to the exporters, which
        return value  # drop it and count it; the caller's set_attribute never raises


_IMMUTABLE = (str, int, float, bytes)


def _copy_attributes(
    attributes: Mapping[str, Any] | None, span: bool = False, urls: bool = True
) -> dict[str, Any]:
    """A private copy (see :func:`private_value`): later changes by the caller do not show.

    *span*: the copy is kept on a fast span (its own attributes, an event's or a
    link's), whose long URL values are left to the export thread
    (:func:`url_redacted`); else (a copy made on an export thread) they are
    redacted at once.
    Without *urls*, URL attributes are kept as given (a caller that redacted them).
    """
    if not attributes:
        return {}
    copied = dict(attributes)
    if not _SIMPLE.issuperset(map(type, copied.values())):
        for key, value in copied.items():
            if value.__class__ not in _SIMPLE:
                try:
                    copied[key] = private_value(value)
                except Exception:  # a Mapping whose items() raises, say: left to the exporters
                    pass
    if urls and not _URL_KEYS.isdisjoint(copied):
        url_redacted(copied, span)
    return copied


def url_redacted(attributes: dict[str, Any], span: bool = False) -> dict[str, Any]:
    """*attributes* (changed in place) with the URL ones redacted as URLs.

    The keys are :data:`~asynctrace._url_attributes.URL_ATTRIBUTES` and the
    rule :func:`~asynctrace._url_attributes.redact_url_value` (any type of
    value): what every span asynctrace hands out records of a URL, on either
    provider, however the attribute is set. With *span* (attributes kept on a
    fast span: its own, an event's or a link's), a text longer than
    :data:`~._pending.LONG_URL` characters is left to the export thread
    (:class:`~._pending.LongUrl`): redacting it here could hold the event loop
    for milliseconds.
    """
    for key in _URL_KEYS.intersection(attributes):
        value = attributes[key]
        cls = value.__class__
        if cls is LongUrl:
            continue  # (a span's own, copied again past its limit) redacted on export
        if span and cls is str and len(value) > LONG_URL:
            attributes[key] = long_url(key, value)
        else:
            attributes[key] = redact_url_value(key, value)
    return attributes


def good_keys(attributes: Mapping[Any, Any]) -> tuple[Mapping[str, Any], int]:
    """*attributes* without the keys the SDK drops, and how many it dropped.

    The SDK's rule for a mapping of attributes: a key that is empty or ``None``
    is dropped; another key that is not a string becomes ``str(key)`` if its
    class defines ``__str__`` or ``__repr__``, else is dropped. Only keys the
    span keeps may count towards ``max_attributes``. All-string keys (the
    common case) cost one pass in C.
    """
    if _STR_KEYS.issuperset(map(type, attributes)) and "" not in attributes:
        return attributes, 0
    kept: dict[str, Any] = {}
    for key, value in attributes.items():
        key = key if key.__class__ is str else _kept_key(key)
        if key:
            kept[key] = value
    return kept, len(attributes) - len(kept)


_STR_KEYS = frozenset({str})
_OBJECT_STR: Any = object.__str__
_OBJECT_REPR: Any = object.__repr__


def _evict_past(span: FastSpan, attributes: dict[str, Any], keep: int) -> None:
    """Evict the oldest attributes but the stamps until *keep* are left, counting them as dropped.

    Another thread may change *attributes* meanwhile: what it removed first is
    simply gone.
    """
    evicted = 0
    while len(attributes) > keep:
        try:
            if attributes.pop(oldest_evictable(attributes), _MISSING) is _MISSING:
                continue  # another thread evicted it first, and counted it
        except (RuntimeError, StopIteration):  # changed while read: look again
            continue
        evicted += 1
    if evicted:
        with _COUNTS:
            span._dropped = getattr(span, "_dropped", 0) + evicted


def _install(
    span: FastSpan,
    live: dict[str, Any],
    kept: dict[str, Any],
    keys: Container[str],
    lost: int,
    limit: int,
) -> None:
    """Make *live* (the span's own dict, changed in place) hold *kept*, in its order.

    *keys* holds the keys being set. A key of *live* that is neither kept nor
    among them is counted as dropped when this call removes it (one another
    thread set meanwhile too); *lost* counts the rest (values set but not
    kept, old values evicted before being set again).
    """
    for key in list(live):  # one C call
        if (
            key not in kept
            and key not in STAMP_KEYS  # (missing from a copy taken while another moved it)
            and live.pop(key, _MISSING) is not _MISSING
            and key not in keys
        ):
            lost += 1
    for key, value in _copy_attributes(kept, True).items():  # to the end, in *kept*'s order
        if key in STAMP_KEYS:  # set in place, never taken out: another thread may be
            live[key] = value  # copying the dict this moment, and would evict what it missed
            continue
        if live.pop(key, _MISSING) is _MISSING and key not in keys:
            continue  # an old one another thread evicted meanwhile (and counted)
        live[key] = value
    if lost:
        with _COUNTS:
            span._dropped = getattr(span, "_dropped", 0) + lost
    if len(live) > limit:  # another thread wrote meanwhile
        _evict_past(span, live, limit)


class FastSpan(SpanRecord):
    """A recording span of :class:`asynctrace.FastTracerProvider`.

    Implements the whole OpenTelemetry API ``Span``. Calls on an ended span
    change nothing, as in the SDK (``end()`` a second time included). URL
    attributes are redacted however they are set (on the span, its events,
    its links; see :func:`url_redacted`), whichever tracer started it; the
    name is recorded as given.
    """

    __slots__ = (
        "_attributes",
        "_context",
        "_dropped",
        "_dropped_events",
        "_dropped_links",
        "_end",
        "_events",
        "_flags",
        "_forgotten",
        "_kind",
        "_links",
        "_name",
        "_opts",
        "_owner",
        "_parent_flags",
        "_parent_id",
        "_parent_remote",
        "_span_id",
        "_start",
        "_state",
        "_status",
        "_trace_id",
        "_tracer",
    )
    _links: list[Link]
    _dropped: int
    _dropped_events: int
    _dropped_links: int
    _opts: int
    _forgotten: list[bool]
    _parent_flags: int

    def __init__(
        self,
        tracer: FastTracer,
        name: str,
        trace_id: int,
        span_id: int,
        flags: int,
        state: TraceState | None,
        parent_id: int,
        parent_remote: bool,
        kind: SpanKind,
        attributes: dict[str, Any],
        start: int,
        owner: object,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._trace_id = trace_id
        self._span_id = span_id
        self._flags = flags
        self._state = state
        self._parent_id = parent_id
        self._parent_remote = parent_remote
        self._kind = kind
        self._attributes = attributes
        self._dropped = 0
        self._start = start
        self._owner = owner
        self._end: int | None = None
        self._events: list[SpanEvent] | None = None
        self._status: Status | None = None
        self._context: SpanContext | None = None
        # Set only when used (read with getattr and a default): _links;
        # _dropped_events, _dropped_links (what the limits evicted); _opts (bit 0:
        # record exceptions, bit 1: set ERROR on them, when used as a `with`; 3);
        # _forgotten (its claim, once the provider forgot it: see FastTracerProvider);
        # _parent_flags (a parent's trace flags that are not the span's own).

    # -- identity ----------------------------------------------------------------

    def get_span_context(self) -> SpanContext:
        """The span's context (built on first use, then kept)."""
        context = self._context
        if context is None:
            context = self._context = _new_tuple(
                SpanContext,
                (
                    self._trace_id,
                    self._span_id,
                    False,
                    _TRACE_FLAGS[self._flags & 0xFF],
                    self._state if self._state is not None else trace.DEFAULT_TRACE_STATE,
                    True,
                ),
            )
        return context

    def is_recording(self) -> bool:
        """True until the span ends."""
        return self._end is None

    @property
    def name(self) -> str:
        """The span's name."""
        return self._name

    # -- setters -----------------------------------------------------------------

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        """Set one attribute; the oldest (not a stamp) is evicted past ``max_attributes``.

        A key that is not a non-empty string is dropped and counted, as the SDK
        drops it, and evicts nothing. Several threads may set attributes on one
        span at once, without a lock: none of them raises, and once they are
        done the span holds at most ``max_attributes`` (each evicts after its
        write what went past the limit meanwhile).
        """
        if self._end is not None:
            return
        attributes = self._attributes
        if key.__class__ is str and key and key not in attributes:  # the common case, first
            most = self._tracer._max_attributes  # (no limit: sys.maxsize)
            if len(attributes) < most:
                cls = value.__class__
                if cls is int:
                    pass  # (the commonest value: kept as given, no other test)
                elif cls is str:  # kept as given, unless a URL attribute
                    if key in _URL_KEYS:  # url.full and the like: redacted as URLs
                        if len(value) <= LONG_URL:  # type: ignore[arg-type]
                            value = redact_url_value(key, value)
                        else:  # on the export thread (see url_redacted)
                            value = long_url(key, value)  # type: ignore[arg-type,assignment]
                elif cls not in _SIMPLE:  # (bool, None: kept as given)
                    if cls is not float and key in _URL_KEYS:  # (a number stays a number)
                        value = redact_url_value(key, value)  # text, or a tuple: never raises
                    try:
                        value = private_value(value)
                    except Exception:  # as below
                        pass
                attributes[key] = value
                if len(attributes) > most:  # another thread wrote meanwhile
                    _evict_past(self, attributes, most)
                return
        if (key.__class__ is not str and not isinstance(key, str)) or not key:
            with _COUNTS:
                self._dropped = getattr(self, "_dropped", 0) + 1
            return
        limit = self._tracer._limits.max_attributes
        if key in attributes:
            attributes.pop(key, None)  # as the SDK does: a key set again moves to the end
        elif limit is not None and len(attributes) >= limit:
            if not limit:
                with _COUNTS:
                    self._dropped = getattr(self, "_dropped", 0) + 1
                return
            _evict_past(self, attributes, limit - 1)
        cls = value.__class__
        if cls is str:
            if key in _URL_KEYS:
                if len(value) <= LONG_URL:  # type: ignore[arg-type]
                    value = redact_url_value(key, value)
                else:  # on the export thread (see url_redacted)
                    value = long_url(key, value)  # type: ignore[arg-type,assignment]
        elif cls is not int and cls is not bool:
            if cls is not float and key in _URL_KEYS:
                value = redact_url_value(key, value)
            try:
                value = private_value(value)
            except Exception:  # a Mapping whose items() raises, say: left to the exporters
                pass
        attributes[key] = value
        if limit is not None and len(attributes) > limit:  # another thread wrote meanwhile
            _evict_past(self, attributes, limit)

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        """Set several attributes (see :meth:`set_attribute`).

        Keys are taken as the SDK takes a mapping's: an empty or ``None`` key is
        dropped and counted, another that is not a string becomes ``str(key)``;
        a dropped key evicts nothing.
        """
        if self._end is not None or not attributes:
            return
        own = self._attributes
        limit = self._tracer._limits.max_attributes
        if limit is not None and len(attributes) >= limit and attributes.__class__ is dict:
            # Only the newest `limit` can stay, every one of them from *attributes*: read
            # just those, from its end (10,000 keys otherwise cost a millisecond).
            newest, _ = newest_good(attributes, limit)
            if len(newest) == limit:
                snapshot = own.copy()  # one C call: another thread may be setting attributes
                stamps = [key for key in snapshot if key in STAMP_KEYS and key not in attributes]
                if stamps:  # the stamps stay, as many new ones go
                    stamped = {key: snapshot[key] for key in stamps}
                    stamped.update(newest)
                    newest, _ = keep_stamps(stamped, limit)
                from_own = sum(1 for key in stamps if key in newest)
                lost = len(attributes) - (len(newest) - from_own)  # bad keys included
                keys: Container[str] = good_keys(attributes)[0]
                lost += _evicted_early(list(snapshot), attributes, keys, limit)
                _install(self, own, newest, keys, lost, limit)
                return
        attributes, bad = good_keys(attributes)
        if bad:
            with _COUNTS:
                self._dropped = getattr(self, "_dropped", 0) + bad
            if not attributes:
                return
        if limit is None or len(own) + len(attributes) <= limit:
            if not own.keys().isdisjoint(attributes):
                for key in attributes:  # keys set again move to the end, as in the SDK
                    own.pop(key, None)
            own.update(_copy_attributes(attributes, True))
            return
        # Past the limit: what setting them one by one would leave (the newest
        # `limit` and the stamps), and its count of drops. *own* is read from a
        # copy (one C call): another thread may be setting attributes meanwhile.
        snapshot = own.copy()
        merged = {key: value for key, value in snapshot.items() if key not in attributes}
        merged.update(attributes)
        merged, _ = keep_stamps(merged, limit)
        lost = sum(1 for key in attributes if key not in merged)
        lost += _evicted_early(list(snapshot), attributes, attributes, limit)
        _install(self, own, merged, attributes, lost, limit)

    def add_event(
        self,
        name: str,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
    ) -> None:
        """Record an event; the oldest is evicted past ``max_events``."""
        if self._end is not None:
            return
        self._add(
            SpanEvent(
                name,
                _copy_attributes(attributes, True),
                _time_ns() if timestamp is None else timestamp,
            )
        )

    def _add(self, event: SpanEvent) -> None:
        events = self._events
        if events is None:
            with _COUNTS:  # two threads' first events: one list, or one thread's are lost
                events = self._events
                if events is None:
                    events = self._events = []
        limit = self._tracer._limits.max_events
        if limit is not None and len(events) >= limit:
            with _COUNTS:  # (the counter is set only when used)
                self._dropped_events = getattr(self, "_dropped_events", 0) + 1
            if not limit:
                return
            del events[0]
        events.append(event)
        if limit is not None and len(events) > limit:  # another thread added meanwhile
            evicted = trim(events, limit)
            with _COUNTS:
                self._dropped_events = getattr(self, "_dropped_events", 0) + evicted

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        """Link to another span's context (ignored when invalid and without attributes)."""
        if self._end is not None or context is None:  # (no context: the SDK ignores it)
            return
        if not context.is_valid and not attributes and not context.trace_state:
            return  # the SDK's rule: kept if valid, or for its attributes or trace state
        links: list[Link] | None = getattr(self, "_links", None)
        if links is None:
            with _COUNTS:  # two threads' first links: one list, or one thread's are lost
                links = getattr(self, "_links", None)
                if links is None:
                    links = self._links = []
        limit = self._tracer._limits.max_links
        if limit is not None and len(links) >= limit:
            with _COUNTS:
                self._dropped_links = getattr(self, "_dropped_links", 0) + 1
            if not limit:
                return
            del links[0]
        links.append(Link(context, _copy_attributes(attributes, True)))
        if limit is not None and len(links) > limit:  # another thread added meanwhile
            evicted = trim(links, limit)
            with _COUNTS:
                self._dropped_links = getattr(self, "_dropped_links", 0) + evicted

    def update_name(self, name: str) -> None:
        """Rename the span (the name is recorded as given, as at the start)."""
        if self._end is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """Set the status; as in the SDK, ``UNSET`` is ignored and ``OK`` is final.

        An ``ERROR`` description (it often quotes an exception: OpenTelemetry's
        ``use_span`` sets ``"<type>: <message>"``) is redacted
        and bounded (:func:`asynctrace._exception_text.redact_exception_text`),
        with the secrets remembered for the exception being handled
        (:func:`error_description`).
        """
        if self._end is not None:
            return
        current = self._status
        if current is not None and current.status_code is _OK:
            return
        if isinstance(status, Status):
            if status.status_code is not _UNSET:
                if status.description and status.status_code is _ERROR:
                    status = Status(_ERROR, error_description(status.description))
                self._status = status
        elif status.__class__ is StatusCode and status is not _UNSET:  # else ignored, as the SDK
            if description and status is _ERROR and isinstance(description, str):
                description = error_description(description)
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Record *exception* as an ``exception`` event (its stack trace is formatted later).

        Its message now, and its stack trace when formatted, are redacted
        (:func:`asynctrace._exception_text.redact_exception_text`): no URL userinfo, secret-like
        query value or credential pair is recorded, nor any secret remembered
        for *exception* by a span it escaped before.
        """
        self._record_exception(exception, attributes, timestamp, escaped, secrets_of(exception))

    def _record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes,
        timestamp: int | None,
        escaped: bool,
        secrets: Collection[str],
    ) -> None:
        if self._end is not None:
            return
        attrs = exception_attributes(exception, "", escaped, secrets)  # "": filled in
        captured = None  # (and redacted) on the export thread
        if attributes:
            attrs.update(_copy_attributes(attributes, True))
        if not attributes or STACKTRACE not in attributes:  # else the caller's own stands
            captured = capture_stack(exception)
        self._add(
            SpanEvent(
                "exception",
                attrs,
                _time_ns() if timestamp is None else timestamp,
                captured,
                secrets,
            )
        )

    # -- end ---------------------------------------------------------------------

    def end(self, end_time: int | None = None) -> None:
        """End the span and hand it to the export queues; later calls do nothing.

        Taking the span out of its provider's open spans is the claim: one
        atomic ``dict.pop``, so of two threads ending it at once (the owner and
        the shutdown's truncation) exactly one queues it. A span the provider
        forgot (past its ``max_open_spans``), or could not track because an open
        span of another trace had its id, is claimed from its own token.
        """
        if self._end is not None:
            return
        opened = self._tracer._provider._open
        if opened.get(self._span_id) is self:  # (not another trace's span of its id)
            if opened.pop(self._span_id, None) is None and not self._reclaim():
                return  # another thread's end() claimed it first (else: just forgotten)
        elif not self._reclaim():
            return
        self.finish(end_time if end_time is not None else _time_ns())

    def _reclaim(self) -> bool:
        """Claim a span its provider forgot (``list.pop``: atomic, so once); else ``False``."""
        token: list[bool] | None = getattr(self, "_forgotten", None)
        if not token:
            return False
        try:
            return token.pop()
        except IndexError:  # claimed by another thread meanwhile
            return False

    def finish(self, end_time: int) -> None:
        """Stamp *end_time* and hand the span to the export queues (the caller claimed it)."""
        self._end = end_time
        provider = self._tracer._provider
        for queue in provider._queued:  # QueuedSpanProcessor._put, inline
            items = queue._queue
            if len(items) < queue._room:  # not full, not closing
                items.append(self)
                if len(items) >= queue._batch_size:
                    if not queue._wake.is_set():
                        queue._wake.set()
                    elif queue._handoff._starved or not len(items) % queue._batch_size:
                        queue.behind()  # batches behind: let it run (see _put)
            else:
                queue._drop(1)
        for put in provider._puts:
            put(self)

    def __enter__(self) -> trace.Span:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """End the span; an exception is recorded and sets ERROR, as the SDK's span does."""
        if exc_val is not None and self._end is None:
            opts = getattr(self, "_opts", 3)
            if opts & 1:
                self.record_exception(exc_val, escaped=True)
            if opts & 2:
                description = f"{type(exc_val).__name__}: {_message(exc_val)}"
                description = redact_exception_text(description, secrets_of(exc_val))
                self.set_status(Status(_ERROR, description))
        self.end()

    def __repr__(self) -> str:
        state = "recording" if self._end is None else "ended"
        return f"<FastSpan {self._name!r} {self._span_id:016x} {state}>"


SPAN_TYPES: set[type] = {FastSpan}
"""The classes whose objects are fast-provider spans (subclasses register here)."""
