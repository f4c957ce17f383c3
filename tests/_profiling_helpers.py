"""What the profiling tests share: telemetry with a profiler, and the captures it wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asynctrace as at


def configure(out: Path, profiler: dict[str, Any], **extra: Any) -> at.Telemetry:
    """Telemetry with the per-step spans, the chrome exporter into *out* and *profiler*."""
    return at.configure(
        {
            "enabled": True,
            "span_groups": "per_step",
            "exporters": ["chrome"],
            "output_dir": str(out),
            "profiler": profiler,
            **extra,
        }
    )


def captures(out: Path) -> list[str]:
    """The names of the captures in *out*, sorted."""
    return sorted(p.name for p in out.glob("profile-*.json"))


def about(path: Path) -> dict[str, Any]:
    """What asynctrace wrote about the capture at *path* (its ``otherData``)."""
    return json.loads(path.read_text())["otherData"]["asynctrace"]  # type: ignore[no-any-return]
