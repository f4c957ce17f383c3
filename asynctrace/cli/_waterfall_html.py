"""The waterfall of one step on the page: a row per span, stalls as bands."""

from __future__ import annotations

from ._html import COLORS, STALL_COLOR, axis_ticks, esc, num, seconds
from ._waterfall import Waterfall

__all__ = ["hidden_note", "waterfall_chart"]


def waterfall_chart(waterfall: Waterfall) -> str:
    """One row per span, drawn against the step's time; stalls as bands across the rows."""
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
    for tick in axis_ticks((domain_end - step.start) / 1e6, 5):
        x = label_w + tick * 1e6 * scale
        if x > label_w + chart_w + 1:
            continue
        parts.append(
            f'<line class="grid" x1="{num(x)}" x2="{num(x)}" y1="{top_pad - 4}" y2="{height}"/>'
            f'<text x="{num(x)}" y="{top_pad - 8}" text-anchor="middle">'
            f"{esc(seconds(tick))}</text>"
        )
    for span in spans:  # each event-loop stall: a band across the rows it stretched
        if span.stall:
            x = label_w + (span.start - step.start) * scale
            w = max(1.0, (min(span.end, domain_end) - span.start) * scale)
            tip = f"event-loop stall {seconds((span.end - span.start) / 1e6)} (in no bucket)"
            parts.append(
                f'<rect class="stall-band" x="{num(x)}" y="{top_pad - 4}" width="{num(w)}" '
                f'height="{height - top_pad + 4}" fill="{STALL_COLOR}" fill-opacity="0.12">'
                f"<title>{esc(tip)}</title></rect>"
            )
    end_x = label_w + wall * scale
    parts.append(
        f'<line class="axis" x1="{num(end_x)}" x2="{num(end_x)}" y1="{top_pad - 4}" '
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
            f"{seconds((span.end - span.start) / 1e6)} · {kind}",
            f"span {span.span_id} · {span.process}",
            *(f"{k} = {v}" for k, v in span.attributes[:8]),
        ]
        tip = "\n".join(details)
        depth = min(span.depth, 12)
        label = esc(_clip(span.name, 44 - depth))
        more = ""
        if span.end > domain_end:
            more = (
                f'<text x="{num(label_w + chart_w - 2)}" y="{num(y + 12)}" '
                'text-anchor="end">▸</text>'
            )
        parts.append(
            f'<g class="span-row{" stall" if span.stall else ""}" '
            f'data-bucket="{esc(span.bucket or "")}">'
            f'<text class="span-name" x="{6 + depth * 12}" y="{num(y + 12)}">{label}</text>'
            f'<rect class="span-bar hit" x="{num(x)}" y="{num(y + 3)}" width="{num(w)}" '
            f'height="{row_h - 5}" fill="{color}" data-tip="{esc(tip)}">'
            f"<title>{esc(tip)}</title></rect>{more}</g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def hidden_note(waterfall: Waterfall) -> str:
    """`` 12 more spans of this step not drawn (12 past the 400-row limit).``, or ``""``."""
    if not waterfall.hidden:
        return ""
    n = waterfall.hidden
    why = f" ({'; '.join(waterfall.hidden_why)})" if waterfall.hidden_why else ""
    return f" {n} more span{'s' if n != 1 else ''} of this step not drawn{esc(why)}."


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"
