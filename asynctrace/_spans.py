"""Leaf and umbrella spans, instants, and the shared disabled span."""

from __future__ import annotations

import asyncio
import itertools
import time
import traceback
from collections.abc import Collection, Mapping, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
)
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from . import _groups, _stalls
from ._cm import SyncAndAsync
from ._errors import report_internal_error
from ._fast import FastSpan, FastTracer
from ._fast._span import NONFINITE, SPAN_TYPES, note_floats, private_value
from ._groups import Bucket
from ._profiling import _PROFILER, ProfiledSpan
from ._redact import redact_text, remember, secrets_of
from ._scopes import SCOPES, ScopeState
from ._semconv import CANCELLED, GROUP, RL_BUCKET, RL_ITERATION
from ._span_errors import redacting
from ._stalls import notice_loop
from ._state import GATE

__all__ = ["instant", "managed_span", "umbrella_span"]


def _span_key() -> str:
    """The context key OpenTelemetry keeps the current span under."""
    from opentelemetry.trace.propagation import _SPAN_KEY as key

    return key


Attributes = Mapping[str, AttributeValue]

# Span shapes; they decide the bucket.
LEAF: Final = 0
UMBRELLA: Final = 1
EFFICIENCY: Final = 2
MARKER: Final = 3  # instant()'s zero-length span: unbucketed, names no group

PER_PROMPT_GROUP: Final = _groups.PER_PROMPT


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


class _NoopSpanCM:
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


NOOP_CM: Final = _NoopSpanCM()


def is_on(group: str) -> bool:
    """The gate: is *group* (or ``per_prompt`` inside a per-prompt scope) enabled?"""
    enabled = GATE.enabled
    if not enabled:
        return False
    try:  # free unless it raises (a group no set can hold: a list)
        if (checked := PER_PROMPT_GROUP if SCOPES.get().per_prompt else group) in enabled:
            return True
    except Exception as exc:
        bad_group(group, exc)
        return False
    if GATE.audit is not None:
        GATE.audit(checked)
    return False


def resolve_bucket(group: str, shape: int, explicit: object) -> Bucket | None:
    """Apply the bucket rules of the spec to one span about to start."""
    return _resolve_bucket(SCOPES.get(), group, shape, explicit)


def _resolve_bucket(state: ScopeState, group: str, shape: int, explicit: object) -> Bucket | None:
    if shape in (UMBRELLA, MARKER) or state.per_prompt:
        return None
    if shape == EFFICIENCY:  # the category's bucket, computed by the caller
        return explicit if isinstance(explicit, Bucket) else None
    definition = _groups._REGISTRY.groups.get(group)
    if definition is None or definition.bucket is None:
        return None  # an umbrella group's spans are umbrellas
    if explicit is not None:
        if isinstance(explicit, Bucket):
            return explicit
        report_internal_error(
            ("bucket", _site(group)), TypeError(f"bucket={explicit!r} is not a Bucket")
        )
    scoped = state.bucket
    if scoped is not None:
        return scoped
    bucket = definition.bucket
    return bucket if isinstance(bucket, Bucket) else None


def group_stamp(group: str, shape: int) -> str | None:
    """The ``asynctrace.group`` an unbucketed span carries, or ``None``.

    Umbrellas (and other unbucketed spans) name their group, so a reader can
    tell a step from any other span whatever scopes were open; per-item spans
    (per-prompt, HTTP) do not, to keep their volume cheap, nor do efficiency
    spans, which carry their category, nor ``instant`` markers, which are
    points in time, not spans of the group's work.
    """
    return _group_stamp(SCOPES.get(), group, shape)


def _group_stamp(state: ScopeState, group: str, shape: int) -> str | None:
    if shape in (EFFICIENCY, MARKER) or state.per_prompt:
        return None
    definition = _groups._REGISTRY.groups.get(group)
    return group if definition is None or not definition.per_item else None


