"""The fast provider: asynctrace's own OpenTelemetry API ``TracerProvider`` and ``Tracer``.

Installed as the global provider, any OpenTelemetry instrumentation records
through it; its spans (:class:`FastSpan`) are plain slotted objects that
export threads read after they end. Processors are export queues: on
``end()`` a span is appended to each queue and the work (limits, conversion
to the SDK's ``ReadableSpan`` for SDK exporters and processors, encoding)
happens on the queue's thread.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from types import FunctionType
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.util import types

from .._cm import otel_contextmanager
from .._errors import ConfigurationError
from .._forksafe import reinit_at_fork
from .._scopes import SCOPES
from .._span_context import _CONTEXT_VAR
from .._span_errors import redacted_block
from ._ids import IDS, IdGenerator
from ._limits import SpanLimits
from ._sampling import Sampling
from ._span import (
    SPAN_TYPES,
    STAMP_KEYS,
    FastSpan,
    _copy_attributes,
    good_keys,
    keep_stamps,
    newest_good,
)

logger = logging.getLogger("asynctrace")


__all__ = [
    "MAX_OPEN_SPANS",
    "FastTracer",
    "FastTracerProvider",
    "Scope",
    "forget_open_spans",
    "warn_forgotten",
]

MAX_OPEN_SPANS: Final = 100_000
"""How many open spans a provider (or the SDK path's tracker) keeps, by default."""


def forget_open_spans(opened: dict[int, Any], max_open: int) -> list[Any]:
    """Take a tenth of *max_open* out of *opened* (open spans, oldest first): the spans.

    The oldest hundredth (at most 1,000) stays: a job's or a step's umbrella,
    open for the whole run, is among the oldest, while spans that were never
    ended pile up after it. A tenth at a time, so the check on the hot path
    is a length. Another thread may end a span meanwhile: it is then not
    taken.
    """
    keep = min(1_000, max_open // 100)
    taken = []
    for span_id in list(islice(opened, keep, keep + max(1, max_open // 10))):
        span = opened.pop(span_id, None)
        if span is not None:
            taken.append(span)
    return taken


def warn_forgotten(max_open: int, counter: str) -> None:
    """The one warning that open spans were forgotten past *max_open* (see *counter*)."""
    logger.warning(
        "asynctrace: more than %d spans are open (started and never ended?); the "
        "longest-open past the oldest are forgotten: not truncated at shutdown, still "
        "exported if they end (counted in %s)",
        max_open,
        counter,
    )


_INTERNAL = SpanKind.INTERNAL
_time_ns = time.time_ns
_get_running_loop = asyncio._get_running_loop
_current_thread = threading.current_thread
_threads = threading._active  # type: ignore[attr-defined]  # ident -> Thread, as current_thread reads
_get_ident = threading.get_ident
_modules = sys.modules
_SAMPLED = 0x01
_RANDOM = 0x02  # W3C trace-context level 2: the trace id is random (as the SDK sets it)
_LOW_64 = (1 << 64) - 1
_new = object.__new__
_scopes = SCOPES.get


def _root_flags(generator: Any) -> int:
    """A root span's trace flags but sampled: W3C's random-trace-id flag when *generator*
    says its trace ids are random (``is_trace_id_random()``, as the SDK asks it)."""
    is_random = getattr(generator, "is_trace_id_random", None)
    if is_random is None:
        return _RANDOM
    try:
        return _RANDOM if is_random() else 0
    except Exception as exc:
        raise ConfigurationError(
            f"id_generator: its is_trace_id_random() raised {exc!r}; accepted: an id "
            "generator whose is_trace_id_random() returns a bool"
        ) from exc


def _task_getter() -> Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]:
    """``asyncio.current_task(loop)`` as a C call.

    On 3.10 and 3.11 it is a Python function that looks *loop* up in the
    ``_current_tasks`` dict (kept by the C tasks): that dict's ``get`` is the
    same answer without the frame. Later versions have it in C already.
    Callers pass a loop, never ``None`` (the two forms differ there: the
    dict's ``get`` answers ``None``, ``current_task(None)`` looks for a
    running loop).
    """
    current = asyncio.current_task
    tasks = getattr(asyncio.tasks, "_current_tasks", None)
    if isinstance(current, FunctionType) and isinstance(tasks, dict):
        return tasks.get
    return current


current_task_of: Final = _task_getter()
_current_task = current_task_of


# The current OTel context: read straight from its ContextVar when that is the runtime.
_current_context: Callable[[], Mapping[str, object]] = (
    otel_context.get_current if _CONTEXT_VAR is None else _CONTEXT_VAR.get
)


class Scope:
    """The instrumentation scope of a tracer (name, version, schema URL, attributes)."""

    __slots__ = ("attributes", "name", "otlp", "schema_url", "sdk", "version")

    def __init__(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> None:
        self.name = name
        self.version = version
        self.schema_url = schema_url
        self.attributes = dict(attributes) if attributes else None
        self.sdk: Any = None  # the SDK's InstrumentationScope, made by the first conversion
        self.otlp: Any = None  # its OTLP protobuf frame, made by the first encoding

    def __repr__(self) -> str:
        return f"Scope({self.name!r}, {self.version!r})"


def _owner() -> object:
    """The track a span starts on: its asyncio (or trio) task, else its thread."""
    loop = _get_running_loop()
    if loop is not None:
        task = _current_task(loop)
        if task is not None:
            return task
    else:
        trio = _modules.get("trio")
        if trio is not None:
            try:
                if trio.lowlevel.in_trio_task():
                    return trio.lowlevel.current_task()
            except Exception:  # RuntimeError outside trio, or an unexpected trio
                pass
    return _current_thread()


_STAMP_ORDER: Final = tuple(sorted(STAMP_KEYS))


def _newest_and_stamps(
    attributes: Mapping[Any, Any], limit: int, bad: int = 0
) -> tuple[dict[str, Any], int]:
    """The newest *limit* of *attributes* and, whatever their age, the stamp keys among
    them (:data:`~._span.STAMP_KEYS`), with how many were left out (plus *bad*, the keys
    dropped already). The rare path: a span given more than its limit."""
    own = {key: attributes[key] for key in _STAMP_ORDER if key in attributes}
    if attributes.__class__ is dict:
        # the newest `limit` with keys a span keeps, read from the end: bad keys
        # evict nothing, and 10,000 keys cost `limit` steps
        kept, extra = newest_good(attributes, limit)
    else:  # keys a span keeps only (good_keys): the newest, as the SDK keeps them
        kept = dict(islice(attributes.items(), len(attributes) - limit, None))
        extra = len(attributes) - limit
    extra += bad
    if own:  # the span's own stamps count as stamps: kept with their own values
        extra -= len(own.keys() - kept.keys())
        kept.update(own)
    return kept, extra


class FastTracer(trace.Tracer):
    """A tracer of :class:`FastTracerProvider` (get one with ``provider.get_tracer``)."""

    __slots__ = ("_limits", "_max_attributes", "_provider", "scope")

    def __init__(self, provider: FastTracerProvider, scope: Scope) -> None:
        self._provider = provider
        self._limits = provider.limits
        limit = provider.limits.max_attributes
        self._max_attributes = sys.maxsize if limit is None else limit  # one test per span
        self.scope = scope

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = _INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        """Start a span (not made current), child of the span in *context* (default: current).

        *attributes* are copied (see :meth:`FastSpan.set_attributes` for keys).
        Inside :func:`~asynctrace.iteration_scope` and the task and session
        scopes the span carries their stamps (``rl.iteration``,
        ``rl.task_id``, ``rl.session_id``) under *attributes*: a key given in
        *attributes* keeps its value, and past ``max_attributes`` the stamps
        are kept as on asynctrace's own spans. URL attributes (``url.full``...)
        are redacted, as on every span of this provider (see
        :func:`~._span.url_redacted`); *name* is recorded as given.
        """
        extra = 0
        if attributes:
            limit = self._limits.max_attributes
            if limit is not None and len(attributes) > limit and attributes.__class__ is dict:
                attributes, extra = _newest_and_stamps(attributes, limit)
            else:
                attributes, extra = good_keys(attributes)  # before the limit: evict nothing
                if limit is not None and len(attributes) > limit:
                    attributes, extra = _newest_and_stamps(attributes, limit, extra)
        scopes = _scopes()
        stamps = scopes._stamps
        if stamps is None:
            stamps = scopes.stamps
        if stamps:  # in a scope: its stamps first, the span's own attributes over them
            attributes = {**stamps, **attributes} if attributes else stamps
        span = self.start_owned(
            name, context, _copy_attributes(attributes), None, kind, links, start_time
        )
        if extra and isinstance(span, FastSpan):
            span._dropped += extra  # past the limit, the stamps may have dropped more
        if not (record_exception and set_status_on_exception) and isinstance(span, FastSpan):
            span._opts = (1 if record_exception else 0) | (2 if set_status_on_exception else 0)
        return span

    def start_owned(
        self,
        name: str,
        context: Mapping[str, object] | None,
        attributes: dict[str, Any],
        span: FastSpan | None = None,
        kind: SpanKind = _INTERNAL,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
    ) -> trace.Span:
        """:meth:`start_span` for a private *attributes* dict the span may keep as it is.

        *span*, when given, is a blank :class:`FastSpan` (of a subclass) to
        fill in instead of a new one; it is not used if the span is not sampled.
        """
        provider = self._provider
        parent = (context if context is not None else _current_context()).get(_SPAN_KEY)
        bits = provider._bits
        if parent is None:
            trace_id = bits(128) or 1
            parent_id = 0
            remote = False
            flags = provider._root_flags
            state = None
            sampled: int | bool = trace_id & _LOW_64 < provider._bound
        elif parent.__class__ in SPAN_TYPES:
            try:
                trace_id = parent._trace_id  # type: ignore[attr-defined]
            except AttributeError:  # not started (a managed_span not entered): what it stands for
                stands_for = NonRecordingSpan(parent.get_span_context())  # type: ignore[attr-defined]
                return self.start_owned(
                    name, {_SPAN_KEY: stands_for}, attributes, span, kind, links, start_time
                )
            parent_id = parent._span_id  # type: ignore[attr-defined]
            remote = False
            flags = parent._flags  # type: ignore[attr-defined]
            state = parent._state  # type: ignore[attr-defined]
            sampled = (  # an int: truthy when sampled
                flags & _SAMPLED
                if provider._parent_based
                else (trace_id & _LOW_64 < provider._bound)
            )
        else:
            parent_context = parent.get_span_context()  # type: ignore[attr-defined]
            if parent_context is not None and parent_context.is_valid:
                trace_id = parent_context.trace_id
                parent_id = parent_context.span_id
                remote = parent_context.is_remote
                raw = int(parent_context.trace_flags)
                flags = raw & 0x03  # sampled, random: as the SDK
                if raw != flags | _SAMPLED:  # the parent's own: kept for its exported context
                    if span is None:
                        span = _new(FastSpan)
                    span._parent_flags = raw
                state = parent_context.trace_state or None
                sampled = (
                    flags & _SAMPLED
                    if provider._parent_based
                    else (trace_id & _LOW_64 < provider._bound)
                )
            else:
                trace_id = bits(128) or 1
                parent_id = 0
                remote = False
                flags = provider._root_flags
                state = None
                sampled = trace_id & _LOW_64 < provider._bound
        span_id = bits(64) or 1
        if not sampled or provider._closed:
            return NonRecordingSpan(
                SpanContext(trace_id, span_id, False, TraceFlags(flags & ~_SAMPLED), state or None)
            )
        limit = self._max_attributes
        if len(attributes) > limit:
            return self._start_trimmed(
                name, trace_id, span_id, flags, state, parent_id, remote, kind, attributes,
                links, start_time, limit, span,
            )  # fmt: skip
        # FastSpan.__init__, inline: one frame less per span.
        if span is None:
            span = _new(FastSpan)
        span._tracer = self
        span._name = name
        span._trace_id = trace_id
        span._span_id = span_id
        span._flags = flags | _SAMPLED
        span._state = state
        span._parent_id = parent_id
        span._parent_remote = remote
        span._kind = kind
        span._attributes = attributes
        span._dropped = 0  # always set: its readers (OTLP, conversion) then pay no exception
        span._start = _time_ns() if start_time is None else start_time
        if provider._wants_owner:  # the chrome exporter's track: task, else thread
            loop = _get_running_loop()
            if loop is not None:
                owner = _current_task(loop)
            elif "trio" in _modules:
                owner = None
            else:  # threading.current_thread(), without its frame
                owner = _threads.get(_get_ident())
            span._owner = owner if owner is not None else _owner()
        else:
            span._owner = None
        span._end = span._events = span._status = span._context = None  # the rest: on demand
        if links:
            for link in links:
                if link is not None:  # (the SDK skips None)
                    span.add_link(link.context, link.attributes)
        opened = provider._open
        opened[span_id] = span
        if len(opened) > provider._max_open:
            provider._forget()
        return span

    def _start_trimmed(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        flags: int,
        state: Any,
        parent_id: int,
        remote: bool,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: Sequence[Link] | None,
        start_time: int | None,
        limit: int,
        span: FastSpan | None,
    ) -> FastSpan:
        """A span given more attributes than the limit: it keeps the newest, as the SDK does,
        and asynctrace's stamps (:data:`~._span.STAMP_KEYS`), which the SDK would evict first.

        *span* is the blank to fill (a :class:`ManagedSpan`, say), or ``None``.
        A key the span cannot keep is dropped first, and evicts nothing.
        """
        good, bad = good_keys(attributes)
        attributes = good if good.__class__ is dict else dict(good)  # (a dict, given one)
        kept, dropped = keep_stamps(attributes, limit)  # the newest, and asynctrace's stamps
        if span is None:
            span = _new(FastSpan)
        FastSpan.__init__(
            span,
            self,
            name,
            trace_id,
            span_id,
            flags | _SAMPLED,
            state,
            parent_id,
            remote,
            kind,
            kept,
            _time_ns() if start_time is None else start_time,
            _owner() if self._provider._wants_owner else None,
        )
        span._dropped = dropped + bad
        if links:
            for link in links:
                if link is not None:  # (the SDK skips None)
                    span.add_link(link.context, link.attributes)
        provider = self._provider
        provider._open[span_id] = span
        if len(provider._open) > provider._max_open:
            provider._forget()
        return span

    @otel_contextmanager
    def start_as_current_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = _INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        """Start a span and make it current for the block (also a decorator).

        An exception escaping the block is recorded as OpenTelemetry's
        ``use_span`` records it, but redacted as asynctrace's own spans record
        it: message, stack trace and status description, with the secrets
        remembered for it.
        """
        span = self.start_span(
            name, context, kind, attributes, links, start_time, record_exception,
            set_status_on_exception,
        )  # fmt: skip
        yield from redacted_block(span, end_on_exit, record_exception, set_status_on_exception)


class FastTracerProvider(trace.TracerProvider):
    """asynctrace's OpenTelemetry API tracer provider, built for cost.

    Spans are compact slotted objects with no locks; ids come from a
    per-process generator (independent of ``random.seed``, reseeded after
    ``fork``); ``end()`` only appends the span to each export queue.
    :func:`asynctrace.configure` builds one (``provider="fast"``, the default)
    and connects the exporters; SDK ``SpanProcessor`` objects can be added
    with :meth:`add_span_processor` (they run on an export thread, see the
    docs).

    Args:
        resource: the resource (an SDK ``Resource`` or anything with
            ``attributes``); exported with every span.
        sampling: the sampling policy (default: always on, parent based).
        limits: span limits (default: OpenTelemetry's).
        id_generator: where ids come from (default: the process's). Root spans
            carry W3C's random-trace-id flag if its ``is_trace_id_random()``
            says so (asked once), as in the SDK.
        max_open_spans: how many started, not yet ended spans it keeps track of
            (to end them, tagged truncated, at shutdown). Past it a tenth
            is forgotten at a time, the oldest hundredth excepted: counted in
            :attr:`forgotten_spans`, said once in a warning, not truncated at
            shutdown, and still exported if they end later. A positive int.

    Example:
        >>> provider = FastTracerProvider()
        >>> with provider.get_tracer("demo").start_as_current_span("work") as span:
        ...     span.set_attribute("items", 3)
    """

    def __init__(
        self,
        resource: Any = None,
        *,
        sampling: Sampling | None = None,
        limits: SpanLimits | None = None,
        id_generator: IdGenerator | None = None,
        max_open_spans: int = MAX_OPEN_SPANS,
    ) -> None:
        if (
            isinstance(max_open_spans, bool)
            or not isinstance(max_open_spans, int)
            or max_open_spans < 1
        ):
            raise ConfigurationError(
                f"max_open_spans: {max_open_spans!r} is not accepted; expected a positive int"
            )
        self.resource = resource
        self.sampling = sampling if sampling is not None else Sampling()
        self.limits = limits if limits is not None else SpanLimits()
        self.id_generator = id_generator if id_generator is not None else IDS
        self._bits: Callable[[int], int] = getattr(self.id_generator, "bits", None) or (
            self._generated_bits
        )
        self._root_flags = _root_flags(self.id_generator)
        self._bound = self.sampling.bound
        self._parent_based = self.sampling.parent_based
        self._open: dict[int, FastSpan] = {}
        self._max_open = max_open_spans
        self.forgotten_spans = 0
        """Open spans forgotten past ``max_open_spans`` (never ended, most likely)."""
        self._warned_forgotten = False
        self._puts: tuple[Callable[[FastSpan], None], ...] = ()
        self._queued: tuple[Any, ...] = ()  # QueuedSpanProcessor objects: appended to inline
        self._queues: list[Any] = []  # what add_queue/add_span_processor connected
        self._wants_owner = False
        self._closed = False
        self._lock = threading.Lock()
        reinit_at_fork(self._lock)  # held by another thread at fork(): made new in the child

    def _generated_bits(self, count: int) -> int:
        """Ids from an SDK-style generator (``generate_trace_id``/``generate_span_id``)."""
        generator: Any = self.id_generator
        return int(generator.generate_trace_id() if count == 128 else generator.generate_span_id())

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> FastTracer:
        """A tracer for the instrumentation scope *instrumenting_module_name*.

        No name (``None`` or empty) is logged and taken as ``""``, and no
        version is ``""``, as the SDK does.
        """
        if not instrumenting_module_name or not isinstance(instrumenting_module_name, str):
            logger.error("get_tracer called with missing module name.")
            instrumenting_module_name = ""
        if instrumenting_library_version is None:
            instrumenting_library_version = ""
        return FastTracer(
            self,
            Scope(
                instrumenting_module_name, instrumenting_library_version, schema_url, attributes
            ),
        )

    # -- export queues -------------------------------------------------------------

    def add_queue(self, queue: Any, *, tracks: bool = False) -> None:
        """Hand every ended span to *queue*, an export queue of asynctrace's.

        *queue* is a ``QueuedSpanProcessor`` (its bounded deque is appended to
        on the ending thread) or any object with ``put(span)`` (which must only
        queue), ``force_flush(timeout_millis)`` and ``shutdown()``. *tracks*
        asks for each span's starting task or thread (``span._owner``), which
        the chrome exporter draws tracks from.
        """
        with self._lock:
            if hasattr(queue, "_queue") and hasattr(queue, "_max_queue_size"):
                self._queued = (*self._queued, queue)
            else:
                self._puts = (*self._puts, queue.put)
            self._queues.append(queue)
            self._wants_owner = self._wants_owner or tracks

    def add_span_processor(self, span_processor: Any) -> None:
        """Run an SDK ``SpanProcessor`` on every ended span, on an export thread.

        Spans reach it as SDK ``ReadableSpan`` objects: ``on_start`` and
        ``on_end`` are both called when the span has ended, on that thread;
        ``on_start`` may change its own copy, which ``on_end`` then receives
        (``export._adapters.StartingSpan``).
        """
        from ..export._adapters import processor_queue

        self.add_queue(processor_queue(span_processor, self))

    def queues(self) -> list[Any]:
        """The export queues connected so far (a copy).

        Taken without the lock: only appended to, and ``list()`` of a list is one
        step under the interpreter lock, so a flush from a signal handler that
        interrupted :meth:`add_queue` cannot wait on its own thread.
        """
        return list(self._queues)

    def open_spans(self) -> list[FastSpan]:
        """Spans started and not ended yet (a copy)."""
        return list(self._open.copy().values())

    def _forget(self) -> None:
        """Forget open spans past ``max_open_spans`` (:func:`forget_open_spans`).

        Each keeps a claim token, so that ending it later still exports it once.
        """
        taken = forget_open_spans(self._open, self._max_open)
        for span in taken:
            span._forgotten = [True]
        self.forgotten_spans += len(taken)
        if taken and not self._warned_forgotten:
            self._warned_forgotten = True
            warn_forgotten(self._max_open, "the provider's forgotten_spans")

    def end_open_spans(self, attribute: str) -> int:
        """End every open span now with *attribute* = true, latest first; returns how many.

        Each span is claimed first (taken out of the open spans, as ``end()``
        does), so a span its owner ends at the same moment is queued once,
        and the attribute is set before any export thread can see the span.
        """
        spans = sorted(self.open_spans(), key=lambda span: span._start, reverse=True)
        now = _time_ns()
        ended = 0
        for span in spans:
            if self._open.pop(span._span_id, None) is None:
                continue  # its owner ended it meanwhile
            span.set_attribute(attribute, True)
            span.finish(max(now, span._start))
            ended += 1
        return ended

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything ended so far; ``False`` if a queue did not finish in time."""
        deadline = time.monotonic() + timeout_millis / 1000.0
        ok = True
        for queue in list(self._queues):
            left = max(0.0, deadline - time.monotonic())
            ok = bool(queue.force_flush(int(left * 1000))) and ok
        return ok

    def shutdown(self) -> None:
        """Stop recording (new spans are non-recording) and shut every queue down."""
        self._closed = True
        for queue in list(self._queues):
            queue.shutdown()
