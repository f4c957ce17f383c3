"""What reading and rolling up the traces skipped or could not place, one line each."""

from __future__ import annotations

from ._collect import STEP_RULE, Collected

__all__ = ["input_notes"]


def input_notes(collected: Collected) -> list[str]:
    """What reading and rolling up the traces skipped or could not place, one line each.

    ``goodput`` prints these on stderr; ``report`` puts them in its summary
    and on the page.
    """
    result = collected.result
    lines = []
    summary = collected.stats.summary()
    if summary:
        lines.append(summary)
    if collected.without_ph:
        n = collected.without_ph
        lines.append(
            f"skipped {n} JSON object{'s' if n != 1 else ''} without 'ph' (not trace events)"
        )
    if result.without_ids:
        what = "complete events without trace/span ids or finite times were ignored"
        areal = collected.areal_without_ts
        of_them = f" ({areal} of them AReaL events without a ts)" if areal else ""
        lines.append(f"{result.without_ids} {what}{of_them}")
    if result.bad_ids:
        lines.append(
            f"{result.bad_ids} complete events whose span id is not a 64-bit hex number "
            "were ignored"
        )
    if result.evicted:
        plural = "s" if result.evicted != 1 else ""
        leaves = result.evicted_leaves
        lines.append(
            f"{result.evicted} wait{plural} for a parent span given up past --max-pending "
            f"{collected.max_pending}: {leaves} bucketed span{'s' if leaves != 1 else ''} "
            "in them counted in no step (a larger --max-pending, or none, keeps them)"
        )
    if result.duplicates:
        lines.append(f"{result.duplicates} duplicate spans were ignored")
    lines.extend(result.notes)
    lines.extend(collected.areal_notes)
    if not result.steps:
        lines.append(f"no step spans found ({STEP_RULE})")
    return lines
