"""``watch``'s view: the state drawn as a rich renderable, every string from a file shown
as it is."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ._common import escape_controls
from ._watch_state import MAX_PHASE_KEYS, State

__all__ = ["render"]

_BUCKET_STYLES = (
    ("productive", "green"),
    ("overhead", "yellow"),
    ("idle", "blue"),
    ("wasted", "red"),
    ("unattributed", "bright_black"),
)
_BAR = 30


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def _bar(step: dict[str, Any]) -> Any:
    from rich.text import Text

    wall = step.get("wall_s") or 0.0
    text = Text()
    if not wall > 0:
        return text
    used = 0
    for bucket, style in _BUCKET_STYLES:
        seconds = float(step.get(f"{bucket}_s") or 0.0)
        # within [0, 1] whatever the line says: 1e300 s of a 1e-300 s step is a full bar
        fraction = min(1.0, max(0.0, seconds / wall)) if seconds > 0 else 0.0
        cells = min(_BAR - used, round(fraction * _BAR))
        text.append("█" * cells, style=style)
        used += cells
    return text


def _percent(ratio: float) -> str:
    """*ratio* as a percentage, short whatever its size (a line may say anything)."""
    percent = ratio * 100
    return f"{percent:.1f}%" if abs(percent) < 1e6 else f"{percent:.3g}%"


def _text(value: object, style: str = "") -> Any:
    """A cell or line holding *value* as it is: never read as rich markup, control
    characters escaped (a name from a file never acts on the terminal)."""
    from rich.text import Text

    return Text(escape_controls(str(value)), style=style)


def render(state: State, directory: Path, stale: float, show: int, now: float) -> Any:
    """The view, as a rich renderable.

    Every string read from the files (and the directory's name) is shown with
    its control characters escaped and is never read as markup.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    wall = state.wall
    goodput = _percent(state.productive / wall) if wall > 0 else "-"
    parts.append(
        Text.assemble(
            ("asynctrace watch ", "bold"),
            escape_controls(str(directory)),
            f"  steps finished: {state.total_steps}  ranks: {len(state.ranks)}  ",
            f"goodput: {goodput}  ",
            *[(f"{bucket} ", style) for bucket, style in _BUCKET_STYLES],
        )
    )
    steps = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("rank", "iter", "step", "wall s", "goodput", "buckets"):
        steps.add_column(
            column, justify="left" if column in ("rank", "step", "buckets") else "right"
        )
    for path, _, step in list(state.steps)[-show:]:
        value = step.get("goodput")
        steps.add_row(
            _text(state.label(path)),
            _text("-" if step.get("iteration") is None else step["iteration"]),
            _text(step.get("name")),
            f"{float(step.get('wall_s') or 0.0):.3f}",
            "-" if value is None else _percent(value),
            _bar(step),
        )
    parts.append(steps)
    if state.steps:
        path, _, last = state.steps[-1]
        label = state.label(path)
        spans = sorted((last.get("spans") or {}).items(), key=lambda kv: -kv[1])[:5]
        # a line of its own, not the table's title: the title wraps at the table's width
        parts.append(
            _text(
                f"slowest leaf spans of the last step ({label}, iteration {last.get('iteration')})"
            )
        )
        slow = Table(box=None)
        slow.add_column("span")
        slow.add_column("seconds", justify="right")
        for name, seconds in spans:
            slow.add_row(_text(name), f"{seconds:.3f}")
        parts.append(slow)
    statuses = state.statuses
    if statuses:
        counts = ", ".join(f"{status} {n}" for status, n in sorted(statuses.items()))
        parts.append(_text(f"sessions: {counts}"))
        table = Table(box=None, header_style="bold")
        for column in ("phase", "p50 s", "p90 s", "p99 s", "n"):
            table.add_column(column, justify="left" if column == "phase" else "right")
        for key in sorted(state.phases)[:12]:
            values = [value for _, value in state.phases[key]]
            table.add_row(
                _text(key.removesuffix("_s")),
                *(f"{_percentile(values, q):.3f}" for q in (0.5, 0.9, 0.99)),
                str(len(values)),
            )
        parts.append(table)
        left_out = state.phase_values_left_out
        if left_out:
            parts.append(
                _text(f"left out {left_out} values of *_s keys past the first {MAX_PHASE_KEYS}")
            )
    for rank in state.ranks.values():
        problems = [
            f"{name} dropped {dropped}, failed {failed}"
            for name, (_, dropped, failed, *_rest) in sorted(rank.exporters.items())
            if dropped or failed
        ]
        if problems:
            parts.append(_text(f"{rank.label}: exporter " + "; ".join(problems), "red"))
        if rank.ended:
            parts.append(_text(f"{rank.label}: finished ({rank.steps} steps)"))
        elif now - rank.last_line > stale:
            parts.append(
                _text(
                    f"{rank.label}: stopped writing {now - rank.last_line:.0f} s ago "
                    f"(after {rank.steps} steps)",
                    "bold red",
                )
            )
    skipped = state.skipped
    if skipped or state.unreadable:
        parts.append(
            Text(
                f"skipped: {state.unreadable} lines that are not JSON objects, "
                f"{skipped} with fields the view cannot read",
                style="yellow",
            )
        )
    if not state.ranks:
        parts.append(
            _text(
                f"waiting for goodput-*.jsonl under {directory} (the job needs the "
                "'goodput' configuration key on)"
            )
        )
    return Group(*parts)
