"""What ``watch`` shows, per rank and overall, counted from the lines its files gained."""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._events import real_number
from ._watch_lines import buckets_ok, exporters_ok, step_ok, time_ok

__all__ = ["MAX_PHASE_KEYS", "Rank", "State"]

_KEEP_STEPS = 500
_KEEP_PHASE = 10_000
MAX_PHASE_KEYS = 32  # distinct ``*_s`` keys kept (as report's histograms); others counted


@dataclass
class Rank:
    """What one writer's goodput file said last (what it holds now)."""

    label: str
    steps: int = 0
    last_line: float = 0.0  # wall time of its latest line (or the file's mtime)
    ended: bool = False
    exporters: dict[str, list[int]] = field(default_factory=dict)
    wall: float = 0.0  # its steps' wall seconds, and their productive seconds
    productive: float = 0.0
    skipped: int = 0  # its lines of a shape the view cannot show


def _label(path: Path, directory: Path | None = None) -> str:
    """A rank's label: its file's name without ``goodput-`` and what follows a dot;
    with *directory*, the path relative to it without ``goodput-`` and ``.jsonl``
    (distinct for distinct files)."""
    name = path.name.removeprefix("goodput-")
    if directory is None:
        return name.split(".")[0]
    try:
        parent = path.parent.relative_to(directory)
    except ValueError:
        parent = path.parent
    return (parent / name.removesuffix(".jsonl")).as_posix()


@dataclass
class State:
    """Everything the view shows, updated from new lines, kept per file.

    A file read again from its start (:attr:`Follower.restarted`) is first
    :meth:`forget`-ten, so that its lines never count twice; a file gone is
    :meth:`drop`-ped.
    """

    steps: deque[tuple[Path, tuple[float, int], dict[str, Any]]] = field(
        default_factory=lambda: deque(maxlen=_KEEP_STEPS)
    )  # (file, (time, arrival), step line), the latest, in time order
    ranks: dict[Path, Rank] = field(default_factory=dict)
    sessions: dict[Path, Counter[str]] = field(default_factory=dict)  # statuses, per file
    phases: dict[str, deque[tuple[Path, float]]] = field(default_factory=dict)
    # per file, its values of *_s keys past the first MAX_PHASE_KEYS: counted, not kept
    phases_left_out: dict[Path, int] = field(default_factory=dict)
    unreadable: int = 0  # lines that are not a JSON object, in every file followed
    changes: int = 0  # counts what changed the counts (a new view to print)
    _arrivals: int = 0  # steps read, the order of steps of one time

    def label(self, path: Path) -> str:
        """The label of the rank whose file is at *path*."""
        rank = self.ranks.get(path)
        return rank.label if rank is not None else _label(path)

    def relabel(self, directory: Path) -> None:
        """Label each rank by its file's name, or, where two files followed under
        *directory* give one label, by their paths relative to it."""
        short = Counter(_label(path) for path in self.ranks)
        for path, rank in self.ranks.items():
            label = _label(path, directory if short[_label(path)] > 1 else None)
            if rank.label != label:
                rank.label = label
                self.changes += 1

    @property
    def total_steps(self) -> int:
        """Steps the goodput files hold."""
        return sum(rank.steps for rank in self.ranks.values())

    @property
    def wall(self) -> float:
        """Wall seconds of those steps."""
        return math.fsum(rank.wall for rank in self.ranks.values())

    @property
    def productive(self) -> float:
        """Productive seconds of those steps."""
        return math.fsum(rank.productive for rank in self.ranks.values())

    @property
    def skipped(self) -> int:
        """Lines of a shape the view cannot show (counted, shown in the view)."""
        return sum(rank.skipped for rank in self.ranks.values())

    @property
    def statuses(self) -> Counter[str]:
        """Sessions per status, over every sessions file."""
        total: Counter[str] = Counter()
        for counts in self.sessions.values():
            total.update(counts)
        return total

    @property
    def phase_values_left_out(self) -> int:
        """Values of ``*_s`` keys past the first :data:`MAX_PHASE_KEYS`, over every file."""
        return sum(self.phases_left_out.values())

    def drop(self, path: Path) -> None:
        """Drop the file at *path* and what it gave: it is gone."""
        self.forget(path)
        if self.ranks.pop(path, None) is not None:
            self.changes += 1

    def forget(self, path: Path) -> None:
        """Drop what the file at *path* gave: it is read again from its start."""
        self.changes += 1
        rank = self.ranks.get(path)
        if rank is not None:
            self.ranks[path] = Rank(rank.label)  # (keeps its place in the view)
        if any(source == path for source, _, _ in self.steps):
            kept = [step for step in self.steps if step[0] != path]
            self.steps = deque(kept, maxlen=_KEEP_STEPS)
        self.sessions.pop(path, None)
        self.phases_left_out.pop(path, None)
        for key, values in list(self.phases.items()):
            if any(source == path for source, _ in values):
                kept_values = [value for value in values if value[0] != path]
                if kept_values:
                    self.phases[key] = deque(kept_values, maxlen=_KEEP_PHASE)
                else:
                    del self.phases[key]

    def add_goodput(self, path: Path, lines: Iterable[dict[str, Any]], modified: float) -> None:
        """Count the goodput lines *lines*, new in the file at *path* (mtime *modified*)."""
        rank = self.ranks.get(path)
        if rank is None:
            rank = self.ranks[path] = Rank(_label(path))
            self.changes += 1
        rank.last_line = max(rank.last_line, modified)
        new: list[tuple[Path, tuple[float, int], dict[str, Any]]] = []
        for line in lines:
            self.changes += 1
            kind = line.get("kind")
            if (kind == "step" and not (step_ok(line) and buckets_ok(line))) or not time_ok(line):
                rank.skipped += 1
                continue
            if isinstance(line.get("time"), (int, float)):
                rank.last_line = max(rank.last_line, float(line["time"]))
            exporters = line.get("exporters")
            if exporters is not None:
                if exporters_ok(exporters):
                    rank.exporters = exporters
                else:
                    rank.skipped += 1
            if kind == "end":
                rank.ended = True
            elif kind == "step":
                rank.steps += 1
                rank.ended = False
                when = line.get("time")
                self._arrivals += 1
                new.append((path, (modified if when is None else when, self._arrivals), line))
                if isinstance(line.get("wall_s"), (int, float)):
                    rank.wall += line["wall_s"]
                    rank.productive += float(line.get("productive_s") or 0.0)
        if new:
            # merged by time: a rank behind the others never hides their latest steps
            new.sort(key=_when)
            merged = list(heapq.merge(self.steps, new, key=_when))[-_KEEP_STEPS:]
            self.steps = deque(merged, maxlen=_KEEP_STEPS)

    def add_sessions(self, path: Path, lines: Iterable[dict[str, Any]]) -> None:
        """Count the session lines *lines*, new in the file at *path*."""
        statuses = self.sessions.setdefault(path, Counter())
        for line in lines:
            self.changes += 1
            statuses[str(line.get("status"))] += 1
            for key, value in line.items():
                if key.endswith("_s") and real_number(value):
                    phase = self.phases.get(key)
                    if phase is None:
                        if len(self.phases) >= MAX_PHASE_KEYS:  # memory bound, as report's
                            left = self.phases_left_out
                            left[path] = left.get(path, 0) + 1
                            continue
                        phase = self.phases[key] = deque(maxlen=_KEEP_PHASE)
                    phase.append((path, float(value)))


def _when(step: tuple[Path, tuple[float, int], dict[str, Any]]) -> tuple[float, int]:
    return step[1]
