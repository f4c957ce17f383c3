"""What an input holds, ``"traces"`` or ``"sessions"``: told by its first JSON object."""

from __future__ import annotations

import functools
import gzip
import zlib
from pathlib import Path

from ._common import CliError, loads
from ._inputs import BOM, open_input, skip_rest

__all__ = ["sniff_kind"]

_SNIFF_LINE = 1 << 20  # bytes of a line sniff_kind parses; a longer one is judged by its start


def _kind_of_start(start: bytes) -> str | None:
    """``"traces"`` or ``"sessions"`` from the first MiB of a line too long to parse here."""
    head = start.lstrip()[:1]
    if head not in (b"{", b"["):
        return None
    if b'"ph"' in start or b'"traceEvents"' in start:
        return "traces"
    if b'"session_id"' in start or b'"submit_ts"' in start:
        return "sessions"
    return None


def sniff_kind(path: Path) -> str | None:
    """``"traces"`` or ``"sessions"`` from the first JSON object in the file, else the name."""
    try:
        with open_input(path) as stream:
            lines = iter(functools.partial(stream.readline, _SNIFF_LINE + 1), b"")
            for _, line in zip(range(64), lines, strict=False):
                if len(line) > _SNIFF_LINE and line[-1] != 10:  # long: judged by its start
                    skip_rest(stream)
                    kind = _kind_of_start(line)
                    if kind is not None:
                        return kind
                    continue
                raw = line.strip().rstrip(b",")
                if raw.startswith(BOM):
                    raw = raw[3:].lstrip()
                if not raw:
                    continue
                try:
                    obj = loads(raw)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    if "ph" in obj or isinstance(obj.get("traceEvents"), list):
                        return "traces"
                    if "session_id" in obj or "submit_ts" in obj:
                        return "sessions"
    except (EOFError, zlib.error, gzip.BadGzipFile):  # cut short or damaged: go by the name
        pass  # (reading it names the damage)
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    if path.name.startswith("sessions"):
        return "sessions"
    if path.name.startswith("traces"):
        return "traces"
    return None
