"""A whole JSON document loaded at once: the fallback for a file with no usable line."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from ._common import loads
from ._events import usable_events
from ._inputs import open_input, single_pass

__all__ = ["MAX_DOCUMENT", "whole_document"]

MAX_DOCUMENT = 64 << 20  # bytes: a larger file with no usable line is not loaded whole


def whole_document(path: Path) -> tuple[list[dict[str, Any]], int] | str | None:
    """A Chrome JSON document (``{"traceEvents": [...]}`` or ``[...]``), loaded whole: its
    events, and how many of its items were left out (not an object, or not a usable event).

    ``None`` when it is not such a document; a reason when it was not tried: a
    document over 64 MiB (decompressed) is not loaded, so memory stays bounded,
    and an input that is not a regular file (a pipe) was consumed by reading
    its lines.
    """
    if single_pass(path):
        return "not read again as one JSON document (not a regular file: read once)"
    try:
        with open_input(path) as stream:  # measured first, in chunks: a gzip hides its size
            size, data = 0, b""
            while size <= MAX_DOCUMENT:
                chunk = stream.read(1 << 20)
                if not chunk:
                    break
                size += len(chunk)
        if size <= MAX_DOCUMENT:
            with open_input(path) as stream:
                data = stream.read(MAX_DOCUMENT + 1)  # bounded also if it grew meanwhile
    except (OSError, EOFError, zlib.error):
        return None
    if size > MAX_DOCUMENT or len(data) > MAX_DOCUMENT:
        return f"not read as one JSON document (over {MAX_DOCUMENT >> 20} MiB)"
    try:
        document = loads(data)
    except (ValueError, RecursionError):
        return None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        return None
    return usable_events(events)
