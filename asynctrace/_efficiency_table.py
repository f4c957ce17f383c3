"""Efficiency categories: the category -> bucket table, and each category's span name.

A category (``idle/buffer_starvation``) names a wait; the table charges it to
the idle or wasted bucket, or to none. Keys ending in ``"/*"`` match a prefix;
exact keys win, then the longest prefix. Look-ups are cached (within a bound)
until the table changes.
"""

from __future__ import annotations

import threading
from typing import Final

from ._errors import ConfigurationError
from ._forksafe import reinit_at_fork
from ._group_types import Bucket, validate_bucket

__all__ = ["efficiency_bucket", "lookup", "set_efficiency_bucket", "validate_category"]

# Category -> bucket. Keys ending in "/*" match a prefix; exact keys win, then
# the longest prefix; anything else is unbucketed.
_DEFAULT_TABLE: Final[dict[str, Bucket | None]] = {
    "idle/*": Bucket.IDLE,
    "wasted/*": Bucket.WASTED,
    # Collector-side loop waits and the initial buffer fill overlap productive
    # work of other processes in the same trace: bucketing them would charge
    # one stretch of wall clock twice.
    "idle/refit_event_wait": None,
    "idle/generation_limit_pause": None,
    "init/total": None,
}
_table: dict[str, Bucket | None] = dict(_DEFAULT_TABLE)
_cache: dict[str, tuple[str, Bucket | None]] = {}
_CACHE_MAX = 4096
_lock = threading.Lock()
reinit_at_fork(_lock)  # a lock held at fork() is made new in the child


def validate_category(category: object, key: str, *, pattern: bool = False) -> str:
    """*category* checked; with *pattern*, a prefix pattern (a trailing ``"/*"``) too.

    Raises:
        ConfigurationError: naming *key*, the value and what is accepted.
    """
    if not isinstance(category, str):
        body = ""
    elif pattern and category.endswith("/*"):
        body = category[:-2]
    else:
        body = category
    if (
        not isinstance(category, str)
        or not body.strip()
        or body.strip() != body
        or body.startswith("/")
        or body.endswith("/")
        or "*" in body  # no wildcard in a category: a key with one would match nothing
    ):
        form = " or a prefix pattern like 'stall/*'" if pattern else ""
        star = "no '*' but the pattern's trailing '/*'" if pattern else "no '*'"
        raise ConfigurationError(
            f"{key}: {category!r} is not accepted; accepted: a category like "
            f"'idle/buffer_starvation'{form} (non-empty, no surrounding whitespace or "
            f"slashes, {star})"
        )
    return category


def set_efficiency_bucket(category: str, bucket: Bucket | None) -> None:
    """Override the bucket of an efficiency *category* (``None``: unbucketed).

    *category* is exact (``"idle/refit_bubble"``) or a prefix pattern
    (``"stall/*"``). Declare a wait unbucketed when other processes in the same
    trace do productive work during it, so the wall clock is not charged twice.

    Example:
        >>> set_efficiency_bucket("stall/*", Bucket.IDLE)
        >>> set_efficiency_bucket("idle/warmup", None)
    """
    # A '*' is no part of a category (spans refuse it too): only the trailing '/*'.
    key = validate_category(category, "set_efficiency_bucket(category)", pattern=True)
    validated = validate_bucket(bucket, "set_efficiency_bucket(bucket)", allow_none=True)
    with _lock:
        _table[key] = validated
        _cache.clear()


def efficiency_bucket(category: str) -> Bucket | None:
    """The bucket an efficiency span of *category* carries.

    Example:
        >>> efficiency_bucket("idle/buffer_starvation")
        <Bucket.IDLE: 'idle'>
        >>> efficiency_bucket("idle/refit_event_wait") is None
        True
    """
    return lookup(category)[1]


def lookup(category: str) -> tuple[str, Bucket | None]:
    """*category*'s span name (``rl.<category with / replaced by .>``) and bucket.

    Raises:
        ConfigurationError: *category* is not one (see :func:`validate_category`).
    """
    try:
        hit = _cache.get(category)
        if hit is not None:
            return hit
    except TypeError:  # unhashable (a list, say): no category, as the check below says
        pass
    validate_category(category, "efficiency category")
    with _lock:
        if category in _table:
            bucket = _table[category]
        else:
            bucket = None
            best = -1
            for key, value in _table.items():
                if key.endswith("/*") and category.startswith(key[:-1]) and len(key) > best:
                    best, bucket = len(key), value
        result = ("rl." + category.replace("/", "."), bucket)
        if len(_cache) >= _CACHE_MAX:  # categories made up per call: bounded all the same
            _cache.clear()
        _cache[category] = result
    return result