def build_attributes(
    user: Attributes | None, bucket: Bucket | None, group: str | None = None
) -> Attributes | None:
    """Scope stamps first, then the caller's attributes (which win).

    Without stamps, the caller's mapping is returned as it is: the SDK copies
    attributes when a span or event takes them, so no copy is needed here.
    """
    stamps = SCOPES.get().stamps
    if not stamps and bucket is None and group is None:
        if not user or RL_BUCKET not in user:
            return user
        return {k: v for k, v in user.items() if k != RL_BUCKET}  # no bucket: never a raw one
    return _merge(_base(stamps, bucket, group), user, bucket)


def _base(
    stamps: dict[str, AttributeValue], bucket: Bucket | None, group: str | None
) -> dict[str, AttributeValue]:
    """The stamps of a span: group, iteration, task, session, bucket (in this order)."""
    attrs: dict[str, AttributeValue] = {GROUP: group} if group is not None else {}
    attrs.update(stamps)
    if bucket is not None:  # _value_: the member's plain field (.value is a Python property)
        attrs[RL_BUCKET] = bucket._value_
    return attrs


def _merge(
    attrs: dict[str, AttributeValue], user: Attributes | None, bucket: Bucket | None
) -> dict[str, AttributeValue]:
    """The caller's attributes over the stamps (*attrs*, changed in place)."""
    if user:
        attrs.update(user)
        # Strings, ints and bools (nearly every attribute) need nothing more: one
        # pass in C says so, without building the set of their types.
        if RL_BUCKET in user or not _COPIED.isdisjoint(map(type, user.values())):
            _settle(attrs, user, bucket)
    return attrs


def _settle(attrs: dict[str, AttributeValue], user: Attributes, bucket: Bucket | None) -> None:
    """After the caller's attributes went over the stamps: suspects, then the bucket rules.

    In that order: a list the caller gave as ``rl.bucket`` is made a tuple
    first and then overruled like any other raw value.
    """
    if not _COPIED.isdisjoint(map(type, user.values())):
        _suspects(attrs, user)
    if RL_BUCKET in user:  # the bucket rules decide, never a raw attribute
        if bucket is None:
            del attrs[RL_BUCKET]
        else:
            attrs[RL_BUCKET] = bucket._value_


def _suspects(attrs: dict[str, AttributeValue], user: Attributes) -> None:
    """The caller's containers are copied (lists become tuples); a NaN or an infinity is
    noted. A list or dict the caller changes later changes nothing recorded."""
    for key, value in user.items():
        cls = value.__class__
        if cls is _LIST or cls is tuple or cls is dict:
            attrs[key] = private_value(value)
    if not NONFINITE[0]:
        note_floats(user.values())


_LIST: Final = list
# Attribute value types that need more than a store: containers to copy, floats to note.
_COPIED: Final = frozenset({float, tuple, _LIST, dict})
_generation = 0  # bumped when the registry changes: cached stamps are then stale
# (group or (shape, group), per_prompt, scoped bucket) -> (bucket, group stamp, generation)
_RULES: dict[tuple[Any, bool, Bucket | None], tuple[Bucket | None, str | None, int]] = {}
_MAX_RULES: Final = 4096
_MAX_SHAPES: Final = 256  # entries of one scope state's cache (a few in practice)


def _registry_changed() -> None:
    global _generation
    _generation += 1


_groups.add_registry_listener(_registry_changed)


