"""Profiler captures (``profile-r{rank}-step{N}.{backend}.json``) merged onto the span timeline.

A capture is a Chrome trace of its own (viztracer's or ``torch.profiler``'s),
on its backend's clock. The process that wrote it measured the offset to the
spans' clock and stored it, with its error bound, under
``otherData.asynctrace``; here each event is shifted by that offset, put under
the process that recorded the profiled span, and given tracks of its own
(``profile step N: <thread>``), so Perfetto shows operators and Python calls
right under the step they belong to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._common import dumps

__all__ = ["CAPTURE_NAME", "Capture", "find_captures", "load_capture"]

CAPTURE_NAME = re.compile(r"^profile-r(?P<rank>\d+)-step(?P<step>\w+)\.(?P<backend>\w+)\.json$")
_FIRST_TID = 3_000_000_000  # tids of the capture tracks this command adds
_DROPPED_METADATA = {"process_name", "process_labels", "process_sort_index"}


def find_captures(specs: Iterable[str]) -> list[Path]:
    """The capture files among *specs*: given by name, or found in directories."""
    found: dict[Path, Path] = {}
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            candidates: Iterable[Path] = sorted(path.rglob("profile-r*-step*.*.json"))
        else:
            candidates = [path]
        for candidate in candidates:
            if CAPTURE_NAME.match(candidate.name) and candidate.is_file():
                found.setdefault(candidate.resolve(), candidate)
    return list(found.values())


@dataclass
class Capture:
    """One capture, read and checked."""

    path: Path
    events: list[dict[str, Any]]
    pid: object
    offset_us: float
    error_us: float
    step: str


def load_capture(path: Path) -> Capture | str:
    """The capture at *path*, or why it cannot be merged (a one-line reason)."""
    try:
        with open(path, "rb") as stream:
            document = json.load(stream)
    except (OSError, ValueError) as exc:
        return f"{path.name}: not readable as JSON ({exc.__class__.__name__})"
    if isinstance(document, list):
        return f"{path.name}: no clock alignment recorded (saved by an interrupted process?)"
    about = (
        (document.get("otherData") or {}).get("asynctrace") if isinstance(document, dict) else None
    )
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(about, dict) or not isinstance(events, list):
        return f"{path.name}: no clock alignment recorded (saved by an interrupted process?)"
    offset, error = about.get("clock_offset_us"), about.get("clock_error_us")
    if not isinstance(offset, (int, float)) or not isinstance(error, (int, float)):
        return f"{path.name}: its clock alignment is not a number"
    match = CAPTURE_NAME.match(path.name)
    step = match["step"] if match else "?"
    clean = [event for event in events if isinstance(event, dict)]
    return Capture(path, clean, about.get("pid"), float(offset), float(error), step)


def capture_lines(
    capture: Capture, out_pid: object, shift: float, next_tid: Callable[[], int]
) -> Iterator[bytes]:
    """The capture's events for the output: on the spans' clock, under *out_pid*."""
    names: dict[object, str] = {}
    for event in capture.events:
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            args = event.get("args")
            if isinstance(args, dict) and isinstance(args.get("name"), str):
                names[event.get("tid")] = args["name"]
    tids: dict[object, int] = {}
    delta = capture.offset_us - shift
    for event in capture.events:
        if event.get("ph") == "M" and (
            event.get("name") in _DROPPED_METADATA or event.get("name") == "thread_name"
        ):
            continue  # the process is ours; tracks are named below
        tid = event.get("tid")
        track = tids.get(tid)
        if track is None:
            track = tids[tid] = next_tid()
            name = names.get(tid, f"tid {tid}")
            yield dumps(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": out_pid,
                    "tid": track,
                    "args": {"name": f"profile step {capture.step}: {name}"},
                }
            )
        moved = dict(event)
        moved["pid"] = out_pid
        moved["tid"] = track
        ts = moved.get("ts")
        if isinstance(ts, (int, float)) and not isinstance(ts, bool):
            moved["ts"] = ts + delta
        yield dumps(moved)


def tid_counter() -> Callable[[], int]:
    """Fresh tids for capture tracks."""
    state = [_FIRST_TID]

    def take() -> int:
        state[0] += 1
        return state[0]

    return take
