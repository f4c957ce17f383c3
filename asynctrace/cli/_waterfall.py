"""The waterfall of one step: the spans of its trace that start inside it, as a tree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..rollup import StepRow
from ._areal import ArealEvents, is_areal_event
from ._collect import Collected
from ._common import Progress
from ._inputs import file_size
from ._origins import Origins
from ._read_stats import ReadStats
from ._records import iter_file

__all__ = [
    "MAX_WATERFALL_COLLECT",
    "MAX_WATERFALL_ROWS",
    "Waterfall",
    "WaterfallSpan",
    "read_waterfall",
]

MAX_WATERFALL_ROWS = 400
MAX_WATERFALL_COLLECT = 50_000


@dataclass
class WaterfallSpan:
    """One row of the waterfall."""

    depth: int
    name: str
    start: float
    end: float
    bucket: str | None
    span_id: str
    process: str
    attributes: list[tuple[str, str]]
    stall: bool = False  # an event-loop stall (group loop_stall): drawn as a marker


@dataclass
class Waterfall:
    """The spans of one step, depth first."""

    step: StepRow
    process: str
    spans: list[WaterfallSpan]
    hidden: int = 0  # spans of the step's trace starting inside it that are not drawn
    chosen_by: str = "slowest step"
    hidden_why: list[str] = field(default_factory=list)  # ``"12 past the 400-row limit"``
    copies: int = 0  # spans whose ids were already taken (a file read twice): drawn once


_SHOWN_ATTRIBUTES = (
    "rl.iteration",
    "rl.bucket",
    "rl.efficiency.category",
    "rl.idle.polls",
    "code.function.name",
    "code.file.path",
    "code.line.number",
    "asynctrace.stall.task",
    "asynctrace.stall.samples",
)


_Item = tuple[float, int, dict[str, Any], int]  # (start, arrival, event, origin)


class _Gather:
    """The spans of one step's trace that start inside it, by parent; a copy of one
    already gathered (the same file read twice) is skipped and counted."""

    def __init__(self, step: StepRow) -> None:
        self.step = step
        self.by_parent: dict[str, list[_Item]] = {}
        self.root: _Item | None = None
        self.seq = self.roots = self.collected = self.copies = 0
        self._ids: set[str] = set()  # span ids of the root and of the spans collected

    def add(self, event: dict[str, Any], origin: int) -> None:
        """Take the complete *event* (of the step's trace), if it starts in the step."""
        step = self.step
        ts = event.get("ts")
        if not isinstance(ts, (int, float)) or not step.start <= ts <= step.end:
            return
        args = event["args"]
        span_id = args.get("span_id")
        if span_id.__class__ is str:
            if span_id in self._ids:
                self.copies += 1
                return
            if span_id == step.span_id or self.collected < MAX_WATERFALL_COLLECT:
                self._ids.add(span_id)
        self.seq += 1
        item = (float(ts), self.seq, event, origin)
        if span_id == step.span_id:
            self.roots += 1
            self.root = item
        elif self.collected < MAX_WATERFALL_COLLECT:
            self.collected += 1
            self.by_parent.setdefault(str(args.get("parent_span_id")), []).append(item)


def read_waterfall(
    collected: Collected, step: StepRow, chosen_by: str, progress: bool
) -> Waterfall:
    """Second pass: the spans of the step's trace that start inside it, as a tree.

    A span whose ids were already taken (a copy of its file read too) is drawn
    once. AReaL's own events (no ids) of the step's process are given the ids
    the rollup read them with: the same drain, numbering from the same first id.
    """
    gather = _Gather(step)
    areal = ArealEvents(collected.areal_buckets, collected.areal_first_ids)
    origin_of = collected.origins.origin
    bar = Progress(file_size(collected.paths), "asynctrace report", enabled=progress)
    try:
        for index, path in enumerate(collected.paths):
            for event, _ in iter_file(path, ReadStats(), bar):
                if event.get("ph") != "X":
                    continue
                args = event.get("args")
                if not isinstance(args, dict):
                    continue
                if args.get("trace_id") == step.trace_id:
                    gather.add(event, origin_of(index, event.get("pid")))
                elif is_areal_event(event):
                    origin = origin_of(index, event.get("pid"))
                    if origin == step.origin:
                        areal.take(event, origin)
    finally:
        bar.close()
    for event, origin in areal.drain():
        if event["args"].get("trace_id") == step.trace_id:
            gather.add(event, origin)
    by_parent, root, roots, seq = gather.by_parent, gather.root, gather.roots, gather.seq
    spans: list[WaterfallSpan] = []
    past_rows = 0
    stack = [(0, root)] if root is not None else []
    while stack:
        depth, item = stack.pop()
        assert item is not None
        if len(spans) >= MAX_WATERFALL_ROWS:
            past_rows += 1
        else:
            spans.append(_row(collected.origins, depth, item))
        span_id = item[2]["args"].get("span_id")
        children = by_parent.pop(str(span_id), [])
        for child in sorted(children, reverse=True):
            stack.append((depth + 1, child))
    # Every matching span that is not a row: past the row limit, past the collect
    # limit, or not reached from the step (its parent is not among the spans
    # collected, or it repeats the step's span id).
    past_collect = seq - roots - gather.collected
    unreached = sum(map(len, by_parent.values())) + max(0, roots - 1)
    why = [
        f"{count} {what}"
        for count, what in (
            (past_rows, f"past the {MAX_WATERFALL_ROWS}-row limit"),
            (past_collect, f"past the first {MAX_WATERFALL_COLLECT:,} collected"),
            (unreached, "whose parent is not among the spans collected"),
        )
        if count
    ]
    hidden = past_rows + past_collect + unreached
    process = collected.origins.label(step.origin)
    return Waterfall(step, process, spans, hidden, chosen_by, why, gather.copies)


def _row(
    origins: Origins, depth: int, item: tuple[float, int, dict[str, Any], int]
) -> WaterfallSpan:
    ts, _, event, origin = item
    args = event["args"]
    dur = event.get("dur", 0)
    end = ts + (dur if isinstance(dur, (int, float)) else 0)
    bucket = args.get("rl.bucket")
    attributes = [(k, str(args[k])) for k in _SHOWN_ATTRIBUTES if k in args]
    attributes.extend(
        (str(k), str(v))
        for k, v in list(args.items())[:12]
        if k not in _SHOWN_ATTRIBUTES and k not in ("trace_id", "parent_span_id")
    )
    return WaterfallSpan(
        depth=depth,
        name=str(event.get("name")),
        start=ts,
        end=end,
        bucket=None if bucket is None else str(bucket),
        span_id=str(args.get("span_id")),
        process=origins.label(origin),
        attributes=attributes,
        stall=args.get("asynctrace.group") == "loop_stall",
    )
