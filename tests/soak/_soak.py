"""Helpers of the soak tests: their length and their figures."""

from __future__ import annotations

import os


def scale() -> float:
    """The soak length multiplier (``ASYNCTRACE_SOAK_SCALE``, default 1)."""
    return float(os.environ.get("ASYNCTRACE_SOAK_SCALE", "1") or 1)


def report(name: str, **figures: object) -> None:
    """Print one line of figures, e.g. ``soak: volume spans=1000000 rss_growth_mb=41.0``."""
    print(f"\nsoak: {name} " + " ".join(f"{key}={value}" for key, value in figures.items()))
