"""Who wrote an event: the process of each (input file, pid), and its label."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Origins", "ProcessInfo"]

_FILE_NAME = re.compile(r"^traces-(?:(?P<role>.+?)-)?r(?P<rank>\d+)\.jsonl(?:\.gz)?$")


@dataclass(frozen=True)
class ProcessInfo:
    """Who wrote an event: from the ``process_name`` metadata, else the file name.

    Example:
        >>> ProcessInfo.from_file_name("traces-driver-r0.jsonl").label
        'driver r0'
    """

    rank: int | None = None
    role: str | None = None
    run_id: str | None = None
    host: str | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        """``"r1"``, ``"driver r0"``, or ``"?"`` when the rank is unknown."""
        rank = f"r{self.rank}" if self.rank is not None else "?"
        return f"{self.role} {rank}" if self.role and self.role != "worker" else rank

    @classmethod
    def from_file_name(cls, name: str) -> ProcessInfo:
        """Rank and role from ``traces-r{rank}.jsonl`` / ``traces-{role}-r{rank}.jsonl``."""
        match = _FILE_NAME.match(name)
        if match is None:
            return cls()
        return cls(rank=int(match["rank"]), role=match["role"])

    @classmethod
    def from_metadata(cls, args: dict[str, Any], fallback: ProcessInfo) -> ProcessInfo:
        """From the ``args`` of a ``process_name`` metadata event.

        AReaL's tracer names its process ``"[role] Rank N, Process"`` and puts
        no rank or role in these args: they are read from the name then.
        """
        rank = args.get("rank")
        role = args.get("role")
        if rank is None and role is None:
            from ._areal import process_from_name

            rank, role = process_from_name(args.get("name"))
        return cls(
            rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else fallback.rank,
            role=str(role) if role else fallback.role,
            run_id=_opt_str(args.get("run_id")),
            host=_opt_str(args.get("host")),
            name=_opt_str(args.get("name")),
        )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


class Origins:
    """One origin per (input file, pid): the process that wrote an event.

    Example:
        >>> origins = Origins([Path("traces-r1.jsonl")])
        >>> origins.origin(0, 4242), origins.label(0)
        (0, 'r1')
    """

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)
        self._ids: dict[tuple[int, object], int] = {}
        self._meta: dict[tuple[int, object], ProcessInfo] = {}
        self.infos: list[ProcessInfo] = []
        self.keys: list[tuple[int, object]] = []
        self._labels: list[str] = []  # per origin, made on first use of label()

    def set_metadata(self, file_index: int, pid: object, args: object) -> None:
        """Record a ``process_name`` metadata event's ``args`` for *pid* in this file."""
        if isinstance(args, dict):
            fallback = ProcessInfo.from_file_name(self.paths[file_index].name)
            self._meta[(file_index, pid)] = ProcessInfo.from_metadata(args, fallback)

    def origin(self, file_index: int, pid: object) -> int:
        """The origin id of *pid* in the file at *file_index* (made on first use)."""
        key = (file_index, pid)
        found = self._ids.get(key)
        if found is None:
            info = self._meta.get(key) or ProcessInfo.from_file_name(self.paths[file_index].name)
            found = self._ids[key] = len(self.infos)
            self.infos.append(info)
            self.keys.append(key)
        return found

    def label(self, origin: int) -> str:
        """``"r0"``, ``"driver r0"``; the pid is added when two processes share a label.

        The labels of all origins are made at once, on the first call after an
        origin was added (one pass, not one per call).
        """
        labels = self._labels
        if len(labels) != len(self.infos):
            labels[:] = self._make_labels()
        return labels[origin]

    def _make_labels(self) -> list[str]:
        bases = [info.label for info in self.infos]
        counts = Counter(bases)
        labels = []
        for origin, base in enumerate(bases):
            label = self.paths[self.keys[origin][0]].name if base == "?" else base
            if counts[base] > 1:
                label += f" pid {self.keys[origin][1]}"
            labels.append(label)
        return labels