def span_attributes(
    group: str, shape: int, user: Attributes | None, explicit: object
) -> dict[str, AttributeValue]:
    """:func:`resolve_bucket`, :func:`group_stamp` and :func:`build_attributes` at once.

    The same rules and key order, for the hot path: the stamps of a (group,
    shape) are computed once per scope state and cached on it; the result is
    always a new dict the span may keep (the caller's list values become
    tuples).
    """
    state = SCOPES.get()
    if explicit is not None:  # rare: no cache
        bucket = _resolve_bucket(state, group, shape, explicit)
        stamp = None if bucket is not None else _group_stamp(state, group, shape)
        return _merge(_base(state.stamps, bucket, stamp), user, bucket)
    key = group if shape == LEAF else (shape, group)
    entry = state.cache.get(key)
    if entry is None or entry[2] != _generation:
        # A new state (a scope entered, scopes restored from a carrier): its bucket and
        # group stamp depend only on the span's shape, per_prompt and the scoped bucket.
        rules_key = (key, state.per_prompt, state.bucket)
        rules = _RULES.get(rules_key)
        if rules is None or rules[2] != _generation:
            bucket = _resolve_bucket(state, group, shape, None)
            stamp = None if bucket is not None else _group_stamp(state, group, shape)
            if len(_RULES) >= _MAX_RULES:  # group names made up per span: stay bounded
                _RULES.clear()
            rules = _RULES[rules_key] = (bucket, stamp, _generation)
        # _base(state.stamps, ...), inline: a new state often starts a single span.
        bucket, stamp = rules[0], rules[1]
        attrs: dict[str, AttributeValue] = {GROUP: stamp} if stamp is not None else {}
        stamps = state._stamps
        attrs.update(stamps if stamps is not None else state.stamps)
        if bucket is not None:
            attrs[RL_BUCKET] = bucket._value_
        cache = state.cache
        if len(cache) >= _MAX_SHAPES:  # the same, for one long-lived scope state
            cache.clear()
        cache[key] = (attrs, bucket, _generation)
        attrs = attrs.copy()
    else:
        attrs = entry[0].copy()
        bucket = entry[1]
    if user:  # _merge, inline
        attrs.update(user)
        if RL_BUCKET in user or not _COPIED.isdisjoint(map(type, user.values())):
            _settle(attrs, user, bucket)
    return attrs


def start(
    name: str,
    group: str,
    shape: int,
    attributes: Attributes | None,
    bucket: Bucket | None,
    start_time: int | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    context: otel_context.Context | None = None,
    links: Sequence[Link] | None = None,
) -> Span | None:
    """Start (but do not attach) a span; ``None`` if anything failed."""
    try:
        tracer = GATE.tracer
        if tracer is None:
            return None
        if shape == UMBRELLA and GATE.loop_stall and _get_running_loop() is not _stalls._last:
            notice_loop()  # an umbrella (a step) starts: watch this thread's event loop
        attrs = span_attributes(group, shape, attributes, bucket)
        if tracer.__class__ is FastTracer:
            return tracer.start_owned(name, context, attrs, None, kind, links, start_time)
        # positional: the API's parameter order, cheaper than keywords per span;
        # an SDK span records exceptions redacted, as a fast one does
        return redacting(tracer.start_span(name, context, kind, attrs, links, start_time))
    except Exception as exc:
        report_internal_error(("start", _site(group)), exc, _named(name))  # names vary
        return None


def _context_var() -> ContextVar[otel_context.Context] | None:
    """OpenTelemetry's context variable, when the runtime context is the ContextVar one.

    Setting it is what ``otel_context.attach`` does then; doing it here saves
    that function's layers on every span. Any other runtime context goes
    through the API.
    """
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    if type(runtime) is not ContextVarsRuntimeContext:
        return None
    var = getattr(runtime, "_current_context", None)
    return var if isinstance(var, ContextVar) else None


_CONTEXT_VAR: Final = _context_var()
_SPAN_KEY: Final = _span_key()
_Context: Final = otel_context.Context
_time_ns: Final = time.time_ns
_get_running_loop: Final = asyncio._get_running_loop
_new: Final = object.__new__
_INTERNAL: Final = SpanKind.INTERNAL


def attach(span: Span) -> object | None:
    """Make *span* current; returns the token or ``None`` on failure."""
    try:
        var = _CONTEXT_VAR
        if var is None:
            return otel_context.attach(trace.set_span_in_context(span))
        values = var.get().copy()  # set_span_in_context, without its layers
        values[_SPAN_KEY] = span
        return var.set(_Context(values))
    except Exception as exc:
        report_internal_error(("attach", type(span).__name__), exc)
        return None


def _named(name: object) -> str:
    """A span's name for a failure message: redacted, never raising."""
    try:
        return "span " + redact_text(name) if isinstance(name, str) else ""
    except Exception:
        return ""


