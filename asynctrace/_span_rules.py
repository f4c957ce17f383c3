"""The rules a span's attributes follow: its shape, the gate, its bucket, its group stamp.

A span's *shape* (leaf, umbrella, efficiency, marker) and the scope state it
starts in decide its bucket (:func:`resolve_bucket`) and whether it names its
group (:func:`group_stamp`); :func:`build_attributes` puts the scope stamps
first and the caller's attributes over them. :mod:`asynctrace._span_start`
caches the result per scope state for the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from opentelemetry.util.types import AttributeValue

from . import _groups
from ._errors import first_report, is_strict, logger, report_internal_error
from ._fast._span import private_value
from ._group_types import Bucket, as_bucket
from ._redact import redact_text
from ._scopes import SCOPES, ScopeState
from ._semconv import GROUP, RL_BUCKET

__all__ = [
    "EFFICIENCY",
    "LEAF",
    "MARKER",
    "PER_PROMPT_GROUP",
    "PLAIN",
    "UMBRELLA",
    "Attributes",
    "bad_group",
    "base_attributes",
    "build_attributes",
    "group_stamp",
    "merge_attributes",
    "named",
    "resolve_bucket",
    "settle_attributes",
    "site",
]


Attributes = Mapping[str, AttributeValue]

# Span shapes; they decide the bucket.
LEAF: Final = 0
UMBRELLA: Final = 1
EFFICIENCY: Final = 2
MARKER: Final = 3  # instant()'s zero-length span: unbucketed, names no group

PER_PROMPT_GROUP: Final = _groups.PER_PROMPT


def resolve_bucket(state: ScopeState, group: str, shape: int, explicit: object) -> Bucket | None:
    """Apply the bucket rules of the spec to one span about to start in *state*."""
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
        taken = as_bucket(explicit)  # a bucket's value ("idle") is that bucket
        if taken is not None:
            return taken
        _bad_bucket(group, explicit)  # the span keeps the bucket it has without it
    bucket = definition.bucket
    if not isinstance(bucket, Bucket):  # the efficiency group's: a span of no category
        return None  # has no bucket, and a bucket scope does not give it one
    scoped = state.bucket
    return bucket if scoped is None else scoped


def _bad_bucket(group: str, explicit: object) -> None:
    """``bucket=`` names no bucket: said once per group (raised in strict mode).

    The span is still recorded, with the bucket it has without the argument
    (the innermost bucket scope's, else its group's), and the message says so.
    """
    accepted = ", ".join(f"Bucket.{b.name}" for b in Bucket)
    values = ", ".join(repr(b._value_) for b in Bucket)
    error = TypeError(
        f"bucket={_shown(explicit)} is not a Bucket; accepted: {accepted} or their values {values}"
    )
    if is_strict():
        raise error
    key = site(group)
    if not first_report(("bucket", key)):  # forgotten with the others (reset_reported)
        return
    try:
        logger.warning(
            "asynctrace: managed_span(%r, ...): %s; the span is recorded with the bucket "
            "it has without it (its bucket scope's, else its group's) "
            "(further refused buckets in this group are not logged)",
            key,
            error,
        )
    except Exception:  # pragma: no cover - logging itself broken
        pass


def _shown(value: object) -> str:
    """*value*'s repr for a message, at most 80 characters; its type if repr raises."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def group_stamp(state: ScopeState, group: str, shape: int) -> str | None:
    """The ``asynctrace.group`` an unbucketed span carries, or ``None``.

    Umbrellas (and other unbucketed spans) name their group, so a reader can
    tell a step from any other span whatever scopes were open; per-item spans
    (per-prompt, HTTP) do not, to keep their volume cheap, nor do efficiency
    spans, which carry their category, nor ``instant`` markers, which are
    points in time, not spans of the group's work.
    """
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
    return merge_attributes(base_attributes(stamps, bucket, group), user, bucket)


def base_attributes(
    stamps: dict[str, AttributeValue], bucket: Bucket | None, group: str | None
) -> dict[str, AttributeValue]:
    """The stamps of a span: group, iteration, task, session, bucket (in this order)."""
    attrs: dict[str, AttributeValue] = {GROUP: group} if group is not None else {}
    attrs.update(stamps)
    if bucket is not None:  # _value_: the member's plain field (.value is a Python property)
        attrs[RL_BUCKET] = bucket._value_
    return attrs


def merge_attributes(
    attrs: dict[str, AttributeValue], user: Attributes | None, bucket: Bucket | None
) -> dict[str, AttributeValue]:
    """The caller's attributes over the stamps (*attrs*, changed in place)."""
    if user:
        attrs.update(user)
        # Strings, ints and bools (nearly every attribute) need nothing more: one
        # pass in C says so, without building the set of their types.
        if RL_BUCKET in user or not PLAIN.issuperset(map(type, user.values())):
            settle_attributes(attrs, user, bucket)
    return attrs


def settle_attributes(
    attrs: dict[str, AttributeValue], user: Attributes, bucket: Bucket | None
) -> None:
    """After the caller's attributes went over the stamps: suspects, then the bucket rules.

    In that order: a list the caller gave as ``rl.bucket`` is made a tuple
    first and then overruled like any other raw value.
    """
    if not PLAIN.issuperset(map(type, user.values())):
        _suspects(attrs, user)
    if RL_BUCKET in user:  # the bucket rules decide, never a raw attribute
        if bucket is None:
            del attrs[RL_BUCKET]
        else:
            attrs[RL_BUCKET] = bucket._value_


def _suspects(attrs: dict[str, AttributeValue], user: Attributes) -> None:
    """Each value but a plain one taken as it is now (:func:`private_value`): containers
    copied (lists become tuples), other objects as their text, a NaN or an infinity
    noted. A list, dict or array the caller changes later changes nothing recorded."""
    for key, value in user.items():
        if value.__class__ not in PLAIN:
            try:
                attrs[key] = private_value(value)
            except Exception:  # a Mapping whose items() raises, say: left to the exporters
                pass


PLAIN: Final = frozenset({str, int, bool})
"""Attribute value types stored as given (nearly every attribute): one pass in C says
a mapping holds only these; any other value takes :func:`_suspects`."""


def named(name: object) -> str:
    """A span's name for a failure message: redacted, never raising."""
    try:
        return "span " + redact_text(name) if isinstance(name, str) else ""
    except Exception:
        return ""


def site(group: object) -> object:
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
    report_internal_error(("group", site(group)), error)
