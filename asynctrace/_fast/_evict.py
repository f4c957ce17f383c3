"""Which attributes a span past its limit keeps: the newest, and asynctrace's stamps."""

from __future__ import annotations

from collections.abc import Container, Mapping
from itertools import islice
from typing import Any, Final

from .._semconv import (
    CANCELLED,
    GROUP,
    RL_BUCKET,
    RL_EFFICIENCY_CATEGORY,
    RL_ITERATION,
    RL_SESSION_ID,
    RL_TASK_ID,
    TRUNCATED,
)

__all__ = [
    "STAMP_KEYS",
    "evicted_early",
    "keep_stamps",
    "kept_key",
    "newest_and_stamps",
    "newest_good",
    "oldest_evictable",
    "trim",
]

STAMP_KEYS: frozenset[str] = frozenset(
    {GROUP, RL_BUCKET, RL_ITERATION, RL_TASK_ID, RL_SESSION_ID, RL_EFFICIENCY_CATEGORY}
    | {CANCELLED, TRUNCATED}
)
"""The attributes asynctrace stamps on its spans (what goodput and the readers classify by).

Past ``max_attributes`` they are never the ones evicted (the oldest other
attribute is), and ``max_attribute_length`` never cuts them: a step's leaf
given 200 metrics keeps its ``rl.bucket`` and ``rl.iteration``.
"""


def newest_good(attributes: dict[Any, Any], count: int) -> tuple[dict[str, Any], int]:
    """The newest *count* entries of *attributes* whose keys a span keeps (as
    :func:`~._span.good_keys` keeps them), and how many entries are left out.

    Walks from the end and stops at *count*: a mapping of 10,000 keys past a
    limit of 128 costs 128 steps, not a pass over all of them.
    """
    kept: list[tuple[str, Any]] = []
    for key, value in reversed(attributes.items()):
        key = key if key.__class__ is str else kept_key(key)
        if key:
            kept.append((key, value))
            if len(kept) == count:
                break
    kept.reverse()
    newest = dict(kept)
    return newest, len(attributes) - len(newest)


def kept_key(key: Any) -> str | None:
    """A key that is not exactly ``str`` as the SDK keeps it (``str(key)``), or ``None``."""
    if isinstance(key, str):
        return key
    cls: Any = type(key)
    if key is None or (cls.__str__ is _OBJECT_STR and cls.__repr__ is _OBJECT_REPR):
        return None
    try:
        return str(key)
    except Exception:
        return None


_OBJECT_STR: Any = object.__str__
_OBJECT_REPR: Any = object.__repr__


def evicted_early(
    own: list[str], attributes: Mapping[Any, Any], keys: Container[str], limit: int
) -> int:
    """How many of *own* (a span's keys, oldest first) that *attributes* sets again
    set_attribute would evict before reaching them, setting *attributes* one by one.

    *keys* holds the keys *attributes* sets (as the span keeps them).

    Such a key is dropped twice that way: its old value, then (when not among
    the newest) its new one. Runs only until every such key is reached or
    evicted: some ``limit`` steps, whatever the size of *attributes*.
    """
    protected = limit > len(STAMP_KEYS)  # then a stamp is never evicted
    pending = {key for key in own if key in keys}
    if protected:
        pending -= STAMP_KEYS
    if not pending or limit <= 0:
        return 0
    live = dict.fromkeys(own)
    early = 0
    for key in attributes:
        key = key if key.__class__ is str else kept_key(key)
        if not key:
            continue
        if key in live:
            del live[key]
            pending.discard(key)
        elif len(live) >= limit:
            oldest = oldest_evictable(live)
            del live[oldest]
            if oldest in pending:
                early += 1
                pending.discard(oldest)
        live[key] = None
        if not pending:
            break
    return early


def oldest_evictable(attributes: dict[str, Any]) -> str:
    """The oldest key that is not a stamp (the stamps come first: a few steps at most).

    Only stamps (a limit smaller than their count): the oldest of them.
    """
    for key in attributes:
        if key not in STAMP_KEYS:
            return key
    return next(iter(attributes))


def keep_stamps(attributes: dict[str, Any], limit: int) -> tuple[dict[str, Any], int]:
    """The newest *limit* of *attributes*, the stamps among them whatever their age,
    and how many were left out.

    The stamps come first in the result (as a span starts with them). For the
    rare path only: a span past its limit.
    """
    excess = len(attributes) - limit
    if excess <= 0:
        return attributes, 0
    stamps = [key for key in attributes if key in STAMP_KEYS] if limit else []
    if not stamps:
        return (dict(islice(attributes.items(), excess, None)) if limit else {}), excess
    if len(stamps) >= limit:  # (a limit below their count) the newest of them only
        return {key: attributes[key] for key in stamps[len(stamps) - limit :]}, excess
    kept = {key: attributes[key] for key in stamps}
    others = [item for item in attributes.items() if item[0] not in STAMP_KEYS]
    kept.update(others[len(others) - (limit - len(stamps)) :])
    return kept, excess


def trim(items: list[Any], limit: int) -> int:
    """Evict the oldest of *items* until *limit* are left (other threads may too): how many."""
    evicted = 0
    while len(items) > limit:
        try:
            del items[0]
        except IndexError:  # emptied by another thread meanwhile
            break
        evicted += 1
    return evicted


_STAMP_ORDER: Final = tuple(sorted(STAMP_KEYS))


def newest_and_stamps(
    attributes: Mapping[Any, Any], limit: int, bad: int = 0
) -> tuple[dict[str, Any], int]:
    """The newest *limit* of *attributes* and, whatever their age, the stamp keys among
    them (:data:`STAMP_KEYS`), with how many were left out (plus *bad*, the keys
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
