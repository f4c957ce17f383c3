"""The sessions on the page: statuses, the lifecycle timeline, duration histograms."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._html import axis_ticks, esc, legend_row, num, seconds
from ._sessions import Sessions

__all__ = ["sessions_section"]

_STATUS_COLORS = {
    "accepted": "#2e7d32",
    "rejected": "#f0a202",
    "failed": "#c62828",
    "dropped": "#6d4c41",
    "pending": "#8e8e9e",
}
_QUIET_STATUSES = frozenset({"accepted", "pending"})  # drawn plain; others are marked


def _status_order(status: str) -> tuple[int, str]:
    """The legend's order: the known statuses as listed above, then any other by name."""
    known = list(_STATUS_COLORS)
    return (known.index(status), "") if status in known else (len(known), status)


_PHASE_PALETTE = ["#5e35b1", "#00897b", "#d81b60", "#3949ab", "#7cb342", "#fb8c00", "#546e7a"]


def _phase_colors(phases: list[str]) -> dict[str, str]:
    return {p: _PHASE_PALETTE[i % len(_PHASE_PALETTE)] for i, p in enumerate(phases)}


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
    for tick in axis_ticks(end - start, 6):
        x = label_w + tick * scale
        parts.append(
            f'<line class="grid" x1="{num(x)}" x2="{num(x)}" y1="{top_pad - 4}" y2="{height}"/>'
            f'<text x="{num(x)}" y="{top_pad - 8}" text-anchor="middle">'
            f"+{esc(seconds(tick))}</text>"
        )
    for i, row in enumerate(rows):
        y = top_pad + i * row_h
        x = label_w + (row.submit - start) * scale
        w = max(1.0, (row.finalized - row.submit) * scale)
        tip = (
            f"session {row.session_id} (task {row.task_id})\n{row.status} after "
            f"{seconds(row.finalized - row.submit)}"
        )
        phase_tips = [f"{name} {seconds(e - s)}" for name, s, e in row.phases]
        if phase_tips:
            tip += "\n" + ", ".join(phase_tips[:6])
        fill = _STATUS_COLORS.get(row.status, "#999")
        parts.append(
            f'<g class="session-row"><rect class="hit" x="{num(x)}" y="{num(y + 1)}" '
            f'width="{num(w)}" height="{row_h - 2}" fill="{fill}" '
            f'opacity="0.35" data-tip="{esc(tip)}"><title>{esc(tip)}</title></rect>'
        )
        for name, s, e in row.phases:
            px = label_w + (s - start) * scale
            pw = max(0.8, (e - s) * scale)
            parts.append(
                f'<rect class="phase" x="{num(px)}" y="{num(y + 1)}" width="{num(pw)}" '
                f'height="{row_h - 2}" fill="{colors.get(name, "#555")}"/>'
            )
        if row.status not in _QUIET_STATUSES:
            # Over the phase bars: an outline in the status colour and a solid
            # block where the session ended, so a failure shows without a tooltip.
            mark_w = max(3.0, min(8.0, w * 0.15))
            parts.append(
                f'<rect class="status-outline" x="{num(x)}" y="{num(y + 1)}" '
                f'width="{num(w)}" height="{row_h - 2}" fill="none" stroke="{fill}" '
                f'stroke-width="1.5"/><rect class="status-mark" data-status="{esc(row.status)}" '
                f'x="{num(x + w - mark_w)}" y="{num(y + 1)}" width="{num(mark_w)}" '
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
        f"p50 {esc(seconds(p50))} · p90 {esc(seconds(p90))}</text>"
    ]
    base = height - pad
    for i, count in enumerate(counts):
        if not count:
            continue
        h = count / peak * (base - 24)
        lo = _between(low, high, i / bins)
        tip = f"{name}: {seconds(lo)} to {seconds(_between(low, high, (i + 1) / bins))}: {count}"
        parts.append(
            f'<rect class="hit" x="{num(pad + i * bar_w)}" y="{num(base - h)}" '
            f'width="{num(max(bar_w - 1, 1))}" height="{num(h)}" fill="#5e35b1" '
            f'data-tip="{esc(tip)}"><title>{esc(tip)}</title></rect>'
        )
    parts.append(
        f'<line class="axis" x1="{pad}" x2="{width - pad}" y1="{base}" y2="{base}"/>'
        f'<text x="{pad}" y="{height - 8}">{esc(seconds(low))}</text>'
        f'<text x="{width - pad}" y="{height - 8}" text-anchor="end">{esc(seconds(high))}</text>'
        "</svg>"
    )
    return "".join(parts)


def _between(low: float, high: float, share: float) -> float:
    """The point *share* of the way from *low* to *high*, finite for any finite pair."""
    return low * (1 - share) + high * share


def sessions_section(sessions: Sessions) -> str:
    """The Sessions section: statuses, the lifecycle timeline and the duration histograms."""
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
        (f"session {s} (submit → finalized)", _STATUS_COLORS.get(s, "#999"))
        for s in sorted(sessions.statuses, key=_status_order)
    ]
    parts.append("<h3>Lifecycle timeline</h3>")
    parts.append(legend_row(legend))
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
