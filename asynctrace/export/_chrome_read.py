"""Chrome Trace Event JSON lines read back: every line parsed, or skipped and counted.

The readers take what :mod:`asynctrace.export.chrome` writes, and skip a
malformed line (torn, not an object, overlong, or an event of the wrong
field types) as the ``asynctrace`` commands do.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._jsonl import MAX_LINE_BYTES

__all__ = ["ChromeTrace", "event_ok", "iter_chrome_lines", "read_chrome_trace"]


@dataclass
class ChromeTrace:
    """Events read back from a JSONL trace, and how many lines were skipped."""

    events: list[dict[str, Any]]
    skipped: int

    def complete_events(self) -> list[dict[str, Any]]:
        """The ``"ph": "X"`` events.

        Example:
            >>> ChromeTrace([{"ph": "X"}, {"ph": "M"}], 0).complete_events()
            [{'ph': 'X'}]
        """
        return [e for e in self.events if e.get("ph") == "X"]


# MAX_LINE_BYTES (the writers never write a longer line): a longer line is
# skipped and counted, never parsed, as ``asynctrace`` commands do.
_SKIP_CHUNK = 1 << 20  # bytes read at a time past the start of an overlong line
_MAX_US = 1e18  # about 31,700 years of microseconds: any real timestamp or duration


def iter_chrome_lines(path: str | os.PathLike[str]) -> Iterator[dict[str, Any] | None]:
    """Yield each line of a JSONL trace parsed, or ``None`` for a malformed line.

    Malformed: not JSON (a torn line, or nested deeper than the interpreter's
    stack), not an object, longer than :data:`MAX_LINE_BYTES` (skipped without
    being held whole), or a trace event whose fields have the wrong types (see
    :func:`event_ok`).
    """
    with open(path, "rb") as stream:
        for line in iter(functools.partial(stream.readline, MAX_LINE_BYTES + 1), b""):
            if len(line) > MAX_LINE_BYTES and line[-1] != 10:  # an overlong line's start
                _skip_rest(stream)
                yield None
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                yield None
                continue
            if obj.__class__ is not dict or ("ph" in obj and not event_ok(obj)):
                yield None
                continue
            yield obj


def _skip_rest(stream: Any) -> None:
    """Read past the end of the current line, a chunk at a time."""
    while True:
        chunk = stream.readline(_SKIP_CHUNK)
        if not chunk or chunk[-1] == 10:  # end of file, or the line's newline
            return


def _real(value: object) -> bool:
    """A finite int or float (not a bool) within 1e18 µs: a time or a duration."""
    if value.__class__ is bool or not isinstance(value, (int, float)):
        return False
    return -_MAX_US <= value <= _MAX_US  # False for NaN; no float conversion of a big int


def event_ok(event: dict[str, Any]) -> bool:
    """Whether a trace event's fields have the types a reader relies on.

    ``ph`` is a string; ``name``, when present, a string; ``pid`` and ``tid``,
    when present, an integer or a string; ``ts`` and ``dur``, when present, a
    finite number within 1e18 µs, ``dur`` not negative. The ``asynctrace``
    commands skip and count the same events.

    Example:
        >>> event_ok({"ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1})
        True
        >>> event_ok({"ph": "X", "ts": float("nan")}), event_ok({"ph": "X", "dur": -1})
        (False, False)
    """
    if event["ph"].__class__ is not str:
        return False
    name = event.get("name")
    if name is not None and name.__class__ is not str:
        return False
    for key in ("pid", "tid"):
        value = event.get(key)
        if value is not None and (value.__class__ is bool or not isinstance(value, (int, str))):
            return False
    ts = event.get("ts")
    if ts is not None and not _real(ts):
        return False
    dur = event.get("dur")
    return dur is None or (_real(dur) and dur >= 0)


def read_chrome_trace(path: str | os.PathLike[str]) -> ChromeTrace:
    """Read a ``traces-r*.jsonl`` file, skipping (and counting) malformed lines.

    A process killed while writing can leave one torn last line; it is
    skipped, every complete line is kept. Also skipped and counted: a line
    that is not a JSON object (or is nested too deeply to parse), a line
    longer than 64 MiB (never read whole), and a trace event whose fields
    have the wrong types (a ``ts`` that is NaN or a string, a negative
    ``dur``, a ``pid`` that is a list), as the ``asynctrace`` commands skip
    them.

    Example:
        >>> trace = read_chrome_trace("traces-r0.jsonl")  # doctest: +SKIP
        >>> len(trace.complete_events()), trace.skipped  # doctest: +SKIP
        (1200, 0)
    """
    events: list[dict[str, Any]] = []
    skipped = 0
    for obj in iter_chrome_lines(path):
        if obj is None:
            skipped += 1
        else:
            events.append(obj)
    return ChromeTrace(events, skipped)
