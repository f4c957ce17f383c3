"""Umbrella spans, instants, detached spans and the explicit start/end pair."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    Span,
    SpanKind,
)

from . import _span_start, _stalls
from ._errors import report_internal_error
from ._fast import FastSpan, FastTracer, _deferred
from ._fast._deferred import DeferredSpan, LazyAttributes
from ._fast._evict import STAMP_KEYS
from ._fast._pending import SEEN as _PENDING
from ._fast._span import SPAN_TYPES, url_redacted
from ._live_span import LiveSpan
from ._managed_span import ManagedSpan, _managed
from ._profiling import ProfiledSpan
from ._scopes import SCOPES
from ._secret_words import _EXTRA_WORDS
from ._semconv import RL_BUCKET
from ._span_context import (
    _CONTEXT_VAR,
    finish,
)
from ._span_noop import AMBIENT_SPAN, NOOP_CM, NoopSpanCM
from ._span_rules import (
    LEAF,
    MARKER,
    PER_PROMPT_GROUP,
    PLAIN,
    UMBRELLA,
    Attributes,
    bad_group,
    build_attributes,
    named,
    settle_attributes,
    site,
)
from ._span_start import _get_running_loop, _time_ns, span_attributes, start
from ._stalls import notice_loop
from ._state import GATE
from ._url_attributes import URL_ATTRIBUTES

__all__ = ["detached_span", "end_span", "instant", "start_span", "umbrella_span"]


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
        if (PER_PROMPT_GROUP if state.per_prompt else group) not in enabled:
            if GATE.audit is not None:
                GATE.audit(group)  # the name asked for, whatever decided the miss
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
        if (PER_PROMPT_GROUP if SCOPES.get().per_prompt else group) not in enabled:
            if GATE.audit is not None:
                GATE.audit(group)  # the name asked for, whatever decided the miss
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
    urls_redacted: bool = False,
    lazy_attributes: LazyAttributes | None = None,
) -> Span:
    """Start a span of *group* without making it current; the caller ends it.

    For integrations whose spans start and end in different callbacks (an
    HTTP client's request hooks, an ASGI middleware). Gating, scope stamps and
    bucket rules are those of :func:`~asynctrace.managed_span` (a span of an umbrella
    group is an umbrella). *attributes* is read, never kept: the span holds
    its own copy, so one mapping may be given again and again. *context* sets
    the parent (default: the current context). When the group is disabled, or
    the span cannot start, the shared disabled span is returned: ``end()`` and
    every setter on it are no-ops, and ``is_recording()`` is false.

    URL attributes (``url.full``, ``url.query``, ...) are redacted as on
    every span asynctrace hands out. *urls_redacted* says the caller has
    redacted them already, as asynctrace's HTTP integrations do with their
    own secret keys: the fast provider then records them as given, which
    saves a request's span the check of its URL (the SDK provider's spans
    check every attribute they are given, and so does every span once the
    program has registered words of its own with
    :func:`~asynctrace.register_secret_words`, which the callers' keys may
    not hold).

    *lazy_attributes*, a function of no arguments returning a mapping,
    gives attributes that cost too much to compute where the span starts.
    On the fast provider it is called once, off the hot path: on an export
    thread before the span is first exported, or where the span's
    ``attributes`` are first read whole, whichever comes first; so it must
    be thread-safe, quick, and read nothing from the context it was made
    in. What it returns is merged as if set after the span's other
    attributes, except that a key the span already holds keeps its value.
    On the SDK provider it is called at once and merged into *attributes*
    (where a key of *attributes* wins). One that raises is logged once and
    adds nothing.

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
        if (PER_PROMPT_GROUP if state.per_prompt else group) not in enabled:
            if GATE.audit is not None:
                GATE.audit(group)  # the name asked for, whatever decided the miss
            return AMBIENT_SPAN
    except Exception as exc:
        bad_group(group, exc)
        return AMBIENT_SPAN
    tracer = GATE.tracer
    if tracer.__class__ is FastTracer:  # start() inline; span_attributes() too, when cached
        try:
            entry = state.cache.get(group)
            if entry is not None and entry[2] == _span_start._generation:
                attrs = entry[0].copy()
                if attributes:  # _merge, inline
                    attrs.update(attributes)
                    if RL_BUCKET in attributes or not PLAIN.issuperset(
                        map(type, attributes.values())
                    ):
                        settle_attributes(attrs, attributes, entry[1])
                    if not (
                        (urls_redacted and not _EXTRA_WORDS)  # the program's words: ours
                        or URL_ATTRIBUTES.isdisjoint(attributes)
                    ):
                        url_redacted(attrs, True)
            else:
                attrs = span_attributes(group, LEAF, attributes, None)
                if urls_redacted and attributes and not _EXTRA_WORDS:  # as the cached path
                    for key in URL_ATTRIBUTES.intersection(attributes):
                        if attributes[key].__class__ is str:
                            attrs[key] = attributes[key]
            if lazy_attributes is None or not _lazy_ok(lazy_attributes):
                return tracer.start_owned(name, context, attrs, None, kind, links, None)
            blank: Any = _new(DeferredSpan)
            blank._lazy = lazy_attributes
            blank._urls_redacted = urls_redacted
            blank._claim = [True]
            blank._settler = 0
            blank._done = None
            _PENDING.lazy = True
            return tracer.start_owned(name, context, attrs, blank, kind, links, None)
        except Exception as exc:
            report_internal_error(("start", site(group)), exc, named(name))  # names vary
            return AMBIENT_SPAN
    if lazy_attributes is not None and _lazy_ok(lazy_attributes):
        attributes = _with_lazy(attributes, lazy_attributes, name)
    span = start(name, group, LEAF, attributes, None, None, kind, context, links)
    return AMBIENT_SPAN if span is None else span


