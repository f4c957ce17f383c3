"""Spans written twice among ``convert``'s inputs (the same file given under two names)."""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["Repeats"]

_REPEAT_WINDOW = 1 << 16  # spans whose ids are remembered to find a span written twice


class Repeats:
    """Spans whose (trace id, span id) was already written, among the last
    :data:`_REPEAT_WINDOW` spans with ids.

    The inputs are merged by end time, so two copies of one span (the same
    file read twice under two names) arrive next to each other; a bounded
    window finds them without holding every id of a large run.
    """

    __slots__ = ("_keys", "_order", "count")

    def __init__(self) -> None:
        self._keys: set[int] = set()
        self._order: deque[int] = deque()
        self.count = 0

    def seen(self, event: dict[str, Any]) -> bool:
        """Whether the complete *event* repeats a span already written (counted if so)."""
        args = event.get("args")
        if args.__class__ is not dict:
            return False
        span_id = args.get("span_id")
        if span_id.__class__ is not str:
            return False
        trace_id = args.get("trace_id")
        key = hash((trace_id if trace_id.__class__ is str else None, span_id))
        keys = self._keys
        if key in keys:
            self.count += 1
            return True
        keys.add(key)
        order = self._order
        order.append(key)
        if len(order) > _REPEAT_WINDOW:
            keys.discard(order.popleft())
        return False