def _site(group: object) -> object:
    """*group* as part of a failure's call site, which must hash: a non-str by its type."""
    return group if group.__class__ is str else f"<{type(group).__name__}>"


def bad_group(group: object, exc: Exception) -> None:
    """The gate's look-up of *group* raised *exc* (a list, say): reported once per type.

    Only the group's type is told: the object may hold anything. Its span is
    not recorded (the helper yields the disabled span).
    """
    if isinstance(group, str):  # not the group's doing: the gate's audit failed
        report_internal_error(("gate", group), exc)
        return
    error = TypeError(
        f"span group: expected a group name (a str), got a {type(group).__name__}; "
        "the span is not recorded"
    )
    error.__cause__ = exc
    report_internal_error(("group", _site(group)), error)


def current_context() -> otel_context.Context:
    """The current OpenTelemetry context (to :func:`attach_context` again later)."""
    var = _CONTEXT_VAR
    return var.get() if var is not None else otel_context.get_current()


def attach_context(context: otel_context.Context) -> object | None:
    """Make *context* current; returns the token (for :func:`detach`) or ``None`` on failure."""
    try:
        var = _CONTEXT_VAR
        return var.set(context) if var is not None else otel_context.attach(context)
    except Exception as exc:
        report_internal_error(("attach", "context"), exc)
        return None


def detach(token: object | None) -> None:
    """Undo :func:`attach`."""
    if token is None:
        return
    try:
        var = _CONTEXT_VAR
        if var is None:
            otel_context.detach(token)  # type: ignore[arg-type]
        else:
            var.reset(token)  # type: ignore[arg-type]
    except Exception as exc:  # a token of another context (a generator resumed elsewhere)
        report_internal_error(("detach",), exc)


def finish(
    span: Span,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    end_time: int | None = None,
    secrets: Collection[str] = (),
) -> None:
    """Record how the block ended and end *span*; never raises."""
    if exc_type is not None:
        try:
            mark_exit(span, exc_type, exc, secrets)
        except Exception as err:  # the span still ends
            report_internal_error(("exit", type(span).__name__), err)
    try:
        span.end(end_time)
    except Exception as err:
        report_internal_error(("end", type(span).__name__), err)


def mark_exit(
    span: Span,
    exc_type: type[BaseException],
    exc: BaseException | None,
    secrets: Collection[str] = (),
) -> None:
    """Exceptions are errors; cancellation and other BaseExceptions are not.

    What is recorded of the exception (message, stack trace, status
    description) is redacted first (:func:`~asynctrace._redact.redact_text`),
    with *secrets* replaced too, and any secrets remembered for *exc*.
    """
    if issubclass(exc_type, Exception):
        if exc is not None:
            if secrets:
                remember(exc, secrets)  # the spans around this one record it too
            secrets = secrets_of(exc) or secrets
            try:
                record_exception(span, exc, secrets)
            except Exception as err:  # str(exc) may raise: the status is still set
                report_internal_error(("record_exception", exc_type.__name__), err)
        description = redact_text(f"{exc_type.__name__}: {_text(exc)}", secrets)
        span.set_status(Status(StatusCode.ERROR, description))
    else:
        span.set_attribute(CANCELLED, True)


def record_exception(span: Span, exc: BaseException, secrets: Collection[str] = ()) -> None:
    """Record *exc* as an escaped ``exception`` event, redacted, on any provider's span.

    A fast-provider span formats the stack trace on its export thread and
    redacts it there; any other span (the SDK's) gets the event the SDK's own
    ``record_exception`` would add, with message and stack trace redacted.
    """
    if span.__class__ in SPAN_TYPES:
        span._record_exception(exc, None, None, True, secrets)  # type: ignore[attr-defined]
        return
    if not span.is_recording():
        return
    cls = type(exc)
    module = cls.__module__
    try:
        stacktrace = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
    except Exception as err:  # a broken __str__ in the chain, say
        stacktrace = f"<stack trace unavailable: {type(err).__name__}>"
    span.add_event(
        "exception",
        {
            "exception.type": f"{module}.{cls.__qualname__}"
            if module and module != "builtins"
            else cls.__qualname__,
            "exception.message": redact_text(_text(exc), secrets),
            "exception.stacktrace": redact_text(stacktrace, secrets),
            "exception.escaped": "True",
        },
    )


