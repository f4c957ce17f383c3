"""AReaL's trace categories: their span groups and goodput buckets."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, Union

import asynctrace

NAMESPACE: Final = "areal"
"""The namespace AReaL's category groups are registered under."""


class PerfTraceCategory(str, enum.Enum):
    """AReaL's trace categories.

    Example:
        >>> PerfTraceCategory.COMPUTE.value
        'compute'
    """

    COMPUTE = "compute"
    COMM = "comm"
    IO = "io"
    SYNC = "sync"
    SCHEDULER = "scheduler"
    INSTR = "instr"
    MISC = "misc"


Category = PerfTraceCategory
CategoryLike = Union[PerfTraceCategory, str, None]  # noqa: UP007
"""What a ``category=`` argument takes, as in AReaL: a :class:`PerfTraceCategory`,
its value or one of AReaL's long names (``"communication"``, any case), or
``None`` (or a blank string) for ``misc``. Any other string is accepted: its
spans take ``misc``'s group and bucket, and the trace keeps the text as given.
"""

_ALIASES: Final = {
    "communication": "comm",
    "synchronization": "sync",
    "scheduling": "scheduler",
    "instrumentation": "instr",
}

DEFAULT_CATEGORY_MAP: Final[Mapping[str, asynctrace.Bucket | None]] = {
    "compute": asynctrace.Bucket.PRODUCTIVE,
    "comm": asynctrace.Bucket.OVERHEAD,
    "io": asynctrace.Bucket.OVERHEAD,
    "sync": asynctrace.Bucket.IDLE,
    "scheduler": asynctrace.Bucket.OVERHEAD,
    "instr": asynctrace.Bucket.OVERHEAD,
    "misc": None,
}
"""AReaL category -> goodput bucket (``None``: an unbucketed umbrella).

Each category is the span group ``areal.<category>``; a category not in the
table (AReaL accepts any string) is treated as ``misc``. The same table is
``asynctrace goodput``'s default for AReaL's own trace files.
"""

asynctrace.register_span_groups(
    NAMESPACE,
    [
        asynctrace.SpanGroup(
            f"areal.{name}",
            bucket if bucket is not None else asynctrace.Bucket.OVERHEAD,
            description=f"AReaL category {name!r}",
        )
        for name, bucket in DEFAULT_CATEGORY_MAP.items()
    ],
    presets={NAMESPACE: [f"areal.{name}" for name in DEFAULT_CATEGORY_MAP]},
)


def _category(category: CategoryLike) -> str:
    """AReaL's normalisation: enum value, alias, lower-cased name; ``misc`` for none."""
    if isinstance(category, PerfTraceCategory):
        return category.value
    if isinstance(category, str) and category.strip():
        lowered = category.strip().lower()
        return _ALIASES.get(lowered, lowered)
    return "misc"


def _areal_category(category: CategoryLike) -> str:
    """The category as AReaL writes it in ``cat``: aliases resolved, any other text as given."""
    if isinstance(category, PerfTraceCategory):
        return category.value
    if isinstance(category, str) and category.strip():
        lowered = category.strip().lower()
        if lowered in _ALIASES or lowered in DEFAULT_CATEGORY_MAP:
            return _ALIASES.get(lowered, lowered)
        return category
    return "misc"


def _category_map(
    overrides: Mapping[str, asynctrace.Bucket | str | None] | None,
) -> dict[str, asynctrace.Bucket | None]:
    table: dict[str, asynctrace.Bucket | None] = dict(DEFAULT_CATEGORY_MAP)
    for raw, value in (overrides or {}).items():
        name = _category(raw)
        if name not in table:
            raise asynctrace.ConfigurationError(
                f"category_map: {raw!r} is not a category; accepted: {', '.join(table)}"
            )
        if value is None or (isinstance(value, str) and value.lower() in ("none", "")):
            table[name] = None
            continue
        try:
            table[name] = asynctrace.Bucket(value)
        except ValueError:
            raise asynctrace.ConfigurationError(
                f"category_map[{raw!r}]: {value!r} is not accepted; accepted: "
                f"{', '.join(b.value for b in asynctrace.Bucket)} or none"
            ) from None
    return table
