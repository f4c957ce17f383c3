"""The report's page: what it shows, its style and script, and the page put together.

Every piece of text that comes from a trace (span names, attribute values,
file paths, process names) goes through :func:`esc`; the page's only script
is ours, allowed by its hash in the Content-Security-Policy, so nothing in a
trace can run even if it slipped through, and nothing is loaded from the
network.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rollup import BUCKETS
from ._goodput_html import goodput_chart, goodput_table, invariants
from ._html import COLORS, STALL_COLOR, esc, legend_row, pct, seconds
from ._sessions import Sessions
from ._sessions_html import sessions_section
from ._waterfall import Waterfall
from ._waterfall_html import hidden_note, waterfall_chart

__all__ = ["ReportData", "render"]


@dataclass
class ReportData:
    """Everything the HTML shows."""

    title: str
    goodput: dict[str, Any]
    waterfall: Waterfall | None
    sessions: Sessions | None
    notes: list[str]
    trace_files: list[Path]
    processes: list[str]
    profiles: list[tuple[str, str, str]] = field(default_factory=list)  # (step, backend, href)


_CSS = """
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

_SCRIPT = """
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


def render(data: ReportData) -> str:
    """The whole page."""
    document = data.goodput
    total = document["total"]
    violations = len(document["violations"])
    cards = [
        ("steps", str(total["steps"]), False),
        ("wall time", seconds(total["wall_s"]), False),
        ("goodput", pct(total["goodput"]), False),
        ("productive", seconds(total["productive_s"]), False),
        ("unattributed", seconds(total["unattributed_s"]), False),
        ("loop stalled", seconds(total["stalled_s"]), False),
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
        body.append(legend_row([(n, COLORS[n]) for n in [*BUCKETS, "unattributed"]]))
        body.append(goodput_chart(document["steps"]))
        body.append("<details><summary>Table</summary>" + goodput_table(document) + "</details>")
    else:
        body.append(f'<p class="muted">No step spans found: {esc(document["step_rule"])}.</p>')
    if data.waterfall is not None:
        step = data.waterfall.step
        body.append("<h2>Step waterfall</h2>")
        body.append(
            f'<p class="muted">{esc(step.name)} · rl.iteration {esc(step.iteration)} · '
            f"{esc(data.waterfall.process)} · wall {esc(seconds(step.wall / 1e6))} · "
            f"span <code>{esc(step.span_id)}</code> · chosen: {esc(data.waterfall.chosen_by)}."
            + hidden_note(data.waterfall)
            + " The dashed line is the step's end; ▸ marks a span that continues.</p>"
        )
        body.append(
            legend_row(
                [(n, COLORS[n]) for n in BUCKETS]
                + [("unbucketed", str(COLORS[None])), ("event-loop stall", STALL_COLOR)]
            )
        )
        body.append(waterfall_chart(data.waterfall))
    if data.sessions is not None:
        body.append(sessions_section(data.sessions))
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
    body.append(invariants(document))
    body.append(
        '<p class="muted">Rule for steps: ' + esc(document["step_rule"]) + ".</p>"
        '<div id="tip"></div>'
    )
    digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode("ascii")
    policy = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{digest}'"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(policy)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(data.title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + f"<script>{_SCRIPT}</script></body></html>\n"
    )