def _text(exc: BaseException | None) -> str:
    """``str(exc)``, or a placeholder when its ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


class LiveSpan(SyncAndAsync[Span]):
    """Context manager of an enabled span: starts, attaches, detaches, ends.

    Used on any provider but the fast one (which has :class:`ManagedSpan`).
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
        self._token: Any = None  # the context token (a _Reentered while refused entries are open)

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
            ("reenter", _site(self._group)),
            RuntimeError("this managed_span() was entered already; make a new one"),
        )
        if self._span is not _DONE:  # entered while open: its exit must end nothing
            token = self._token
            if token.__class__ is _Reentered:
                token.count += 1
            else:
                self._token = _Reentered(token)
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
            if token.__class__ is _Reentered and token.count and take_refused(self):
                token.count -= 1  # a refused entry exiting after the first entry did
            return
        token = self._token
        if token.__class__ is _Reentered:  # a `with` on this object while it was open
            if token.count and take_refused(self):
                token.count -= 1
                return  # the exit of that refused entry: the span goes on
            # The first entry's exit: refused entries still open (in other tasks) keep
            # the marker, with nothing left under it to exit again.
            reentered, token = token, token.previous
            self._token = reentered if reentered.count else None
            reentered.previous = None
        else:
            self._token = None
        self._span = _DONE
        detach(token)
        finish(span, exc_type, exc)


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


class ManagedSpan(FastSpan, SyncAndAsync[Span]):
    """A fast-provider span of :func:`managed_span` / :func:`umbrella_span`.

    The object is both the context manager and (once entered, if sampled) the
    span: ``__enter__`` starts it in place, makes it current and returns it;
    ``__exit__`` detaches it and ends it. One object per span instead of two.
    Like the spans it stands for, it is entered once; entering it again yields
    the shared disabled span.
    """

    __slots__ = ("_bucket", "_group", "_other", "_shape", "_token")
    _bucket: Bucket | None
    _group: str
    _other: Any  # a LiveSpan (reconfigured since), the non-recording span, or None
    _shape: int
    _token: Any

    def __enter__(self) -> Span:
        if self._token is not None:
            return self._refuse()
        try:
            tracer = GATE.tracer
            var = _CONTEXT_VAR  # not None: _managed makes ManagedSpan objects only then
            if tracer.__class__ is not FastTracer or var is None:  # reconfigured since
                self._token = _DONE
                live = self._other = _live(
                    self._group, self._name, self._shape, self._attributes, self._bucket
                )
                return live.__enter__()
            group, shape, user = self._group, self._shape, self._attributes
            state = SCOPES.get()  # span_attributes' cached case, inline
            entry = state.cache.get(group if shape == LEAF else (shape, group))
            if entry is None or entry[2] != _generation or self._bucket is not None or user:
                attrs = span_attributes(group, shape, user, self._bucket)
            else:
                attrs = entry[0].copy()
            context = var.get()  # the parent comes from it, and the new context copies it
            span = tracer.start_owned(self._name, context, attrs, self)
            if span is not self:
                self._other = span  # not sampled: a non-recording span carries the context on
            values = context.copy()  # set_span_in_context, without its layers
            values[_SPAN_KEY] = span
            self._token = var.set(_Context(values))
            return span
        except Exception as exc:
            report_internal_error(("start", _site(self._group)), exc, _named(self._name))
            return AMBIENT_SPAN

    def _refuse(self) -> Span:
        """A second ``with`` on this object: the disabled span, and its exit will do nothing."""
        report_internal_error(
            ("reenter", _site(self._group)),
            RuntimeError("this managed_span() was entered already; make a new one"),
        )
        # Nested on itself (its exit comes before ours): open, or open as a LiveSpan
        # (reconfigured since: _token is _DONE, _other the LiveSpan until the exit).
        if self._token is not _DONE or self._other.__class__ in (LiveSpan, _Reentered):
            other = self._other
            if other.__class__ is _Reentered:
                other.count += 1
            else:
                self._other = _Reentered(other)
            mark_refused(self)
        return AMBIENT_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token = self._token
        other = self._other
        if other is not None:
            if other.__class__ is _Reentered:  # a `with` on an object already entered
                if other.count and take_refused(self):
                    other.count -= 1
                    return  # the exit of that refused entry: the span goes on
                reentered, other = other, other.previous
                # The first entry's exit: refused entries still open (in other tasks)
                # keep the marker, with nothing left under it to exit again.
                self._other = reentered if reentered.count else other
                reentered.previous = None
            if other.__class__ is LiveSpan:  # the reconfigured path of __enter__
                if self._other is other:
                    self._other = None
                other.__exit__(exc_type, exc, tb)
                return
        if token is None or token is _DONE:
            return  # never entered (entering failed), or already exited
        self._token = _DONE
        try:
            _CONTEXT_VAR.reset(token)  # type: ignore[union-attr]
        except Exception as err:  # a token of another context
            report_internal_error(("detach",), err)
        if other is not None:
            return  # the non-recording span: nothing to end
        if exc_type is not None:
            try:
                mark_exit(self, exc_type, exc)
            except Exception as err:  # the span still ends
                report_internal_error(("exit", "FastSpan"), err)
        try:  # FastSpan.end: the claim inline, the hand-over shared
            if (
                self._tracer._provider._open.pop(self._span_id, None) is not None
                or self._reclaim()  # forgotten past the open-span bound: still exported
            ):
                self.finish(_time_ns())
        except Exception as err:
            report_internal_error(("end", "FastSpan"), err)


