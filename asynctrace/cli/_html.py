"""The report's HTML: inline CSS, SVG charts and a few lines of script, all escaped.

Every piece of text that comes from a trace (span names, attribute values,
file paths, process names) goes through :func:`esc`; the page's only script
is ours, allowed by its hash in the Content-Security-Policy, so nothing in a
trace can run even if it slipped through, and nothing is loaded from the
network.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..rollup import BUCKETS

if TYPE_CHECKING:
    from .report import ReportData, Sessions, Waterfall

__all__ = ["esc", "render"]

COLORS = {
    "productive": "#2e7d32",
    "overhead": "#f0a202",
    "idle": "#1e88e5",
    "wasted": "#c62828",
    "unattributed": "#c7c7c7",
    None: "#8e8e9e",
}
STATUS_COLORS = {
    "accepted": "#2e7d32",
    "rejected": "#f0a202",
    "failed": "#c62828",
    "dropped": "#6d4c41",
    "pending": "#8e8e9e",
}
_QUIET_STATUSES = frozenset({"accepted", "pending"})  # drawn plain; others are marked


def _status_order(status: str) -> tuple[int, str]:
    """The legend's order: the known statuses as listed above, then any other by name."""
    known = list(STATUS_COLORS)
    return (known.index(status), "") if status in known else (len(known), status)


STALL_COLOR = "#ad1457"  # event-loop stalls: a marker, in no bucket
PHASE_PALETTE = ["#5e35b1", "#00897b", "#d81b60", "#3949ab", "#7cb342", "#fb8c00", "#546e7a"]
MAX_BARS = 240

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  margin: 0 auto; max-width: 1080px; padding: 24px; color: #1d1d1f; background: #fafafa; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.muted { color: #666; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin: 16px 0; }
.card { background: #fff; border: 1px solid #e3e3e3; border-radius: 8px; padding: 10px 14px;
  min-width: 120px; }
