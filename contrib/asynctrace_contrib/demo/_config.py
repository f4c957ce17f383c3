"""The demo's configuration: every argument and key checked before anything runs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asynctrace as at

__all__ = ["demo_config", "demo_exporters", "positive_int"]


def demo_exporters(exporters: Sequence[str] | None = None) -> list[str]:
    """``chrome`` plus *exporters* (``None``: those the environment names).

    Example:
        >>> demo_exporters(["otlp"])
        ['chrome', 'otlp']
    """
    if exporters is None:
        base = at.TelemetryConfig(exporters=[])
        exporters = [
            e for e in at.TelemetryConfig.from_env(base=base).exporters if isinstance(e, str)
        ]
    return ["chrome", *(name for name in dict.fromkeys(exporters) if name != "chrome")]


def positive_int(text: str) -> int:
    """An integer >= 1, for an ``argparse`` option (its message names the bad value).

    Example:
        >>> positive_int("3")
        3
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def demo_config(
    out: Path, span_groups: str, exporters: Sequence[str] | None, sizes: dict[str, int]
) -> dict[str, Any]:
    """The demo's configuration, every argument and key checked.

    Raises:
        ConfigurationError: naming the argument, its value and what is accepted.
    """
    for name, value in sizes.items():
        if value.__class__ is not int or value < 1:
            raise at.ConfigurationError(
                f"{name}: {value!r} is not accepted; accepted: an integer >= 1"
            )
    # The demo registers no group of its own: a name no preset or built-in group
    # knows is a typo, refused now rather than left pending for the whole run.
    at.resolve_span_groups(span_groups)
    if out.exists() and not out.is_dir():
        raise at.ConfigurationError(
            f"out: {str(out)!r} is not accepted; accepted: a directory (it is a file)"
        )
    config = {
        "enabled": True,
        "span_groups": span_groups,
        "exporters": demo_exporters(exporters),
        "output_dir": str(out),
        "session_tracer": {"enabled": True, "flush_threshold": 32},
        # goodput-*.jsonl, a line per finished step (asynctrace watch reads it); the
        # demo's steps are short, so a step is final once spans end 0.25 s past it
        "goodput": {"metrics": "none", "grace_s": 0.25},
    }
    at.TelemetryConfig.from_mapping(config)  # every key checked now, before anything runs
    return config