SPAN_TYPES.add(ManagedSpan)

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


_DONE: Final = object()  # ManagedSpan._token once exited


class _Reentered:
    """ManagedSpan._other (LiveSpan._token) while refused entries are open: *count* of them,
    each also noted in the context it was made in (:func:`mark_refused`), so that its
    exit, and not the first entry's, is the one skipped."""

    __slots__ = ("count", "previous")

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.count = 1


def _managed(
    group: str,
    name: str,
    shape: int,
    attributes: Attributes | None,
    bucket: Bucket | None,
    profile: bool,
    current: int | None,
) -> LiveSpan | ManagedSpan | ProfiledSpan:
    """The context manager of an enabled span: a :class:`ManagedSpan` on the fast provider.

    With *profile* (a span that asks), it is profiled if its step is scheduled
    or requested: its own ``rl.iteration``, else *current*, the scope's.
    Checked here, with no call of its own: asking costs a set lookup.
    """
    span: LiveSpan | ManagedSpan
    if GATE.tracer.__class__ is not FastTracer or _CONTEXT_VAR is None:
        span = _live(group, name, shape, attributes, bucket)
    else:
        span = _new(ManagedSpan)
        span._group = group
        span._name = name
        span._shape = shape
        span._attributes = attributes  # type: ignore[assignment]  # the caller's, until __enter__
        span._bucket = bucket
        span._token = span._other = None
    if profile and (profiler := _PROFILER[0]) is not None:
        iteration = attributes.get(RL_ITERATION) if attributes else None
        if iteration is None:
            iteration = current
        try:
            scheduled = iteration in profiler._steps
        except TypeError:  # an rl.iteration no set holds (a list): no step of the schedule
            scheduled = False
        if scheduled or profiler._request.pending is not None:
            return ProfiledSpan(span, profiler, iteration)
    return span


