"""Which trace events every command can use: the types and bounds of their fields."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["event_ok", "negative_dur", "real_number", "usable_events"]

_IDS = (int, str)
_MAX_US = 1e18  # about 31,700 years of microseconds: any real timestamp or duration


def real_number(value: object, bound: float = sys.float_info.max) -> bool:
    """Whether *value* is an int or float (not a bool) within ``±bound``: not NaN, not an
    infinity, not an int no float holds (``float()`` of it would raise).

    Example:
        >>> real_number(3), real_number(float("nan")), real_number(10**400), real_number(True)
        (True, False, False, False)
    """
    if value.__class__ is bool or not isinstance(value, (int, float)):
        return False
    return -bound <= value <= bound


def event_ok(event: dict[str, Any]) -> bool:
    """Whether a trace event's fields have types every command can use.

    ``ph`` is a string; ``name``, when present, a string; ``pid`` and
    ``tid``, when present, an integer or a string (they are keys); ``ts`` and
    ``dur`` a finite number within 1e18 µs, ``dur`` not negative. Anything
    else (a ``pid`` that is a list, a ``ts`` that is a string or ``1e400``, a
    ``name`` that is a list, a ``true``, a ``dur`` of ``-5``) makes the line
    malformed, skipped and counted like a torn one.

    Example:
        >>> event_ok({"ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1})
        True
        >>> event_ok({"ph": "X", "ts": "1"})
        False
        >>> event_ok({"ph": "X", "ts": 1, "dur": float("inf")})
        False
        >>> event_ok({"ph": "X", "ts": 1, "dur": -1})
        False
    """
    if event["ph"].__class__ is not str:
        return False
    name = event.get("name")
    if name is not None and name.__class__ is not str:
        return False
    for key in ("pid", "tid"):
        value = event.get(key)
        if value is not None and (value.__class__ is bool or not isinstance(value, _IDS)):
            return False
    ts = event.get("ts")  # a time no float holds, NaN or an infinity: not a time
    if ts is not None and not real_number(ts, _MAX_US):
        return False
    dur = event.get("dur")  # ...and a duration is not negative
    return dur is None or (real_number(dur, _MAX_US) and dur >= 0)


def negative_dur(event: dict[str, Any]) -> bool:
    """Whether *event* (which :func:`event_ok` refused) has a negative ``dur``."""
    dur = event.get("dur")
    return real_number(dur, _MAX_US) and dur < 0  # type: ignore[operator]


def usable_events(events: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """The items of a document's event list that are usable events, and how many are not."""
    kept = [
        event
        for event in events
        if isinstance(event, dict) and ("ph" not in event or event_ok(event))
    ]
    return kept, len(events) - len(kept)
