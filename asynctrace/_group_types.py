"""What a span group and a goodput bucket are, and the checks of their names and values."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Literal, TypeAlias, Union

from ._errors import ConfigurationError

__all__ = [
    "BY_CATEGORY",
    "Bucket",
    "GroupBucket",
    "SpanGroup",
    "as_bucket",
    "validate_bucket",
    "validate_name",
]


class Bucket(str, enum.Enum):
    """Goodput classification of a leaf span's wall-clock time.

    Example:
        >>> Bucket.PRODUCTIVE.value
        'productive'
    """

    PRODUCTIVE = "productive"
    OVERHEAD = "overhead"
    IDLE = "idle"
    WASTED = "wasted"

    def __str__(self) -> str:
        return self.value


BY_CATEGORY: Literal["by_category"] = "by_category"
"""Marker for a group whose spans take their bucket from an efficiency category."""

GroupBucket: TypeAlias = Union[Bucket, Literal["by_category"], None]  # noqa: UP007

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.\-/]*")


@dataclass(frozen=True)
class SpanGroup:
    """The definition of one span group.

    Attributes:
        name: lower-case identifier used in span-group specs.
        bucket: the goodput bucket of the group's leaf spans; ``None`` makes it
            an umbrella group (its spans enclose others and carry no bucket);
            :data:`BY_CATEGORY` takes the bucket from the efficiency category.
        per_item: the group's span count scales with items (prompts,
            requests) rather than steps; such groups are left out of the
            ``per_step`` preset.
        description: one line for ``asynctrace groups``.

    Example:
        >>> SpanGroup("tokenize", Bucket.OVERHEAD).is_umbrella
        False
    """

    name: str
    bucket: GroupBucket
    per_item: bool = False
    description: str = ""

    @property
    def is_umbrella(self) -> bool:
        """Whether spans of this group are umbrellas (never bucketed)."""
        return self.bucket is None

    def _same_definition(self, other: SpanGroup) -> bool:
        return (self.bucket, self.per_item) == (other.bucket, other.per_item)


def validate_name(value: object, key: str) -> str:
    """Return the normalised group/preset name or raise ConfigurationError."""
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{key}: group and preset names must be non-empty strings, got {value!r}"
        )
    name = value.strip().lower()
    if not _NAME_RE.fullmatch(name):
        raise ConfigurationError(
            f"{key}: invalid name {value!r}; accepted: a non-empty string of "
            "lower-case letters, digits and _ . - / (not starting with a symbol)"
        )
    return name


def as_bucket(value: object) -> Bucket | None:
    """*value* as a :class:`Bucket` if ``Bucket(value)`` takes it (``"idle"``), else ``None``.

    Example:
        >>> as_bucket("idle") is Bucket.IDLE, as_bucket("IDLE")
        (True, None)
    """
    try:
        return Bucket(value)
    except Exception:  # a ValueError; a TypeError, or what an odd __eq__ raises
        return None


def validate_bucket(value: object, key: str, *, allow_none: bool = False) -> Bucket | None:
    """Return *value* as a :class:`Bucket` (a member or its value), or None when allowed."""
    if isinstance(value, Bucket):
        return value
    if value is None and allow_none:
        return None
    bucket = as_bucket(value)
    if bucket is not None:
        return bucket
    accepted = ", ".join(f"Bucket.{b.name}" for b in Bucket)
    accepted += " or their values " + ", ".join(repr(b._value_) for b in Bucket)
    if allow_none:
        accepted += ", None"
    raise ConfigurationError(f"{key}: {value!r} is not a Bucket; accepted: {accepted}")