def managed_span(
    group: str,
    name: str,
    *,
    attributes: Attributes | None = None,
    bucket: Bucket | None = None,
    profile: bool = False,
) -> LiveSpan | ManagedSpan | _NoopSpanCM | ProfiledSpan:
    """Open a *leaf* span of *group*, current for the block.

    Usable with ``with`` and ``async with``; yields the span. The leaf is
    tagged ``rl.bucket`` with, in order of precedence: *bucket*, the innermost
    :class:`bucket_scope`, the group's bucket. When the group is disabled it
    yields a shared non-recording span that carries the parent context, so
    ``span.set_attribute(...)`` is always safe. With *profile*, the block is
    profiled if its step is scheduled in the ``profiler`` configuration.

    Example:
        >>> with managed_span("policy_update", "train.optimizer_step") as span:
        ...     span.set_attribute("train.lr", 1e-5)
    """
    enabled = GATE.enabled
    if not enabled:
        return NOOP_CM
    state = SCOPES.get()
    try:  # free unless it raises (a group no set can hold: a list)
        if (checked := PER_PROMPT_GROUP if state.per_prompt else group) not in enabled:
            if GATE.audit is not None:
                GATE.audit(checked)
            return NOOP_CM
    except Exception as exc:
        bad_group(group, exc)
        return NOOP_CM
    return _managed(group, name, LEAF, attributes, bucket, profile, state.iteration)


def umbrella_span(
    group: str, name: str, *, attributes: Attributes | None = None, profile: bool = False
) -> LiveSpan | ManagedSpan | _NoopSpanCM | ProfiledSpan:
    """Open a span that encloses other spans; it never carries a bucket.

    Usable with ``with`` and ``async with``; yields the span. With *profile*,
    the block is profiled if its step is scheduled in the ``profiler``
    configuration.

    Example:
        >>> with umbrella_span("step", "train.step", attributes={"rl.epoch": 0}):
        ...     pass
    """
    enabled = GATE.enabled
    if not enabled:
        return NOOP_CM
    state = SCOPES.get()
    try:  # free unless it raises (a group no set can hold: a list)
        if (checked := PER_PROMPT_GROUP if state.per_prompt else group) not in enabled:
            if GATE.audit is not None:
                GATE.audit(checked)
            return NOOP_CM
    except Exception as exc:
        bad_group(group, exc)
        return NOOP_CM
    if GATE.loop_stall and _get_running_loop() is not _stalls._last:
        notice_loop()  # a step starts: watch this thread's event loop (see _stalls)
    return _managed(group, name, UMBRELLA, attributes, None, profile, state.iteration)


def instant(group: str, name: str, *, attributes: Attributes | None = None) -> None:
    """Mark a point in time.

    An event on the current recording span, or a zero-length span when no
    span is recording. Gated on *group* like every other helper.

    Example:
        >>> instant("rollout", "batch.ready", attributes={"batch.size": 64})
    """
    enabled = GATE.enabled
    if not enabled:
        return
    try:  # free unless it raises (a group no set can hold: a list)
        if (checked := PER_PROMPT_GROUP if SCOPES.get().per_prompt else group) not in enabled:
            if GATE.audit is not None:
                GATE.audit(checked)
            return
    except Exception as exc:
        bad_group(group, exc)
        return
    try:
        current = trace.get_current_span()
        if current.is_recording():
            current.add_event(name, attributes=build_attributes(attributes, None))
            return
    except Exception as exc:
        report_internal_error(("instant", _site(group)), exc, _named(name))
        return
    now = time.time_ns()
    span = start(name, group, MARKER, attributes, None, start_time=now)
    if span is not None:
        finish(span, None, None, end_time=now)


def detached_span(
    group: str, name: str, *, attributes: Attributes | None = None
) -> LiveSpan | ManagedSpan | _NoopSpanCM | ProfiledSpan:
    """Open a span that may end after its parent; it never carries a bucket.

    For work handed to another thread that outlives the step that started it
    (an asynchronous checkpoint finalization, say). Open it inside the handed
    context (:func:`bind_context`, :class:`ContextThread`) so it becomes a
    child of the span that triggered the work and keeps that step's
    ``rl.iteration``. It runs concurrently with later steps, so a bucket would
    charge one stretch of wall clock twice. If it cannot be opened, the failure
    is logged once and the block runs untraced.

    Example:
        >>> with detached_span("checkpoint", "rl.checkpoint.finalize"):
        ...     pass  # wait for the writers, then rename
    """
    # The same span as an umbrella: no bucket; only its intent (outliving
    # its parent) differs, which is why it has its own name.
    return umbrella_span(group, name, attributes=attributes)


