"""Starting a span by the rules: its group, bucket and stamps, then the provider's span.

The group's bucket and stamp are resolved once per rule and scope shape and
cached (dropped when the span-group registry changes); the provider's span
is started with the merged attributes, stamped on the SDK provider too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry.trace import (
    Link,
    Span,
    SpanKind,
)
from opentelemetry.util.types import AttributeValue

from . import _groups, _stalls
from ._errors import report_internal_error
from ._fast import FastTracer
from ._fast._evict import STAMP_KEYS
from ._fast._pending import SEEN as _PENDING
from ._fast._pending import redact_long_values
from ._fast._span import url_redacted
from ._group_types import Bucket
from ._redacting_tracer import redacted_links
from ._scopes import SCOPES
from ._sdk_stamps import restore_stamps
from ._semconv import GROUP, RL_BUCKET
from ._span_redacting import redacting
from ._span_rules import (
    LEAF,
    PLAIN,
    UMBRELLA,
    Attributes,
    base_attributes,
    group_stamp,
    merge_attributes,
    named,
    resolve_bucket,
    settle_attributes,
    site,
)
from ._stalls import notice_loop
from ._state import GATE
from ._url_attributes import URL_ATTRIBUTES

__all__ = ["span_attributes", "start"]

_time_ns: Final = time.time_ns
_get_running_loop: Final = asyncio._get_running_loop
_new: Final = object.__new__
_INTERNAL: Final = SpanKind.INTERNAL
_DONE: Final = object()  # ManagedSpan._token once exited
_generation = 0  # bumped when the registry changes: cached stamps are then stale
# (group or (shape, group), per_prompt, scoped bucket) -> (bucket, group stamp, generation)
_RULES: dict[tuple[Any, bool, Bucket | None], tuple[Bucket | None, str | None, int]] = {}
_MAX_RULES: Final = 4096
_MAX_SHAPES: Final = 256  # entries of one scope state's cache (a few in practice)
# Keys of the caller's attributes that take more than a merge: the bucket, and the URL
# attributes (redacted as every span asynctrace hands out records them). One C call.
_SETTLED: Final = frozenset({RL_BUCKET}) | URL_ATTRIBUTES


def _registry_changed() -> None:
    global _generation
    _generation += 1


_groups.add_registry_listener(_registry_changed)


def span_attributes(
    group: str, shape: int, user: Attributes | None, explicit: object
) -> dict[str, AttributeValue]:
    """The bucket, group stamp and attributes of a span by the rules, at once.

    What :func:`~asynctrace._span_rules.resolve_bucket`,
    :func:`~asynctrace._span_rules.group_stamp` and
    :func:`~asynctrace._span_rules.build_attributes` give together.

    The same rules and key order, for the hot path: the stamps of a (group,
    shape) are computed once per scope state and cached on it; the result is
    always a new dict the span may keep (the caller's list values become
    tuples, its URL attributes are redacted: see
    :func:`~asynctrace._fast._span.url_redacted`).
    """
    state = SCOPES.get()
    if explicit is not None:  # rare: no cache
        bucket = resolve_bucket(state, group, shape, explicit)
        stamp = None if bucket is not None else group_stamp(state, group, shape)
        merged = merge_attributes(base_attributes(state.stamps, bucket, stamp), user, bucket)
        return url_redacted(merged, True) if user else merged
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
        if not _SETTLED.isdisjoint(user) or not PLAIN.issuperset(map(type, user.values())):
            settle_attributes(attrs, user, bucket)
            url_redacted(attrs, True)
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
        if _PENDING.long:  # a long URL value left for a fast span's export thread: now
            redact_long_values(attrs)
        links = redacted_links(links)  # (the fast provider's spans redact theirs)
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
