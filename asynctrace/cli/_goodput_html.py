"""The goodput document on the page: the stacked bars per step, the table, the invariants."""

from __future__ import annotations

import math
from typing import Any

from ..rollup import BUCKETS
from ._html import COLORS, axis_ticks, esc, num, pct, seconds

__all__ = ["goodput_chart", "goodput_table", "invariants"]

_MAX_BARS = 240


def _bars(steps: list[dict[str, Any]]) -> list[tuple[str, list[float], float]]:
    """(label, seconds per segment, wall) per bar.

    Past _MAX_BARS steps, each bar is the mean of consecutive steps.
    """
    segments = [f"{b}_s" for b in BUCKETS] + ["unattributed_s"]
    group = max(1, math.ceil(len(steps) / _MAX_BARS))
    bars = []
    for i in range(0, len(steps), group):
        chunk = steps[i : i + group]
        n = len(chunk)
        values = [sum(max(0.0, s[k]) for s in chunk) / n for k in segments]
        wall = sum(s["wall_s"] for s in chunk) / n
        first, last = chunk[0], chunk[-1]
        label = f"{first['process']} step {first['iteration']}"
        if n > 1:
            label = f"steps {first['iteration']} to {last['iteration']} (mean of {n})"
        bars.append((label, values, wall))
    return bars


def goodput_chart(steps: list[dict[str, Any]]) -> str:
    """The stacked bars: seconds per bucket of each step (or mean of consecutive steps)."""
    width, height, left, bottom, top_pad = 960, 260, 64, 30, 12
    bars = _bars(steps)
    top = max((sum(v) for _, v, _ in bars), default=0.0) or 1.0
    ticks = axis_ticks(top)
    top = max(top, ticks[-1])
    plot_w = width - left - 12
    plot_h = height - bottom - top_pad
    slot = plot_w / max(1, len(bars))
    bar_w = max(1.0, slot * 0.8)
    parts = [
        f'<svg id="goodput-chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
        'aria-label="goodput per step: stacked seconds per bucket">'
    ]
    for tick in ticks:
        y = top_pad + plot_h - tick / top * plot_h
        parts.append(
            f'<line class="grid" x1="{left}" x2="{width - 12}" y1="{num(y)}" y2="{num(y)}"/>'
            f'<text x="{left - 6}" y="{num(y + 4)}" text-anchor="end">'
            f"{esc(seconds(tick))}</text>"
        )
    names = [*BUCKETS, "unattributed"]
    for i, (label, values, wall) in enumerate(bars):
        x = left + i * slot + (slot - bar_w) / 2
        y = top_pad + plot_h
        goodput = values[0] / wall if wall > 0 else 0.0
        tip = f"{label}\nwall {seconds(wall)} · goodput {goodput * 100:.1f}%"
        for name, value in zip(names, values, strict=True):
            if value <= 0:
                continue
            h = value / top * plot_h
            y -= h
            parts.append(
                f'<rect class="seg hit seg-{esc(name)}" x="{num(x)}" y="{num(y)}" '
                f'width="{num(bar_w)}" height="{num(max(h, 0.5))}" fill="{COLORS[name]}" '
                f'data-tip="{esc(f"{tip}{chr(10)}{name} {seconds(value)}")}">'
                f"<title>{esc(f'{label}: {name} {seconds(value)}')}</title></rect>"
            )
        if len(bars) <= 40:
            parts.append(
                f'<text x="{num(x + bar_w / 2)}" y="{height - 12}" text-anchor="middle">'
                f"{esc(label.split(' step ')[-1] if len(bars) > 1 else label)}</text>"
            )
    parts.append(
        f'<line class="axis" x1="{left}" x2="{width - 12}" y1="{top_pad + plot_h}" '
        f'y2="{top_pad + plot_h}"/></svg>'
    )
    return "".join(parts)


def goodput_table(document: dict[str, Any]) -> str:
    """The goodput document's steps and run total, as a table."""
    headers = ["process", "iteration", "step", "span", "wall", *BUCKETS, "unattributed"]
    headers += ["goodput", "stalled"]
    rows = []
    for step in document["steps"]:
        rows.append(
            [
                (step["process"], "l"),
                (step["iteration"], ""),
                (step["name"], "l"),
                (step["span_id"], "l"),
                (seconds(step["wall_s"]), ""),
                *((seconds(step[f"{b}_s"]), "") for b in BUCKETS),
                (seconds(step["unattributed_s"]), ""),
                (pct(step["goodput"]), ""),
                (seconds(step["stalled_s"]), ""),
            ]
        )
    total = document["total"]
    rows.append(
        [
            ("total", "l"),
            ("", ""),
            (f"{total['steps']} steps", "l"),
            ("", ""),
            (seconds(total["wall_s"]), ""),
            *((seconds(total[f"{b}_s"]), "") for b in BUCKETS),
            (seconds(total["unattributed_s"]), ""),
            (pct(total["goodput"]), ""),
            (seconds(total["stalled_s"]), ""),
        ]
    )
    head = "".join(
        f'<th class="{"l" if i in (0, 2, 3) else ""}">{esc(h)}</th>' for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{c}">{esc("" if v is None else v)}</td>' for v, c in row)
        + "</tr>"
        for row in rows
    )
    return f'<table id="goodput-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def invariants(document: dict[str, Any]) -> str:
    """The invariant checks: that all hold, or a table of the violations."""
    violations = document["violations"]
    if not violations:
        return (
            '<div id="invariants"><p class="ok">All invariants hold: no bucketed span has a '
            "bucketed descendant, no step's bucket seconds exceed its wall time, every bucket "
            "value is known.</p></div>"
        )
    rows = []
    for v in violations:
        spans = "<br>".join(
            f"{esc(s['name'])} <code>{esc(s['span_id'])}</code>" for s in v["spans"]
        )
        rows.append(
            f'<tr><td class="l">{esc(v["kind"])}</td><td class="l">{esc(v["message"])}</td>'
            f'<td class="l">{spans}</td></tr>'
        )
    return (
        f'<div id="invariants"><p class="bad">{len(violations)} invariant violation'
        f'{"s" if len(violations) != 1 else ""}</p><table><thead><tr><th class="l">kind</th>'
        '<th class="l">what</th><th class="l">spans</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table></div>"
    )