def start_span(
    group: str,
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Attributes | None = None,
    context: otel_context.Context | None = None,
    links: Sequence[Link] | None = None,
) -> Span:
    """Start a span of *group* without making it current; the caller ends it.

    For integrations whose spans start and end in different callbacks (an
    HTTP client's request hooks, an ASGI middleware). Gating, scope stamps and
    bucket rules are those of :func:`managed_span` (a span of an umbrella
    group is an umbrella). *context* sets the parent (default: the current
    context). When the group is disabled, or the span cannot start, the
    shared disabled span is returned: ``end()`` and every setter on it are
    no-ops, and ``is_recording()`` is false.

    Example:
        >>> from opentelemetry.trace import SpanKind
        >>> span = start_span("per_prompt", "GET", kind=SpanKind.CLIENT)
        >>> span.end()
    """
    enabled = GATE.enabled
    if not enabled:
        return AMBIENT_SPAN
    state = SCOPES.get()
    try:  # free unless it raises (a group no set can hold: a list)
        if (checked := PER_PROMPT_GROUP if state.per_prompt else group) not in enabled:
            if GATE.audit is not None:
                GATE.audit(checked)
            return AMBIENT_SPAN
    except Exception as exc:
        bad_group(group, exc)
        return AMBIENT_SPAN
    tracer = GATE.tracer
    if tracer.__class__ is FastTracer:  # start() inline; span_attributes() too, when cached
        try:
            entry = state.cache.get(group)
            if entry is not None and entry[2] == _generation:
                attrs = entry[0].copy()
                if attributes:  # _merge, inline
                    attrs.update(attributes)
                    if RL_BUCKET in attributes or not _COPIED.isdisjoint(
                        map(type, attributes.values())
                    ):
                        _settle(attrs, attributes, entry[1])
            else:
                attrs = span_attributes(group, LEAF, attributes, None)
            return tracer.start_owned(name, context, attrs, None, kind, links, None)
        except Exception as exc:
            report_internal_error(("start", _site(group)), exc, _named(name))  # names vary
            return AMBIENT_SPAN
    span = start(name, group, LEAF, attributes, None, None, kind, context, links)
    return AMBIENT_SPAN if span is None else span


def end_span(
    span: Span, exc: BaseException | None = None, *, secrets: Collection[str] = ()
) -> None:
    """End a span from :func:`start_span`, recording how the work ended; never raises.

    An ``Exception`` is recorded and sets status ERROR; a cancellation (any
    other ``BaseException``: ``CancelledError``, ``GeneratorExit``, ...) sets
    ``asynctrace.cancelled=true`` and leaves the status alone. What is
    recorded of the exception (its message, stack trace and the status
    description) is redacted as every exception asynctrace records is: URLs
    lose userinfo and secret-like query values, credential pairs lose their
    values; each string of *secrets* (what the caller knows to be secret,
    such as the request's header values) is replaced too.

    Example:
        >>> span = start_span("per_prompt", "work")
        >>> end_span(span, TimeoutError("took too long"), secrets=["s3cr3t-value"])
    """
    if span is AMBIENT_SPAN:
        return
    if exc is None:  # finish(), without its call
        try:
            if span.__class__ in SPAN_TYPES:  # FastSpan.end, inline: the claim, then hand over
                fast: Any = span
                open_spans = fast._tracer._provider._open
                if fast._end is None and (
                    open_spans.pop(fast._span_id, None) is not None or fast._reclaim()
                ):
                    fast.finish(_time_ns())
            else:
                span.end()
        except Exception as err:
            report_internal_error(("end", type(span).__name__), err)
        return
    finish(span, type(exc), exc, None, secrets)