def _with_lazy(
    attributes: Attributes | None, lazy: LazyAttributes, name: str
) -> Attributes | None:
    """*attributes* with what *lazy* returns before them (a key of *attributes* wins;
    asynctrace's stamps are not taken from it), now: the SDK's way."""
    try:
        extra = lazy()
        if not extra:
            return attributes
        given = attributes or {}
        merged: dict[Any, Any] = {  # its keys the oldest, as on the fast provider
            key: value
            for key, value in extra.items()
            if key not in STAMP_KEYS and key not in given
        }
        merged.update(given)
        return merged
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a cancellation too: the span starts without them
        _deferred.report_failure(repr(name), exc)
        return attributes


_new = object.__new__


def _lazy_ok(lazy: object) -> bool:
    """Whether *lazy* can be called; if not, the mistake is reported (once; raised in
    strict mode) and the span starts without it."""
    if callable(lazy):
        return True
    report_internal_error(
        ("lazy_attributes", type(lazy).__name__),
        TypeError(
            f"start_span(lazy_attributes=...): expected a function of no arguments "
            f"returning a mapping, got {type(lazy).__name__}; the span starts without it"
        ),
    )
    return False


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
    such as the request's header values) is replaced too. A
    ``managed_span()`` object entered by hand (``__enter__`` without a
    ``with``) is ended as its exit would end it, on every provider, when the
    object itself is passed (what its ``__enter__`` returned may be another
    span, unsampled or on the SDK provider: ending that leaves the object's
    context current); one never entered, or already exited, is left alone.
    Anything else that is not a span is a mistake, logged once per type
    (raised in strict mode).

    Example:
        >>> span = start_span("per_prompt", "work")
        >>> end_span(span, TimeoutError("took too long"), secrets=["s3cr3t-value"])
    """
    if span is AMBIENT_SPAN:
        return
    if exc is None:  # finish(), without its call
        try:
            cls = span.__class__
            if cls is FastSpan or cls is DeferredSpan:  # FastSpan.end, inline: claim, hand over
                fast: Any = span
                if fast._end is None:  # not started (_end 0) or ended: nothing to end
                    opened = fast._tracer._provider._open
                    if (
                        opened.pop(fast._span_id, None) is not None or fast._reclaim()
                        if opened.get(fast._span_id) is fast
                        else fast._reclaim()
                    ):
                        fast.finish(_time_ns())
            elif cls in SPAN_TYPES:  # a ManagedSpan: its context, as its exit
                _release_managed(span, None, ())  # detaches it, then FastSpan.end
                span.end()
            else:
                target: object = span  # typed a Span, may be a managed_span() object
                if isinstance(target, Span):
                    if getattr(target, "end_time", None) is None:  # an SDK span ended: silent
                        target.end()
                else:
                    _end_other(target, None, ())
        except Exception as err:
            report_internal_error(("end", type(span).__name__), err)
        return
    other: object = span
    if span.__class__ in SPAN_TYPES:
        if span.__class__ is ManagedSpan:
            _release_managed(span, exc, secrets)
        finish(span, type(exc), exc, None, secrets)
        return
    if isinstance(other, Span):
        if getattr(other, "end_time", None) is None:  # an SDK span ended: silent
            finish(span, type(exc), exc, None, secrets)
        return
    try:
        _end_other(other, exc, secrets)
    except Exception as err:
        report_internal_error(("end", type(span).__name__), err)


def _release_managed(span: Any, exc: BaseException | None, secrets: Collection[str]) -> None:
    """:func:`end_span` of a :class:`ManagedSpan` entered by hand: its context detached
    as its exit detaches it (then its exit does nothing more).

    Ended from another context (a task, a thread), the entering context is left as is
    (a token of another context cannot reset it) and the exit there, later, takes the
    span out of it. One entered after a reconfiguration (the :class:`LiveSpan` its
    ``__enter__`` made then) is ended as its exit would end it.
    """
    token = span._token
    if token is None or token is _span_start._DONE:
        other = span._other
        if token is _span_start._DONE and other.__class__ is LiveSpan:
            span._other = None
            _end_other(other, exc, secrets)
        return
    span._token = _span_start._DONE
    var = _CONTEXT_VAR
    if var is not None:
        try:
            var.reset(token)
        except ValueError:  # a token of another context: that context's exit unsticks it
            pass


def _end_other(span: object, exc: BaseException | None, secrets: Collection[str]) -> None:
    """:func:`end_span` of what is not a span: a ``managed_span()`` object on a provider
    other than the fast one (a :class:`LiveSpan`) entered by hand is ended as its exit
    ends it; one not entered (or already exited), or a disabled or profiled
    ``managed_span()`` object, is left alone; anything else raises ``TypeError``."""
    if span.__class__ is not LiveSpan:
        if span.__class__ is NoopSpanCM or span.__class__ is ProfiledSpan:
            return
        raise TypeError(f"end_span() takes a span, not a {type(span).__name__}")
    live: Any = span
    inner = live._span
    if inner is None or inner is _span_start._DONE:  # never entered, or exited already
        return
    token = live.release()  # as the first entry's exit
    if token is not None:
        var = _CONTEXT_VAR
        try:  # ended from another context (a task, a thread): its own context stays as is
            if var is not None:
                var.reset(token)
            elif trace.get_current_span() is inner:
                otel_context.detach(token)
        except ValueError:  # a token of another context
            pass
    finish(inner, None if exc is None else type(exc), exc, None, secrets)
