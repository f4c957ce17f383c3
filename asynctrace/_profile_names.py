"""Capture files: their names by rank, role and step, and claiming a name no one holds."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["capture_prefix", "claim_capture"]

_MAX_CLAIMS = 10_000  # names tried for one capture before giving up on it
_PLACEHOLDER = b'{"traceEvents":[]}'  # a claimed name, until the capture is saved


def capture_prefix(rank: int, role: str | None) -> str:
    """``profile-r{rank}``, or ``profile-{role}-r{rank}`` for roles other than ``worker``:
    the captures are named as the trace files (``traces-{role}-r{rank}.jsonl``).

    Example:
        >>> capture_prefix(0, "driver"), capture_prefix(3, "worker")
        ('profile-driver-r0', 'profile-r3')
    """
    if role in (None, "worker"):
        return f"profile-r{rank}"
    return f"profile-{role}-r{rank}"


def claim_capture(
    directory: Path,
    rank: int,
    role: str | None,
    captures: dict[object, int],
    step: int | str,
    backend: str,
) -> Path:
    """The capture's file, created here so no other capture (another process with the
    same rank and role: a forked child, a second run in ``profiler.output``) takes it.

    *captures* holds the last name suffix taken per step (updated here). *step* is
    the step's ``rl.iteration``, an integer of either sign (``step-1``), or ``"na"`` (a
    request answered by a span of no step); ``_2``, ``_3``, ... follow a name already
    taken. ``asynctrace convert`` reads names of this shape.

    Raises:
        OSError: the directory cannot be written, or every name tried is taken.
    """
    prefix = capture_prefix(rank, role)
    first = captures.get(step, 0) + 1
    for count in range(first, first + _MAX_CLAIMS):
        name = f"{step}" if count == 1 else f"{step}_{count}"
        path = directory / f"{prefix}-step{name}.{backend}.json"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        try:  # until saved, a capture ``convert`` reports as interrupted, not as bad JSON
            os.write(fd, _PLACEHOLDER)
        finally:
            os.close(fd)
        captures[step] = count
        return path
    raise FileExistsError(f"{_MAX_CLAIMS} capture names of step {step} are taken")