.card b { display: block; font-size: 20px; }
.card.bad b { color: #c62828; }
svg { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; display: block; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg .axis { stroke: #bbb; stroke-width: 1; }
svg .grid { stroke: #eee; stroke-width: 1; }
svg .hit:hover { opacity: .75; }
.legend { display: flex; gap: 14px; flex-wrap: wrap; margin: 6px 0; font-size: 12px; }
.legend span::before { content: ""; display: inline-block; width: 10px; height: 10px;
  margin-right: 5px; background: var(--c); border-radius: 2px; vertical-align: -1px; }
table { border-collapse: collapse; background: #fff; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #e3e3e3; padding: 3px 7px; text-align: right; }
th { background: #f3f3f3; }
td.l, th.l { text-align: left; }
code { font-size: 12px; }
.hists { display: flex; flex-wrap: wrap; gap: 12px; }
.ok { color: #2e7d32; font-weight: 600; }
.bad { color: #c62828; font-weight: 600; }
#tip { position: fixed; pointer-events: none; background: #222; color: #fff; font-size: 12px;
  padding: 4px 7px; border-radius: 4px; white-space: pre; display: none; z-index: 10; }
details { margin: 8px 0; }
"""

SCRIPT = """
(function () {
  var tip = document.getElementById("tip");
  document.querySelectorAll("[data-tip]").forEach(function (el) {
    el.addEventListener("mousemove", function (ev) {
      tip.textContent = el.getAttribute("data-tip");
      tip.style.display = "block";
      tip.style.left = (ev.clientX + 12) + "px";
      tip.style.top = (ev.clientY + 12) + "px";
    });
    el.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  });
  document.body.setAttribute("data-ready", "1");
})();
"""


def esc(value: object) -> str:
    """HTML-escape anything shown (text and attribute values alike).

    Example:
        >>> esc("<script>alert(1)</script>")
        '&lt;script&gt;alert(1)&lt;/script&gt;'
    """
    return html.escape(str(value), quote=True)


def _num(value: float) -> str:
    return f"{value:.1f}"


def _seconds(value: float) -> str:
    if value == 0:
        return "0"
    if value < 0:  # a session clock that stepped back
        return f"-{_seconds(-value)}"
    if value >= 100:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 0.001:
        return f"{value * 1000:.1f} ms"
    return f"{value * 1e6:.0f} µs"


def _ticks(top: float, count: int = 4) -> list[float]:
    if top <= 0:
        return [0.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(top / step) + 1)]


def _legend(items: Sequence[tuple[str, str]]) -> str:
    spans = "".join(f'<span style="--c:{esc(c)}">{esc(label)}</span>' for label, c in items)
    return f'<div class="legend">{spans}</div>'


# -- goodput -------------------------------------------------------------------


def _bars(steps: list[dict[str, Any]]) -> list[tuple[str, list[float], float]]:
    """(label, seconds per segment, wall) per bar.

    Past MAX_BARS steps, each bar is the mean of consecutive steps.
    """
    segments = [f"{b}_s" for b in BUCKETS] + ["unattributed_s"]
    group = max(1, math.ceil(len(steps) / MAX_BARS))
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


def _goodput_chart(steps: list[dict[str, Any]]) -> str:
    width, height, left, bottom, top_pad = 960, 260, 64, 30, 12
    bars = _bars(steps)
    top = max((sum(v) for _, v, _ in bars), default=0.0) or 1.0
    ticks = _ticks(top)
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
            f'<line class="grid" x1="{left}" x2="{width - 12}" y1="{_num(y)}" y2="{_num(y)}"/>'
            f'<text x="{left - 6}" y="{_num(y + 4)}" text-anchor="end">'
            f"{esc(_seconds(tick))}</text>"
        )
    names = [*BUCKETS, "unattributed"]
    for i, (label, values, wall) in enumerate(bars):
        x = left + i * slot + (slot - bar_w) / 2
        y = top_pad + plot_h
        goodput = values[0] / wall if wall > 0 else 0.0
        tip = f"{label}\nwall {_seconds(wall)} · goodput {goodput * 100:.1f}%"
        for name, value in zip(names, values, strict=True):
            if value <= 0:
                continue
            h = value / top * plot_h
            y -= h
            parts.append(
                f'<rect class="seg hit seg-{esc(name)}" x="{_num(x)}" y="{_num(y)}" '
                f'width="{_num(bar_w)}" height="{_num(max(h, 0.5))}" fill="{COLORS[name]}" '
                f'data-tip="{esc(f"{tip}{chr(10)}{name} {_seconds(value)}")}">'
                f"<title>{esc(f'{label}: {name} {_seconds(value)}')}</title></rect>"
            )
        if len(bars) <= 40:
            parts.append(
                f'<text x="{_num(x + bar_w / 2)}" y="{height - 12}" text-anchor="middle">'
                f"{esc(label.split(' step ')[-1] if len(bars) > 1 else label)}</text>"
            )
    parts.append(
        f'<line class="axis" x1="{left}" x2="{width - 12}" y1="{top_pad + plot_h}" '
        f'y2="{top_pad + plot_h}"/></svg>'
    )
    return "".join(parts)


def _goodput_table(document: dict[str, Any]) -> str:
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
                (_seconds(step["wall_s"]), ""),
                *((_seconds(step[f"{b}_s"]), "") for b in BUCKETS),
                (_seconds(step["unattributed_s"]), ""),
                (_pct(step["goodput"]), ""),
                (_seconds(step["stalled_s"]), ""),
            ]
        )
    total = document["total"]
    rows.append(
        [
            ("total", "l"),
            ("", ""),
            (f"{total['steps']} steps", "l"),
            ("", ""),
            (_seconds(total["wall_s"]), ""),
            *((_seconds(total[f"{b}_s"]), "") for b in BUCKETS),
            (_seconds(total["unattributed_s"]), ""),
            (_pct(total["goodput"]), ""),
            (_seconds(total["stalled_s"]), ""),
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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


# -- waterfall -----------------------------------------------------------------


def _waterfall(waterfall: Waterfall) -> str:
    step = waterfall.step
    spans = waterfall.spans
    label_w, chart_w, row_h, top_pad = 300, 640, 17, 22
    width = label_w + chart_w + 16
    height = top_pad + row_h * max(1, len(spans)) + 8
    wall = max(step.end - step.start, 1e-9)
    domain_end = max([step.end, *(min(s.end, step.start + 3 * wall) for s in spans)])
    scale = chart_w / max(domain_end - step.start, 1e-9)
    parts = [
        f'<svg id="waterfall" viewBox="0 0 {width} {height}" width="100%" role="img" '
        'aria-label="waterfall of one step">'
    ]
    for tick in _ticks((domain_end - step.start) / 1e6, 5):
        x = label_w + tick * 1e6 * scale
        if x > label_w + chart_w + 1:
            continue
        parts.append(
            f'<line class="grid" x1="{_num(x)}" x2="{_num(x)}" y1="{top_pad - 4}" y2="{height}"/>'
            f'<text x="{_num(x)}" y="{top_pad - 8}" text-anchor="middle">'
            f"{esc(_seconds(tick))}</text>"
        )
    for span in spans:  # each event-loop stall: a band across the rows it stretched
        if span.stall:
            x = label_w + (span.start - step.start) * scale
            w = max(1.0, (min(span.end, domain_end) - span.start) * scale)
            tip = f"event-loop stall {_seconds((span.end - span.start) / 1e6)} (in no bucket)"
            parts.append(
                f'<rect class="stall-band" x="{_num(x)}" y="{top_pad - 4}" width="{_num(w)}" '
                f'height="{height - top_pad + 4}" fill="{STALL_COLOR}" fill-opacity="0.12">'
                f"<title>{esc(tip)}</title></rect>"
            )
    end_x = label_w + wall * scale
    parts.append(
        f'<line class="axis" x1="{_num(end_x)}" x2="{_num(end_x)}" y1="{top_pad - 4}" '
        f'y2="{height}" stroke-dasharray="4 3"><title>step end</title></line>'
    )
    for i, span in enumerate(spans):
        y = top_pad + i * row_h
        x = label_w + (span.start - step.start) * scale
        clipped_end = min(span.end, domain_end)
        w = max(1.0, (clipped_end - span.start) * scale)
        color = STALL_COLOR if span.stall else COLORS.get(span.bucket, "#6a1b9a")
        kind = "event-loop stall, in no bucket" if span.stall else span.bucket or "unbucketed"
        details = [
            span.name,
            f"{_seconds((span.end - span.start) / 1e6)} · {kind}",
            f"span {span.span_id} · {span.process}",
            *(f"{k} = {v}" for k, v in span.attributes[:8]),
        ]
        tip = "\n".join(details)
        depth = min(span.depth, 12)
        label = esc(_clip(span.name, 44 - depth))
        more = ""
        if span.end > domain_end:
            more = (
                f'<text x="{_num(label_w + chart_w - 2)}" y="{_num(y + 12)}" '
                'text-anchor="end">▸</text>'
            )
        parts.append(
            f'<g class="span-row{" stall" if span.stall else ""}" '
            f'data-bucket="{esc(span.bucket or "")}">'
            f'<text class="span-name" x="{6 + depth * 12}" y="{_num(y + 12)}">{label}</text>'
            f'<rect class="span-bar hit" x="{_num(x)}" y="{_num(y + 3)}" width="{_num(w)}" '
            f'height="{row_h - 5}" fill="{color}" data-tip="{esc(tip)}">'
            f"<title>{esc(tip)}</title></rect>{more}</g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _hidden(waterfall: Waterfall) -> str:
    """`` 12 more spans of this step not drawn (12 past the 400-row limit).``, or ``""``."""
    if not waterfall.hidden:
        return ""
    n = waterfall.hidden
    why = f" ({'; '.join(waterfall.hidden_why)})" if waterfall.hidden_why else ""
    return f" {n} more span{'s' if n != 1 else ''} of this step not drawn{esc(why)}."


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


# -- sessions ------------------------------------------------------------------


def _phase_colors(phases: list[str]) -> dict[str, str]:
    return {p: PHASE_PALETTE[i % len(PHASE_PALETTE)] for i, p in enumerate(phases)}


def _timeline(sessions: Sessions) -> str:
    rows = sessions.timeline
    label_w, chart_w, top_pad = 120, 820, 22
    row_h = max(7, min(16, 480 // max(1, len(rows))))
    width = label_w + chart_w + 16
    height = top_pad + row_h * max(1, len(rows)) + 8
    start = min((r.submit for r in rows), default=0.0)
    end = max((r.finalized for r in rows), default=1.0)
    scale = chart_w / max(end - start, 1e-9)
    colors = _phase_colors(sessions.phases)
    parts = [
        f'<svg id="sessions-timeline" viewBox="0 0 {width} {height}" width="100%" role="img" '
        'aria-label="session lifecycle timeline">'
    ]
    for tick in _ticks(end - start, 6):
        x = label_w + tick * scale
        parts.append(
            f'<line class="grid" x1="{_num(x)}" x2="{_num(x)}" y1="{top_pad - 4}" y2="{height}"/>'
            f'<text x="{_num(x)}" y="{top_pad - 8}" text-anchor="middle">'
            f"+{esc(_seconds(tick))}</text>"
        )
    for i, row in enumerate(rows):
        y = top_pad + i * row_h
        x = label_w + (row.submit - start) * scale
        w = max(1.0, (row.finalized - row.submit) * scale)
        tip = (
            f"session {row.session_id} (task {row.task_id})\n{row.status} after "
            f"{_seconds(row.finalized - row.submit)}"
        )
        phase_tips = [f"{name} {_seconds(e - s)}" for name, s, e in row.phases]
        if phase_tips:
            tip += "\n" + ", ".join(phase_tips[:6])
        fill = STATUS_COLORS.get(row.status, "#999")
        parts.append(
            f'<g class="session-row"><rect class="hit" x="{_num(x)}" y="{_num(y + 1)}" '
            f'width="{_num(w)}" height="{row_h - 2}" fill="{fill}" '
            f'opacity="0.35" data-tip="{esc(tip)}"><title>{esc(tip)}</title></rect>'
        )
        for name, s, e in row.phases:
            px = label_w + (s - start) * scale
            pw = max(0.8, (e - s) * scale)
            parts.append(
                f'<rect class="phase" x="{_num(px)}" y="{_num(y + 1)}" width="{_num(pw)}" '
                f'height="{row_h - 2}" fill="{colors.get(name, "#555")}"/>'
            )
        if row.status not in _QUIET_STATUSES:
            # Over the phase bars: an outline in the status colour and a solid
            # block where the session ended, so a failure shows without a tooltip.
            mark_w = max(3.0, min(8.0, w * 0.15))
            parts.append(
                f'<rect class="status-outline" x="{_num(x)}" y="{_num(y + 1)}" '
                f'width="{_num(w)}" height="{row_h - 2}" fill="none" stroke="{fill}" '
                f'stroke-width="1.5"/><rect class="status-mark" data-status="{esc(row.status)}" '
                f'x="{_num(x + w - mark_w)}" y="{_num(y + 1)}" width="{_num(mark_w)}" '
                f'height="{row_h - 2}" fill="{fill}"/>'
            )
        parts.append("</g>")
    if rows:
        parts.append(
            f'<text x="6" y="{top_pad + 8}">{len(rows)} of {sessions.count}</text>'
            f'<text x="6" y="{top_pad + 20}">sessions</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _histogram(name: str, values: Sequence[float]) -> str:
    width, height, pad, bins = 300, 150, 26, 24
    data = sorted(v for v in values if math.isfinite(v))
    if not data:
        return ""
    low, high = data[0], data[-1]
    # Halved, so that no finite range overflows: 1e308 - -1e308 is an infinity.
    half_span = high / 2 - low / 2
    counts = [0] * bins
    for value in data:
        share = (value / 2 - low / 2) / half_span if half_span else 0.0
        counts[min(bins - 1, max(0, int(share * bins)))] += 1
    peak = max(counts) or 1
    bar_w = (width - 2 * pad) / bins
    p50 = data[len(data) // 2]
    p90 = data[min(len(data) - 1, int(len(data) * 0.9))]
    parts = [
        f'<svg class="histogram" data-metric="{esc(name)}" viewBox="0 0 {width} {height}" '
        f'width="{width}" role="img" aria-label="{esc(name)} histogram">'
        f'<text x="{pad}" y="14"><tspan font-weight="600">{esc(name)}</tspan> · n={len(data)} · '
        f"p50 {esc(_seconds(p50))} · p90 {esc(_seconds(p90))}</text>"
    ]
    base = height - pad
    for i, count in enumerate(counts):
        if not count:
            continue
        h = count / peak * (base - 24)
        lo = _between(low, high, i / bins)
        tip = f"{name}: {_seconds(lo)} to {_seconds(_between(low, high, (i + 1) / bins))}: {count}"
        parts.append(
            f'<rect class="hit" x="{_num(pad + i * bar_w)}" y="{_num(base - h)}" '
            f'width="{_num(max(bar_w - 1, 1))}" height="{_num(h)}" fill="#5e35b1" '
            f'data-tip="{esc(tip)}"><title>{esc(tip)}</title></rect>'
        )
    parts.append(
        f'<line class="axis" x1="{pad}" x2="{width - pad}" y1="{base}" y2="{base}"/>'
        f'<text x="{pad}" y="{height - 8}">{esc(_seconds(low))}</text>'
        f'<text x="{width - pad}" y="{height - 8}" text-anchor="end">{esc(_seconds(high))}</text>'
        "</svg>"
    )
    return "".join(parts)


def _between(low: float, high: float, share: float) -> float:
    """The point *share* of the way from *low* to *high*, finite for any finite pair."""
    return low * (1 - share) + high * share


def _sessions_section(sessions: Sessions) -> str:
    parts = ["<h2>Sessions</h2>"]
    files = ", ".join(f"<code>{esc(p)}</code>" for p in sessions.files)
    parts.append(f'<p class="muted">{sessions.count} sessions from {files}.</p>')
    if not sessions.count:
        return "".join(parts)
    statuses = "".join(
        f'<tr><td class="l">{esc(s)}</td><td>{n}</td><td>{n / sessions.count * 100:.1f}%</td></tr>'
        for s, n in sessions.statuses.most_common()
    )
    parts.append(
        '<table id="session-statuses"><thead><tr><th class="l">status</th><th>sessions</th>'
        f"<th>share</th></tr></thead><tbody>{statuses}</tbody></table>"
    )
    colors = _phase_colors(sessions.phases)
    legend = [(f"phase {p}", c) for p, c in colors.items()]
    legend += [
        (f"session {s} (submit → finalized)", STATUS_COLORS.get(s, "#999"))
        for s in sorted(sessions.statuses, key=_status_order)
    ]
    parts.append("<h3>Lifecycle timeline</h3>")
    parts.append(_legend(legend))
    parts.append(_timeline(sessions))
    parts.append('<h3>Durations</h3><div class="hists">')
    order = ["total_s", *(f"{p}_s" for p in sessions.phases)]
    order += sorted(k for k in sessions.durations if k not in order)
    for key in order:
        values = sessions.durations.get(key)
        if values:
            parts.append(_histogram(key, values))
    parts.append("</div>")
    return "".join(parts)


# -- invariants ----------------------------------------------------------------


def _invariants(document: dict[str, Any]) -> str:
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


# -- page ----------------------------------------------------------------------


def render(data: ReportData) -> str:
    """The whole page."""
    document = data.goodput
    total = document["total"]
    violations = len(document["violations"])
    cards = [
        ("steps", str(total["steps"]), False),
        ("wall time", _seconds(total["wall_s"]), False),
        ("goodput", _pct(total["goodput"]), False),
        ("productive", _seconds(total["productive_s"]), False),
        ("unattributed", _seconds(total["unattributed_s"]), False),
        ("loop stalled", _seconds(total["stalled_s"]), False),
        ("violations", str(violations), violations > 0),
    ]
    if data.sessions is not None:
        cards.append(("sessions", str(data.sessions.count), False))
    body = [
        f"<h1>{esc(data.title)}</h1>",
        f'<p class="muted">{len(data.trace_files)} trace file(s): '
        + ", ".join(f"<code>{esc(p)}</code>" for p in data.trace_files)
        + " · processes: "
        + ", ".join(esc(p) for p in data.processes)
        + "</p>",
        '<div class="cards">'
        + "".join(
            f'<div class="card{" bad" if bad else ""}"><span class="muted">{esc(k)}</span>'
            f"<b>{esc(v)}</b></div>"
            for k, v, bad in cards
        )
        + "</div>",
    ]
    if data.notes:
        body.append(
            '<ul class="muted" id="notes">'
            + "".join(f"<li>{esc(n)}</li>" for n in data.notes)
            + "</ul>"
        )
    body.append("<h2>Goodput per step</h2>")
    if document["steps"]:
        body.append(_legend([(n, COLORS[n]) for n in [*BUCKETS, "unattributed"]]))
        body.append(_goodput_chart(document["steps"]))
        body.append("<details><summary>Table</summary>" + _goodput_table(document) + "</details>")
    else:
        body.append(f'<p class="muted">No step spans found: {esc(document["step_rule"])}.</p>')
    if data.waterfall is not None:
        step = data.waterfall.step
        body.append("<h2>Step waterfall</h2>")
        body.append(
            f'<p class="muted">{esc(step.name)} · rl.iteration {esc(step.iteration)} · '
            f"{esc(data.waterfall.process)} · wall {esc(_seconds(step.wall / 1e6))} · "
            f"span <code>{esc(step.span_id)}</code> · chosen: {esc(data.waterfall.chosen_by)}."
            + _hidden(data.waterfall)
            + " The dashed line is the step's end; ▸ marks a span that continues.</p>"
        )
        body.append(
            _legend(
                [(n, COLORS[n]) for n in BUCKETS]
                + [("unbucketed", str(COLORS[None])), ("event-loop stall", STALL_COLOR)]
            )
        )
        body.append(_waterfall(data.waterfall))
    if data.sessions is not None:
        body.append(_sessions_section(data.sessions))
    if data.profiles:
        rows = "".join(
            f'<tr><td class="l">{esc(step)}</td><td class="l">{esc(backend)}</td>'
            f'<td class="l"><a href="{esc(href)}">{esc(href)}</a></td></tr>'
            for step, backend, href in data.profiles
        )
        body.append(
            "<h2>Profiled steps</h2>"
            '<p class="muted">Each capture is a Chrome trace of its own; '
            "<code>asynctrace convert</code> merges them onto this run's timeline.</p>"
            '<table id="profiles"><thead><tr><th class="l">step</th><th class="l">backend</th>'
            f'<th class="l">capture</th></tr></thead><tbody>{rows}</tbody></table>'
        )
    body.append("<h2>Invariants</h2>")
    body.append(_invariants(document))
    body.append(
        '<p class="muted">Rule for steps: ' + esc(document["step_rule"]) + ".</p>"
        '<div id="tip"></div>'
    )
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
    policy = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{digest}'"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(policy)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(data.title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + f"<script>{SCRIPT}</script></body></html>\n"
    )
