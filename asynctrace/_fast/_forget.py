"""Bounding the open spans a provider tracks: the oldest hundredth kept, a tenth forgotten."""

from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import islice
from typing import Any, Final

__all__ = ["MAX_OPEN_SPANS", "forget_open_spans", "warn_forgotten"]

logger = logging.getLogger("asynctrace")

MAX_OPEN_SPANS: Final = 100_000
"""How many open spans a provider (or the SDK path's tracker) keeps, by default."""


def forget_open_spans(
    opened: dict[int, Any], max_open: int, mark: Callable[[Any], None] | None = None
) -> list[Any]:
    """Take a tenth of *max_open* out of *opened* (open spans, oldest first): the spans.

    The oldest hundredth (at most 1,000) stays: a job's or a step's umbrella,
    open for the whole run, is among the oldest, while spans that were never
    ended pile up after it. A tenth at a time, so the check on the hot path
    is a length. Another thread may end a span meanwhile: it is then not
    taken.
    """
    keep = min(1_000, max_open // 100)
    taken = []
    # From a copy (one C call): walking the dict itself, a collection run by an
    # allocation may let another thread end a span, and the walk would raise.
    for span_id in list(islice(opened.copy(), keep, keep + max(1, max_open // 10))):
        span = opened.get(span_id)
        if span is None:
            continue
        if mark is not None:
            mark(span)  # its claim token, before it leaves: an end() meanwhile uses one
        if opened.pop(span_id, None) is span:
            taken.append(span)
    return taken


def warn_forgotten(max_open: int, counter: str) -> None:
    """The one warning that open spans were forgotten past *max_open* (see *counter*)."""
    logger.warning(
        "asynctrace: more than %d spans are open (started and never ended?); the "
        "longest-open past the oldest are forgotten: not truncated at shutdown, still "
        "exported if they end (counted in %s)",
        max_open,
        counter,
    )
