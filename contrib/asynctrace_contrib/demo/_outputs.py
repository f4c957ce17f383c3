"""The demo's own output files: set aside on a rerun, replaced once telemetry starts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import asynctrace as at

__all__ = ["SESSIONS_FILE", "TRACE_FILE", "start_telemetry"]

# The files init_driver writes (rank 0, role driver): the demo's own, replaced on a rerun.
TRACE_FILE = "traces-driver-r0.jsonl"
SESSIONS_FILE = "sessions-driver-r0.jsonl"
_GOODPUT_FILE = "goodput-driver-r0.jsonl"
_OWN_FILES = (TRACE_FILE, SESSIONS_FILE, _GOODPUT_FILE)


def _set_aside(out: Path) -> Path | None:
    """Move the demo's files of an earlier run out of the way, into a new hidden
    directory in *out*; that directory, or ``None`` when there were none.

    The exporter and the session tracer append to the files they find: the
    run starts with none. Other files in *out* are left alone.

    Raises:
        ConfigurationError: *out* does not let them be moved (nothing moved then).
    """
    earlier = [out / name for name in _OWN_FILES if (out / name).is_file()]
    if not earlier:
        return None
    aside: Path | None = None
    try:
        aside = Path(tempfile.mkdtemp(prefix=".earlier-demo-", dir=out))
        for path in earlier:
            path.replace(aside / path.name)
    except OSError as exc:
        if aside is not None:
            _put_back(aside, out)
        raise at.ConfigurationError(
            f"out: {str(out)!r} is not accepted; accepted: a directory whose earlier demo "
            f"files can be replaced ({exc.strerror or exc})"
        ) from None
    return aside


def _put_back(aside: Path, out: Path) -> None:
    """Return the files :func:`_set_aside` moved to *aside* (over any new ones)."""
    for path in aside.iterdir():
        path.replace(out / path.name)
    aside.rmdir()


def start_telemetry(config: dict[str, Any], out: Path) -> at.Telemetry:
    """``init_driver(config)`` in place of the demo's earlier files in *out*.

    They are only set aside while it checks everything (the environment's
    ``ASYNCTRACE_RUN_ID``, ``LOCAL_RANK`` and ``OTEL_EXPORTER_OTLP_PROTOCOL``
    too) and opens its files: if it refuses, they are put back unchanged;
    once it runs, they are deleted.
    """
    aside = _set_aside(out)
    try:
        telemetry = at.init_driver(config)
    except BaseException:
        if aside is not None:
            _put_back(aside, out)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return telemetry
