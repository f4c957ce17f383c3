"""The profiler captures among a report's inputs, checked and linked from the page."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ._captures import CAPTURE_NAME, Capture, load_capture

__all__ = ["profile_links"]


def profile_links(
    captures: Sequence[Path], output: Path, notes: list[str]
) -> list[tuple[str, str, str]]:
    """The profiler captures among the inputs: (step, backend, link relative to the report).

    Each is checked as ``convert`` checks it: one that is not readable as JSON
    (a capture cut short) is not linked, and one ``convert`` would not merge
    for another reason is linked; either way *notes* says why.
    """
    rows = []
    base = output.resolve().parent
    for path in captures:
        match = CAPTURE_NAME.match(path.name)
        if match is None:  # named like a capture, not as one: never linked, and said so
            notes.append(f"profile capture not linked: {load_capture(path)}")
            continue
        checked = load_capture(path)
        if not isinstance(checked, Capture):
            if checked.startswith(f"{path.name}: {_UNREADABLE}"):
                notes.append(f"profile capture not linked: {checked}")
                continue
            notes.append(f"profile capture linked, but convert cannot merge it: {checked}")
        href = Path(os.path.relpath(path.resolve(), base)).as_posix()
        role = match["role"]  # the driver's rank 0 is not worker rank 0
        who = f"r{match['rank']}" if role in (None, "worker") else f"{role} r{match['rank']}"
        rows.append((f"{who} step {match['step']}", match["backend"], href))
    return rows


_UNREADABLE = "not readable as JSON"  # load_capture's reason for a file that is not JSON
