"""What every part of the report's page uses: escaping, colours, number formats, legends."""

from __future__ import annotations

import html
import math
import sys
from collections.abc import Sequence

__all__ = ["COLORS", "STALL_COLOR", "axis_ticks", "esc", "legend_row", "num", "pct", "seconds"]

COLORS = {
    "productive": "#2e7d32",
    "overhead": "#f0a202",
    "idle": "#1e88e5",
    "wasted": "#c62828",
    "unattributed": "#c7c7c7",
    None: "#8e8e9e",
}
STALL_COLOR = "#ad1457"  # event-loop stalls: a marker, in no bucket


def esc(value: object) -> str:
    """HTML-escape anything shown (text and attribute values alike).

    Example:
        >>> esc("<script>alert(1)</script>")
        '&lt;script&gt;alert(1)&lt;/script&gt;'
    """
    return html.escape(str(value), quote=True)


def num(value: float) -> str:
    """A coordinate in an SVG attribute, to a tenth of a pixel."""
    return f"{value:.1f}"


def seconds(value: float) -> str:
    """A duration in seconds as shown on the page: ``"1.50 s"``, ``"2.0 ms"``, ``"7 µs"``."""
    if value == 0:
        return "0"
    if value < 0:  # a session clock that stepped back
        return f"-{seconds(-value)}"
    if value >= 100:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 0.001:
        return f"{value * 1000:.1f} ms"
    return f"{value * 1e6:.0f} µs"


def axis_ticks(top: float, count: int = 4) -> list[float]:
    """Round values from 0 up to about *top*, for about *count* grid lines.

    Only 0 when *top* is not a positive finite number, or is so small that a
    tick's share of it is not a normal float (it underflows: no log10 of it).

    Example:
        >>> axis_ticks(1.0, 4), axis_ticks(5e-324, 6)
        ([0.0, 0.25, 0.5, 0.75, 1.0], [0.0])
    """
    raw = top / count if count > 0 else 0.0
    if not sys.float_info.min <= raw < math.inf:  # also NaN
        return [0.0]
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(top / step) + 1)]


def legend_row(items: Sequence[tuple[str, str]]) -> str:
    """A legend: one coloured swatch per ``(label, colour)``."""
    spans = "".join(f'<span style="--c:{esc(c)}">{esc(label)}</span>' for label, c in items)
    return f'<div class="legend">{spans}</div>'


def pct(value: float | None) -> str:
    """A ratio as a percentage, ``"-"`` for none."""
    return "-" if value is None else f"{value * 100:.1f}%"
