"""The waterfall of one step: the spans of its trace that start inside it, as a tree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..rollup import StepRow
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


def read_waterfall(
    collected: Collected, step: StepRow, chosen_by: str, progress: bool
) -> Waterfall:
    """Second pass: the spans of the step's trace that start inside it, as a tree."""
    by_parent: dict[str, list[tuple[float, int, dict[str, Any], int]]] = {}
    root: tuple[float, int, dict[str, Any], int] | None = None
    collected_spans = 0
    seq = roots = 0
    bar = Progress(file_size(collected.paths), "asynctrace report", enabled=progress)
    try:
        for index, path in enumerate(collected.paths):
            for event, _ in iter_file(path, ReadStats(), bar):
                if event.get("ph") != "X":
                    continue
                args = event.get("args")
                if not isinstance(args, dict) or args.get("trace_id") != step.trace_id:
                    continue
                ts = event.get("ts")
                if not isinstance(ts, (int, float)) or not step.start <= ts <= step.end:
                    continue
                seq += 1
                origin = collected.origins.origin(index, event.get("pid"))
                item = (float(ts), seq, event, origin)
                if args.get("span_id") == step.span_id:
                    roots += 1
                    root = item
                elif collected_spans < MAX_WATERFALL_COLLECT:
                    collected_spans += 1
                    parent = str(args.get("parent_span_id"))
                    by_parent.setdefault(parent, []).append(item)
    finally:
        bar.close()
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
    past_collect = seq - roots - collected_spans
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
    return Waterfall(step, process, spans, hidden, chosen_by, why)


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
