"""AReaL's own trace files, read as asynctrace's: buckets, steps, roles and clocks.

AReaL's ``perf_tracer`` writes Chrome complete events without span ids: a
``cat`` (its category), ``args.rank`` / ``args.role`` on every event, and
``args.global_step`` where the caller passed one; timestamps count from the
tracer's start. :class:`ArealEvents` turns such events into what the rollup
reads: the bucket of the category (:data:`DEFAULT_BUCKETS`, the table
``asynctrace_contrib.areal`` records with, overridable with ``--bucket-map``),
``rl.iteration`` from ``global_step``, and a parent: the smallest event of the
same process whose interval contains it, one on the same thread id when there
is one (AReaL runs many async tasks on one thread id, so the process, not the
thread, is the scope; an event that crosses another is never its parent).
"""

from __future__ import annotations

import json
import math
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

_SLACK_US: Final = 1.0
"""How far (µs) an event may end past the one that contains it: AReaL floors ``ts`` and
``dur`` to whole microseconds (and ``dur`` to at least 1), so a scope that ends with its
parent can be written ending 1 µs after it."""

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

    def __init__(
        self,
        buckets: Mapping[str, str | None] | None = None,
        first_ids: Mapping[int, int] | None = None,
    ) -> None:
        """*first_ids*: per origin, the first span id :meth:`drain` gives its events (as
        :attr:`first_ids` recorded it in an earlier drain of the same events); an
        origin not listed numbers on from the ids given before it."""
        self.buckets = dict(DEFAULT_BUCKETS if buckets is None else buckets)
        self.count = 0
        self.outside_steps = 0
        self.outside_steps_s = 0.0
        self.without_ts = 0  # complete events without a timestamp: not intervals, left out
        self.first_ids: dict[int, int] = {}  # per origin drained, its first span id
        self._given = dict(first_ids or {})
        self._held: dict[int, list[dict[str, Any]]] = {}
        self._next_id = 1  # span ids count on over the origins, in the order drained

    def take(self, event: dict[str, Any], origin: int) -> bool:
        """Hold *event* if it is AReaL's (``True``); leave any other event alone."""
        if not is_areal_event(event):
            return False
        self._held.setdefault(origin, []).append(event)
        self.count += 1
        return True

    def drain(self) -> Iterator[tuple[dict[str, Any], int]]:
        """The held events as asynctrace's complete events, each with its origin.

        Parents first, then the events in end order (ties: the longer one
        last), the order the rollup reads: a parent is the smallest event of
        the process that contains the child's interval (one on the same
        thread id when there is one), so a long event that crosses a step
        (starts inside, ends after it) is not taken for the parent of what
        runs in the step. Bucketed events under no step are counted in
        :attr:`outside_steps` (and ``outside_steps_s``), events without a
        timestamp (left out) in :attr:`without_ts`; :meth:`notes` says the former.
        """
        for origin, events in self._held.items():
            self._next_id = self._given.get(origin, self._next_id)
            self.first_ids[origin] = self._next_id
            out: list[tuple[float, float, int, dict[str, Any]]] = []
            for index, parented in enumerate(self._parented(origin, events)):
                if parented is None:  # no timestamp: not an interval
                    self.without_ts += 1
                    continue
                args, start, end, in_step = parented
                if args.get("rl.bucket") is not None and not in_step:
                    self.outside_steps += 1
                    self.outside_steps_s += (end - start) / 1e6
                out.append((end, -start, index, args))
            out.sort(key=lambda item: item[:3])
            for end, minus_start, index, args in out:
                event = {**events[index], "args": args}
                if end + minus_start < float(event.get("dur") or 0):  # clipped to its parent
                    event["dur"] = end + minus_start
                yield event, origin
        self._held.clear()

    def notes(self) -> list[str]:
        """What :meth:`drain` left out of every step's figures, one sentence each (none:
        ``[]``). Events without a timestamp are not among them: the caller counts those
        with the other events without a time.

        Example:
            >>> events = ArealEvents()
            >>> events.outside_steps, events.outside_steps_s = 2, 1.5
            >>> events.notes()[0][:54]
            '2 bucketed AReaL event(s) (1.500s) lie under no step ('
        """
        out = []
        if self.outside_steps:
            out.append(
                f"{self.outside_steps} bucketed AReaL event(s) "
                f"({self.outside_steps_s:.3f}s) lie under no step (no unbucketed scope "
                "with args.global_step contains them); they are in no step's figures"
            )
        return out

    def _parented(
        self, origin: int, events: list[dict[str, Any]]
    ) -> list[tuple[dict[str, Any], float, float, bool] | None]:
        """``(args, start, end, in a step)`` per event (in *events*' order; ``None``: no
        timestamp), args with ids."""
        trace_id = f"{origin + 1:032x}"
        done: list[tuple[dict[str, Any], float, float, bool] | None] = [None] * len(events)
        order = sorted(
            (i for i, e in enumerate(events) if isinstance(e.get("ts"), int | float)),
            key=lambda i: (events[i]["ts"], -(events[i].get("dur") or 0), i),
        )
        # open events: (start, end, tid, span id, args, a step or in one). A thread's
        # scopes nest, so its innermost open one is the top of its stack: found at once.
        # Only an event whose thread has none that contains it looks through them all.
        active: list[tuple[float, float, object, str, dict[str, Any], bool]] = []
        stacks: dict[object, list[tuple[float, float, object, str, dict[str, Any], bool]]] = {}
        kept = 64  # prune the list of all open events when it doubles
        # per thread: until when an event that crossed another is open (stacks then
        # do not nest, and the tightest container is looked for among all)
        tangled: dict[object, float] = {}
        for i in order:
            event = events[i]
            start = float(event["ts"])
            end = start + float(event.get("dur") or 0)
            tid = event.get("tid")
            stack = stacks.setdefault(tid, [])
            while stack and stack[-1][1] < start:
                stack.pop()
            parent = None
            if stack and stack[-1][1] + _SLACK_US >= end and tangled.get(tid, -math.inf) < start:
                parent = stack[-1]  # nested: the thread's innermost open event
            if parent is None:
                active = [a for a in active if a[1] >= start]
                kept = max(64, 2 * len(active))
                parent = _containing(active, tid, end)
            elif len(active) > kept:
                active = [a for a in active if a[1] >= start]
                kept = max(64, 2 * len(active))
            if parent is not None and end > parent[1]:
                end = parent[1]  # AReaL's rounding (see _SLACK_US): clipped to its parent
            span_id = f"{self._next_id:016x}"
            self._next_id += 1
            args = dict(event["args"])
            args["trace_id"] = trace_id
            args["span_id"] = span_id
            if parent is not None:
                args["parent_span_id"] = parent[3]
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
            in_step = (parent is not None and parent[5]) or (
                bucket is None and "rl.iteration" in args
            )
            entry = (start, end, tid, span_id, args, in_step)
            active.append(entry)
            if stack and stack[-1][1] + _SLACK_US < end:  # crosses the innermost: not nested
                tangled[tid] = max(end, tangled.get(tid, -math.inf))  # scan until it ends
            stack.append(entry)
            done[i] = (args, start, end, in_step)
        return done


def _containing(
    active: list[tuple[float, float, object, str, dict[str, Any], bool]], tid: object, end: float
) -> tuple[float, float, object, str, dict[str, Any], bool] | None:
    """The open event that contains one ending at *end* (all open ones start before it):
    of the same thread *tid* if any, else the tightest; ``None`` if none contains it."""
    parent = None
    for candidate in active:
        if candidate[1] + _SLACK_US < end:  # does not contain it (it crosses)
            continue
        if parent is None:
            parent = candidate
            continue
        same, best_same = candidate[2] == tid, parent[2] == tid
        tighter = (candidate[1] - candidate[0]) <= (parent[1] - parent[0])
        if (same and not best_same) or (same == best_same and tighter):
            parent = candidate
    return parent
