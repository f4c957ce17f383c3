"""The fast provider's tracer: it starts the spans (:class:`~._span.FastSpan`).

:class:`FastTracer` is the hot path of :class:`~._tracer_provider.FastTracerProvider`:
a span's ids, sampling, scope stamps and owning task, with no lock taken.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FunctionType
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.util import types

from .._cm import otel_contextmanager
from .._scopes import SCOPES
from .._span_context import _CONTEXT_VAR
from .._span_errors import redacted_block
from ._evict import keep_stamps
from ._evict import newest_and_stamps as _newest_and_stamps  # (start_span reads this name)
from ._span import SPAN_TYPES, FastSpan, _copy_attributes, good_keys

if TYPE_CHECKING:
    from ._tracer_provider import FastTracerProvider, Scope

__all__ = ["FastTracer", "current_task_of"]

_INTERNAL = SpanKind.INTERNAL
_time_ns = time.time_ns
_get_running_loop = asyncio._get_running_loop
_current_thread = threading.current_thread
_threads = threading._active  # type: ignore[attr-defined]  # ident -> Thread, as current_thread reads
_get_ident = threading.get_ident
_modules = sys.modules
_SAMPLED = 0x01
_LOW_64 = (1 << 64) - 1
_new = object.__new__
_scopes = SCOPES.get


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


def _collided(span: FastSpan) -> None:
    """*span*'s id is an open span's of another trace (an id generator that repeats span
    ids across traces, as the specification allows): it is claimed from a token, as a
    forgotten span is, so ending it exports it and the other span keeps its place. It
    is counted in ``forgotten_spans``: like those, if still open at shutdown it is not
    ended there."""
    span._forgotten = [True]
    span._tracer._provider.forgotten_spans += 1


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
            name, context, _copy_attributes(attributes, True), None, kind, links, start_time
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
        if span_id in opened:  # an open span of another trace has its id: see _collided
            _collided(span)
        else:
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
        and asynctrace's stamps (:data:`~._evict.STAMP_KEYS`), which the SDK would evict first.

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
        if span_id in provider._open:
            _collided(span)
        else:
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
