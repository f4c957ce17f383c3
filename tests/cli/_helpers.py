"""Paths and small helpers shared by the command-line tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden"
VIOLATIONS = DATA / "violations"


@dataclass
class Result:
    """Exit status and captured output of one command."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def one_line(text: str) -> str:
    """Assert *text* is exactly one line without a traceback; return it."""
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_lines(path: Path, events: list[dict[str, Any]]) -> Path:
    """Write *events* as JSON lines."""
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    return path


def nesting_errors(events: list[dict[str, Any]]) -> list[str]:
    """Complete events that do not nest on their (pid, tid) track.

    Two events of one track must be disjoint or one must contain the other.
    """
    tracks: dict[tuple[Any, Any], list[tuple[float, float, str]]] = {}
    for event in events:
        if event.get("ph") == "X":
            start = event["ts"]
            tracks.setdefault((event["pid"], event["tid"]), []).append(
                (start, start + event.get("dur", 0), event["name"])
            )
    errors = []
    for track, spans in tracks.items():
        stack: list[tuple[float, float, str]] = []
        for start, end, name in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                errors.append(f"{track}: {name!r} [{start}, {end}] overlaps {stack[-1]}")
            stack.append((start, end, name))
    return errors
