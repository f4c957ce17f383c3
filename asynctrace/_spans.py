"""Leaf and umbrella spans, instants, and the shared disabled span."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    Link,
    Span,
    SpanContext,
    SpanKind,
)
from opentelemetry.util.types import AttributeValue

from . import _groups, _stalls
from ._cm import SyncAndAsync
from ._errors import report_internal_error
from ._fast import FastSpan, FastTracer
from ._fast._span import SPAN_TYPES, STAMP_KEYS
from ._groups import Bucket
from ._profiling import _PROFILER, ProfiledSpan
from ._scopes import SCOPES
from ._semconv import GROUP, RL_BUCKET, RL_ITERATION
from ._span_context import (
    _CONTEXT_VAR,
    _SPAN_KEY,
    _Context,
    attach,
    detach,
    finish,
    mark_exit,
)
from ._span_errors import redacting, restore_stamps
from ._span_noop import AMBIENT_SPAN, NOOP_CM, NoopSpanCM, Reentered, mark_refused, take_refused
from ._span_rules import (
    LEAF,
    MARKER,
    PER_PROMPT_GROUP,
    PLAIN,
    UMBRELLA,
    Attributes,
    bad_group,
    base_attributes,
    build_attributes,
    group_stamp,
    merge_attributes,
    named,
    resolve_bucket,
    settle_attributes,
    site,
)
from ._stalls import notice_loop
from ._state import GATE

__all__ = ["instant", "managed_span", "umbrella_span"]


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
        bucket = resolve_bucket(state, group, shape, explicit)
        stamp = None if bucket is not None else group_stamp(state, group, shape)
        return merge_attributes(base_attributes(state.stamps, bucket, stamp), user, bucket)
    key = group if shape == LEAF else (shape, group)
    entry = state.cache.get(key)
    if entry is None or entry[2] != _generation:
        # A new state (a scope entered, scopes restored from a carrier): its bucket and
        # group stamp depend only on the span's shape, per_prompt and the scoped bucket.
        rules_key = (key, state.per_prompt, state.bucket)
        rules = _RULES.get(rules_key)
        if rules is None or rules[2] != _generation:
            bucket = resolve_bucket(state, group, shape, None)
            stamp = None if bucket is not None else group_stamp(state, group, shape)
            if len(_RULES) >= _MAX_RULES:  # group names made up per span: stay bounded
                _RULES.clear()
            rules = _RULES[rules_key] = (bucket, stamp, _generation)
        # base_attributes(state.stamps, ...), inline: a new state often starts a single span.
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
        if RL_BUCKET in user or not PLAIN.issuperset(map(type, user.values())):
            settle_attributes(attrs, user, bucket)
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
        limits = getattr(tracer, "_span_limits", None)  # an SDK tracer's
        if limits is not None and (
            limits.max_span_attribute_length is not None
            or (limits.max_span_attributes is not None and len(attrs) > limits.max_span_attributes)
        ):
            return _sdk_stamped(tracer, name, context, kind, attrs, links, start_time, limits)
        # positional: the API's parameter order, cheaper than keywords per span;
        # an SDK span records exceptions redacted, as a fast one does
        return redacting(tracer.start_span(name, context, kind, attrs, links, start_time))
    except Exception as exc:
        report_internal_error(("start", site(group)), exc, named(name))  # names vary
        return None


def _sdk_stamped(
    tracer: Any,
    name: str,
    context: otel_context.Context | None,
    kind: SpanKind,
    attrs: dict[str, AttributeValue],
    links: Sequence[Link] | None,
    start_time: int | None,
    limits: Any,
) -> Span:
    """An SDK span under a count or length limit that keeps asynctrace's stamps whole.

    The SDK evicts the oldest attributes first, and the stamps come first: past
    the count limit they are given last, so the newest user attributes go
    instead. A length limit would cut a bucket name: the stamps are put back
    whole. (Attributes set later on the span are the SDK's: see
    docs/providers.md.)
    """
    if limits.max_span_attributes is not None and len(attrs) > limits.max_span_attributes:
        stamps = {key: attrs.pop(key) for key in STAMP_KEYS.intersection(attrs)}
        attrs.update(stamps)
    span = redacting(tracer.start_span(name, context, kind, attrs, links, start_time))
    if limits.max_span_attribute_length is not None:
        restore_stamps(span, attrs)
    return span


_time_ns: Final = time.time_ns
_get_running_loop: Final = asyncio._get_running_loop
_new: Final = object.__new__
_INTERNAL: Final = SpanKind.INTERNAL


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
        token = self._token
        if token.__class__ is Reentered:  # a `with` on this object while it was open
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
            report_internal_error(("start", site(self._group)), exc, named(self._name))
            return AMBIENT_SPAN

    def _refuse(self) -> Span:
        """A second ``with`` on this object: the disabled span, and its exit will do nothing."""
        report_internal_error(
            ("reenter", site(self._group)),
            RuntimeError("this managed_span() was entered already; make a new one"),
        )
        # Nested on itself (its exit comes before ours): open, or open as a LiveSpan
        # (reconfigured since: _token is _DONE, _other the LiveSpan until the exit).
        if self._token is not _DONE or self._other.__class__ in (LiveSpan, Reentered):
            other = self._other
            if other.__class__ is Reentered:
                other.count += 1
            else:
                self._other = Reentered(other)
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
            if other.__class__ is Reentered:  # a `with` on an object already entered
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

    # Before __enter__, or not sampled (or reconfigured since), the object is no span
    # of its own: these answer for it without raising.

    def get_span_context(self) -> SpanContext:
        """The span's context; before entering, or if not sampled, the one it stands for."""
        try:
            return FastSpan.get_span_context(self)
        except AttributeError:  # never started: no ids
            other = self._other
            if other is not None and hasattr(other, "get_span_context"):
                return other.get_span_context()  # type: ignore[no-any-return]
            return INVALID_SPAN_CONTEXT

    def __repr__(self) -> str:
        try:
            return FastSpan.__repr__(self)
        except AttributeError:  # never started: no ids
            state = "not entered" if self._token is None else "not recording"
            return f"<ManagedSpan {self._name!r} {state}>"


SPAN_TYPES.add(ManagedSpan)

_DONE: Final = object()  # ManagedSpan._token once exited


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
        span._end = 0  # not started: not recording, setters ignored (until __enter__)
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
) -> LiveSpan | ManagedSpan | NoopSpanCM | ProfiledSpan:
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
) -> LiveSpan | ManagedSpan | NoopSpanCM | ProfiledSpan:
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
        report_internal_error(("instant", site(group)), exc, named(name))
        return
    now = time.time_ns()
    span = start(name, group, MARKER, attributes, None, start_time=now)
    if span is not None:
        finish(span, None, None, end_time=now)


def detached_span(
    group: str, name: str, *, attributes: Attributes | None = None
) -> LiveSpan | ManagedSpan | NoopSpanCM | ProfiledSpan:
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
                    if RL_BUCKET in attributes or not PLAIN.issuperset(
                        map(type, attributes.values())
                    ):
                        settle_attributes(attrs, attributes, entry[1])
            else:
                attrs = span_attributes(group, LEAF, attributes, None)
            return tracer.start_owned(name, context, attrs, None, kind, links, None)
        except Exception as exc:
            report_internal_error(("start", site(group)), exc, named(name))  # names vary
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
