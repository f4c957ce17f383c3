"""What reading the inputs skipped and found, told in the one-line summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CUT_BEFORE_EVENTS", "DAMAGED", "SAMPLES", "ReadStats", "count_malformed"]

SAMPLES = 3  # places (lines, files) named in the summary, at most
DAMAGED = "damaged compressed data"
CUT_BEFORE_EVENTS = "a JSON trace document cut short before its first event"


@dataclass
class ReadStats:
    """What reading the inputs skipped and found, for the one-line summary."""

    files: int = 0
    records: int = 0
    malformed: int = 0
    samples: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    # Files with lines but none usable: (path, "1 line, none usable: 1 not JSON").
    unusable: list[tuple[Path, str]] = field(default_factory=list)
    # Files read only up to damaged compressed data: (path, "after line 37 (...)").
    damaged: list[tuple[Path, str]] = field(default_factory=list)
    kind: str = "trace"  # what the files should be, for the summary

    def summary(self) -> str:
        """``"skipped 2 malformed lines (a.jsonl:7, b.jsonl:3)"``, or ``""``.

        Example:
            >>> ReadStats(malformed=1, samples=["traces-r1.jsonl:57"]).summary()
            'skipped 1 malformed line (traces-r1.jsonl:57)'
            >>> ReadStats(malformed=1, samples=["traces-r1.jsonl:1"],
            ...     unusable=[(Path("traces-r1.jsonl"), "1 line, none usable: 1 not JSON")]
            ... ).summary()  # doctest: +NORMALIZE_WHITESPACE
            'skipped 1 malformed line (traces-r1.jsonl:1); skipped 1 file that is not a
            JSON-lines trace (traces-r1.jsonl: 1 line, none usable: 1 not JSON)'
        """
        parts = []
        if self.malformed:
            where = ", ".join(self.samples)
            more = ", ..." if self.malformed > len(self.samples) else ""
            plural = "s" if self.malformed != 1 else ""
            parts.append(f"skipped {self.malformed} malformed line{plural} ({where}{more})")
        if self.empty:
            plural = "s" if len(self.empty) != 1 else ""
            parts.append(f"{len(self.empty)} empty file{plural} ({', '.join(self.empty[:3])})")
        if self.unusable:
            count = len(self.unusable)
            which = "file that is" if count == 1 else "files that are"
            where = "; ".join(f"{path.name}: {why}" for path, why in self.unusable[:SAMPLES])
            more = "; ..." if count > SAMPLES else ""
            parts.append(f"skipped {count} {which} not a JSON-lines {self.kind} ({where}{more})")
        if self.damaged:
            count = len(self.damaged)
            which = "file" if count == 1 else "files"
            where = "; ".join(f"{path.name}: {why}" for path, why in self.damaged[:SAMPLES])
            more = "; ..." if count > SAMPLES else ""
            parts.append(
                f"read {count} {which} only up to damaged compressed data, the rest of "
                f"{'it' if count == 1 else 'them'} skipped ({where}{more})"
            )
        return "; ".join(parts)

    def refusal(self) -> str | None:
        """Why a single input file gave nothing, when it had lines but none usable.

        Example:
            >>> stats = ReadStats(files=1, unusable=[(Path("t.jsonl"), "1 line, none usable")])
            >>> stats.refusal()
            't.jsonl: not a JSON-lines trace (1 line, none usable)'
        """
        if self.files != 1 or self.records or not self.unusable:
            return None
        path, why = self.unusable[0]
        if why.startswith((DAMAGED, CUT_BEFORE_EVENTS)):
            return f"{path}: {why}"
        return f"{path}: not a JSON-lines {self.kind} ({why})"


def count_malformed(stats: ReadStats, count: int, samples: list[str]) -> None:
    """Add *count* malformed lines to *stats*, and *samples* while there is room."""
    stats.malformed += count
    stats.samples.extend(samples[: max(0, SAMPLES - len(stats.samples))])
