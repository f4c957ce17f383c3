"""The goodput document as CSV and as a table for a terminal."""

from __future__ import annotations

import csv
import io

from ..rollup import BUCKETS
from ._collect import Collected
from ._common import escape_controls
from ._goodput_document import to_json

__all__ = ["to_csv", "to_text"]

_CSV_COLUMNS = [
    "process",
    "iteration",
    "name",
    "span_id",
    "wall_s",
    *(f"{b}_s" for b in BUCKETS),
    "unattributed_s",
    "goodput",
    "stalled_s",
]


def to_csv(collected: Collected) -> str:
    """One CSV row per step, then a ``total`` row."""
    document = to_json(collected)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_CSV_COLUMNS)
    for step in document["steps"]:
        writer.writerow(["" if step[c] is None else step[c] for c in _CSV_COLUMNS])
    total = dict(document["total"], process="total", iteration="", name="", span_id="")
    writer.writerow(["" if total[c] is None else total[c] for c in _CSV_COLUMNS])
    return out.getvalue()


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def to_text(collected: Collected) -> str:
    """The table, the run total and the invariant summary, for a terminal.

    Names read from the traces (steps, processes, the spans in a violation)
    have their control characters escaped (see :func:`escape_controls`): an
    escape sequence in a span name never acts on the terminal, and a newline
    never forges a row. ``--json`` and ``--csv`` keep them as written.
    """
    document = to_json(collected)
    headers = ["process", "iter", "step", "wall s", *BUCKETS, "unattributed", "goodput", "stalled"]
    table: list[list[str]] = []
    for step in document["steps"]:
        table.append(
            [
                escape_controls(step["process"]),
                "-" if step["iteration"] is None else str(step["iteration"]),
                _clip(escape_controls(step["name"]), 40) + ("*" if step["parent_missing"] else ""),
                f"{step['wall_s']:.4f}",
                *(f"{step[f'{b}_s']:.4f}" for b in BUCKETS),
                f"{step['unattributed_s']:.4f}",
                _percent(step["goodput"]),
                f"{step['stalled_s']:.4f}",
            ]
        )
    total = document["total"]
    table.append(
        [
            "total",
            "",
            f"{total['steps']} step{'s' if total['steps'] != 1 else ''}",
            f"{total['wall_s']:.4f}",
            *(f"{total[f'{b}_s']:.4f}" for b in BUCKETS),
            f"{total['unattributed_s']:.4f}",
            _percent(total["goodput"]),
            f"{total['stalled_s']:.4f}",
        ]
    )
    widths = [max(len(r[i]) for r in [headers, *table]) for i in range(len(headers))]
    left = {0, 2}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    lines = [line(headers), line(["-" * w for w in widths])]
    lines.extend(line(row) for row in table[:-1])
    lines.append(line(["-" * w for w in widths]))
    lines.append(line(table[-1]))
    violations = collected.result.violations
    if any(step["parent_missing"] for step in document["steps"]):
        lines.append(
            "* its parent span is not in the inputs (another rank's file, or a killed run)"
        )
    lines.append("")
    if violations:
        plural = "s" if len(violations) != 1 else ""
        lines.append(f"invariants: {len(violations)} violation{plural}")
        lines.extend(f"  [{v.kind}] {escape_controls(v.message)}" for v in violations)
    else:
        lines.append(
            "invariants: ok (no bucketed span has a bucketed descendant; no step's bucket "
            "seconds exceed its wall time; every bucket value is known)"
        )
    return "\n".join(lines) + "\n"
