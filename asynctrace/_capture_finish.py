"""A saved capture made whole: its clock aligned to the spans', its overflow noted.

Each clock marker of a capture (:meth:`asynctrace._capture_backend.Backend.mark`)
gives an offset (the middle of its wall-clock interval minus the marker's
timestamp) and an error bound (half that interval); the capture's offset is
their mean, and its error the largest half-interval plus half the spread
between the offsets. Both are written into the file under
``otherData.asynctrace``.
"""

from __future__ import annotations

import importlib
import json
import logging
from typing import Any

from ._capture_backend import Backend
from ._redact import redact_text

__all__ = ["clock_alignment", "finish_capture"]

logger = logging.getLogger("asynctrace")

_warned: set[str] = set()


def _decode(data: bytes) -> Any:
    try:
        msgspec: Any = importlib.import_module("msgspec")  # the sdk extra: four times faster
    except ImportError:
        return json.loads(data)
    return msgspec.json.decode(data)


def _encode(document: Any) -> bytes:
    try:
        msgspec: Any = importlib.import_module("msgspec")
    except ImportError:
        return json.dumps(document, separators=(",", ":")).encode("utf-8")
    return msgspec.json.encode(document)  # type: ignore[no-any-return]


def clock_alignment(events: list[Any], marks: list[tuple[str, int, int]]) -> tuple[float, float]:
    """``(offset, error)`` in microseconds: epoch time = backend ``ts`` + offset, within error.

    Raises:
        ValueError: no marker was found among *events*.

    Example:
        >>> clock_alignment([{"name": "m", "ts": 10.0}], [("m", 1_000_000, 1_002_000)])
        (991.0, 1.0)
    """
    stamps = {
        e["name"]: float(e["ts"])
        for e in events
        if isinstance(e, dict) and isinstance(e.get("name"), str) and "ts" in e
    }
    offsets: list[float] = []
    halves: list[float] = []
    for name, before, after in marks:
        if name in stamps:
            offsets.append((before + after) / 2000 - stamps[name])
            halves.append((after - before) / 2000)
    if not offsets:
        raise ValueError("no clock marker in the capture")
    offset = sum(offsets) / len(offsets)
    error = max(halves) + (max(offsets) - min(offsets)) / 2
    return offset, error


def _without_stale_threads(events: list[Any], stale: frozenset[int]) -> list[Any]:
    """*events* without the names of threads a reused tracer saw in earlier captures only
    (viztracer keeps a tracer's thread names for its life)."""
    active = {e.get("tid") for e in events if isinstance(e, dict) and e.get("ph") != "M"}
    return [
        e
        for e in events
        if not (
            isinstance(e, dict)
            and e.get("ph") == "M"
            and e.get("name") == "thread_name"
            and e.get("tid") in stale
            and e.get("tid") not in active
        )
    ]


def _overflowed(backend: Backend, events: object, metadata: object) -> bool:
    """Whether *backend*'s circular buffer filled up, so its earliest *events* are lost.

    viztracer's own flag (``viztracer_metadata.overflow``) is set only when the
    events after its leading metadata number its entries exactly, which the
    task names it appends after them (the asyncio case) undo. So the buffer is
    also taken as full when the capture's first clock marker (made as it
    started) is gone, or when its events (metadata aside) fill the entries.
    """
    if isinstance(metadata, dict) and metadata.get("overflow") is True:
        return True
    if backend.name != "python" or not backend.marks or not isinstance(events, list):
        return False  # torch's profiler keeps every event: no buffer to fill
    first = backend.marks[0][0]
    count = 0
    started = False
    for event in events:
        if isinstance(event, dict):
            count += event.get("ph") != "M"
            started = started or event.get("name") == first
    return not started or count >= backend.settings.entries


def _redact_names(events: list[Any]) -> None:
    """Redact the thread and task names of a capture's metadata events in place.

    viztracer names a track per thread and per asyncio task, torch per thread:
    ``create_task(..., name=f"GET {url}")`` names a URL, token and all, which
    asynctrace's trace files never hold raw (``_chrome_metadata.owner_name``).
    """
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "M":
            args = event.get("args")
            if isinstance(args, dict) and isinstance(args.get("name"), str):
                args["name"] = redact_text(args["name"])


def finish_capture(backend: Backend, about: dict[str, Any]) -> bool:
    """Save *backend*'s capture, then write its clock alignment into it (a daemon thread);
    ``False`` if it could not be saved.

    Both writes go to temporary files beside the capture's, which replaces it
    whole only at the end: a write that fails (a full disk) leaves the claimed
    file's empty trace, which ``convert`` reports as not saved, and no half-written
    capture. A capture whose buffer filled up (viztracer's is circular: the oldest
    events, the step's start among them, were overwritten) says so with
    ``overflow: true`` under ``otherData.asynctrace``, and is warned about once
    (see :func:`_overflowed`).
    """
    raw = backend.path.with_name(f".{backend.path.name}.raw.json")  # viztracer: .json
    temporary = backend.path.with_name(f".{backend.path.name}.tmp")
    try:
        backend.save(raw)
        document = _decode(raw.read_bytes())
        if isinstance(document, list):
            document = {"traceEvents": document}
        if isinstance(document.get("traceEvents"), list):
            _redact_names(document["traceEvents"])
        stale: frozenset[int] = getattr(backend, "stale", frozenset())
        if stale and isinstance(document.get("traceEvents"), list):
            document["traceEvents"] = _without_stale_threads(document["traceEvents"], stale)
        offset, error = clock_alignment(document.get("traceEvents", []), backend.marks)
        overflow = _overflowed(
            backend, document.get("traceEvents"), document.get("viztracer_metadata")
        )
        other = document.setdefault("otherData", {})
        other["asynctrace"] = {
            **about,
            "backend": backend.name,
            "clock_offset_us": offset,
            "clock_error_us": error,
            "overflow": overflow,
        }
        if overflow and "overflow" not in _warned:
            _warned.add("overflow")
            logger.warning(
                "asynctrace: the profile %s filled its buffer of %d entries: its earliest "
                "events are lost (the step's start among them); raise profiler.entries to "
                "keep a whole step",
                backend.path.name,
                backend.settings.entries,
            )
        temporary.write_bytes(_encode(document))
        temporary.replace(backend.path)
    except Exception:
        logger.warning("asynctrace: saving the profile %s failed", backend.path, exc_info=True)
        temporary.unlink(missing_ok=True)
        return False
    finally:
        raw.unlink(missing_ok=True)
    return True
