"""AReaL's own trace files, read as asynctrace's: buckets, steps, roles and clocks.

AReaL's ``perf_tracer`` writes Chrome complete events without span ids: a
``cat`` (its category), ``args.rank`` / ``args.role`` on every event, and
``args.global_step`` where the caller passed one; timestamps count from the
tracer's start. :class:`ArealEvents` turns such events into what the rollup
reads: the bucket of the category (:data:`DEFAULT_BUCKETS`, the table
``asynctrace_contrib.areal`` records with, overridable with ``--bucket-map``),
``rl.iteration`` from ``global_step``, and a parent: the innermost event of the
same process whose interval contains it (AReaL runs many async tasks on one
thread id, so the process, not the thread, is the scope).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from ._common import CliError

__all__ = [
    "DEFAULT_BUCKETS",
    "EPOCH_US",
    "ArealEvents",
    "is_areal_event",
    "parse_bucket_map",
    "process_from_name",
]

DEFAULT_BUCKETS: Final[Mapping[str, str | None]] = {
    "compute": "productive",
    "comm": "overhead",
    "io": "overhead",
    "sync": "idle",
    "scheduler": "overhead",
    "instr": "overhead",
    "misc": None,
}
"""AReaL category -> bucket (``None``: unbucketed); a category not listed is ``misc``."""

_BUCKETS: Final = ("productive", "overhead", "idle", "wasted")
_ALIASES: Final = {
    "communication": "comm",
    "synchronization": "sync",
    "scheduling": "scheduler",
    "instrumentation": "instr",
}
EPOCH_US: Final = 1e14
"""A timestamp below this (about 3 years, in µs) counts from a process start, not the epoch."""

_PROCESS_NAME = re.compile(r"^(?:\[(?P<role>[^\]]+)\] )?Rank (?P<rank>\d+), Process")


def parse_bucket_map(text: str | None) -> dict[str, str | None]:
    """``--bucket-map``: ``CATEGORY=BUCKET,...`` (or a JSON file of that mapping) over the default.

    ``none`` makes a category unbucketed.

    Example:
        >>> parse_bucket_map("io=idle,misc=overhead")["io"]
        'idle'
    """
    table: dict[str, str | None] = dict(DEFAULT_BUCKETS)
    if not text:
        return table
    pairs: list[tuple[str, Any]]
    path = Path(text)
    if text.endswith(".json") or path.is_file():
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"--bucket-map: {text}: not a readable JSON object ({exc})") from None
        if not isinstance(loaded, dict):
            raise CliError(f"--bucket-map: {text}: expected a JSON object of category: bucket")
        pairs = list(loaded.items())
    else:
        pairs = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            category, sep, bucket = part.partition("=")
            if not sep:
                raise CliError(f"--bucket-map: {part!r} is not CATEGORY=BUCKET")
            pairs.append((category, bucket))
    for category, bucket in pairs:
        name = _category(category)
        value = None if bucket is None else str(bucket).strip().lower()
        if value in (None, "none", ""):
            table[name] = None
        elif value in _BUCKETS:
            table[name] = value
        else:
            raise CliError(
                f"--bucket-map: {category}={bucket}: the bucket must be one of "
                f"{', '.join(_BUCKETS)} or none"
            )
    return table


def _category(raw: object) -> str:
    text = str(raw).strip().lower() if raw is not None else ""
    return _ALIASES.get(text, text) or "misc"


def is_areal_event(event: Mapping[str, Any]) -> bool:
    """A complete event as AReaL writes it: ``args.rank``, no span id."""
    args = event.get("args")
    return (
        event.get("ph") == "X"
        and isinstance(args, dict)
        and "rank" in args
        and "span_id" not in args
        and "trace_id" not in args
    )


def process_from_name(name: object) -> tuple[int | None, str | None]:
    """Rank and role from AReaL's process name (``"[actor] Rank 0, Process"``).

    Example:
        >>> process_from_name("[actor] Rank 3, Process")
        (3, 'actor')
    """
    match = _PROCESS_NAME.match(name) if isinstance(name, str) else None
    if match is None:
        return None, None
    return int(match["rank"]), match["role"]


class ArealEvents:
    """Collects AReaL's events per process; :meth:`drain` gives them ids, parents, buckets."""

    def __init__(self, buckets: Mapping[str, str | None] | None = None) -> None:
        self.buckets = dict(DEFAULT_BUCKETS if buckets is None else buckets)
        self.count = 0
        self._held: dict[int, list[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    def take(self, event: dict[str, Any], origin: int) -> bool:
        """Hold *event* if it is AReaL's (``True``); leave any other event alone."""
        if not is_areal_event(event):
            return False
        self._held.setdefault(origin, []).append(event)
        self.count += 1
        return True

    def drain(self) -> Iterator[tuple[dict[str, Any], int]]:
        """The held events as asynctrace's complete events, each with its origin."""
        for origin, events in self._held.items():
            trace_id = f"{origin + 1:032x}"
            timed = sorted(
                (e for e in events if isinstance(e.get("ts"), int | float)),
                key=lambda e: (e["ts"], -(e.get("dur") or 0)),
            )
            stack: list[tuple[float, str]] = []  # (end, span id) of the enclosing events
            for event in timed:
                start = float(event["ts"])
                end = start + float(event.get("dur") or 0)
                while stack and stack[-1][0] < end:
                    stack.pop()
                span_id = f"{next(self._ids):016x}"
                args = dict(event["args"])
                args["trace_id"] = trace_id
                args["span_id"] = span_id
                if stack:
                    args["parent_span_id"] = stack[-1][1]
                category = _category(event.get("cat"))
                if category not in self.buckets:
                    category = "misc"
                bucket = self.buckets[category]
                if bucket is not None:
                    args["rl.bucket"] = bucket
                else:
                    args["asynctrace.group"] = f"areal.{category}"
                step = args.get("global_step")
                if isinstance(step, int) and not isinstance(step, bool):
                    args["rl.iteration"] = step
                stack.append((end, span_id))
                yield {**event, "args": args}, origin
        self._held.clear()
