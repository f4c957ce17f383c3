"""Session records summarised for the report: counts, duration histograms, a timeline sample."""

from __future__ import annotations

import random
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import Progress
from ._events import real_number
from ._inputs import file_size
from ._read_stats import ReadStats
from ._records import iter_file

__all__ = ["MAX_DURATION_FIELDS", "MAX_PHASES", "SessionRow", "Sessions", "read_sessions"]

_TIMELINE_SESSIONS = 200
MAX_DURATION_FIELDS = 32  # distinct ``*_s`` fields with a histogram; values of others are counted
MAX_PHASES = 32  # distinct phase names on the timeline; executions of others are counted
_MAX_PHASE_RUNS = 64  # phase executions drawn per session; the rest are counted


@dataclass
class SessionRow:
    """One session on the lifecycle timeline."""

    session_id: str
    task_id: str
    status: str
    submit: float
    finalized: float
    phases: list[tuple[str, float, float]]


@dataclass
class Sessions:
    """Session records, summarised: counts, durations and a timeline sample."""

    files: list[Path]
    count: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    durations: dict[str, array[float]] = field(default_factory=dict)
    timeline: list[SessionRow] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    bad_durations: int = 0  # ``*_s`` values that are not seconds within ±1e12
    bad_samples: list[str] = field(default_factory=list)
    other_fields: int = 0  # values of ``*_s`` fields past the first MAX_DURATION_FIELDS
    phase_runs_left_out: int = 0  # executions of phases past MAX_PHASES, or past _MAX_PHASE_RUNS
    bad_phase_runs: int = 0  # phase entries that are not a run with a start before its end
    no_session_id: int = 0  # records without a ``session_id``: not sessions, not counted
    no_submit: int = 0  # sessions without a submit time: counted, not on the timeline
    on_timeline: int = 0  # sessions with a submit time (the timeline samples these)
    copies: int = 0  # records identical to one read before (a file read twice): not counted

    def left_out(self) -> list[str]:
        """What the page leaves out of the session charts, one sentence each.

        Example:
            >>> Sessions([], other_fields=3).left_out()
            ['left out 3 session durations of *_s fields past the first 32, which have histograms']
        """
        out = []
        if self.copies:
            n = self.copies
            out.append(
                f"skipped {n} session record{'s' if n != 1 else ''} identical to one read "
                "before (the same file given twice?), not counted"
            )
        if self.no_session_id:
            n = self.no_session_id
            out.append(
                f"left out {n} record{'s' if n != 1 else ''} of the sessions files without "
                "a session_id (not counted as sessions, their durations not charted)"
            )
        if self.no_submit:
            n = self.no_submit
            out.append(
                f"left out of the timeline {n} session{'s' if n != 1 else ''} whose "
                "submit_ts is missing or not a number of seconds (counted in the statuses "
                "and histograms)"
            )
        if self.bad_durations:
            n = self.bad_durations
            more = ", ..." if n > len(self.bad_samples) else ""
            out.append(
                f"left out {n} session duration{'s' if n != 1 else ''} that "
                f"{'is' if n == 1 else 'are'} not a number of seconds within ±1e12 "
                f"({', '.join(self.bad_samples)}{more})"
            )
        if self.other_fields:
            n = self.other_fields
            out.append(
                f"left out {n} session duration{'s' if n != 1 else ''} of *_s fields past "
                f"the first {MAX_DURATION_FIELDS}, which have histograms"
            )
        if self.phase_runs_left_out:
            n = self.phase_runs_left_out
            out.append(
                f"left out {n} phase execution{'s' if n != 1 else ''} of the timeline: of "
                f"phases past the first {MAX_PHASES} names, or past {_MAX_PHASE_RUNS} "
                "in one session"
            )
        if self.bad_phase_runs:
            n = self.bad_phase_runs
            out.append(
                f"left out {n} malformed phase execution{'s' if n != 1 else ''} of the "
                "timeline: phases not a mapping of names to lists of runs, a run not an "
                "object, a start_ts or end_ts not a number of seconds, or an end before "
                "its start"
            )
        return out


def read_sessions(paths: list[Path], stats: ReadStats, progress: bool) -> Sessions:
    """Read the session records of *paths* into a :class:`Sessions` summary.

    A record whose line is the same as one read before (a copy of a file, in a
    subdirectory, say) is a copy: counted in ``copies``, not as a session.
    """
    out = Sessions(paths)
    sample = random.Random(0)
    reservoir: list[SessionRow] = []
    phase_order: dict[str, None] = {}
    seen: set[int] = set()  # hashes of the records' lines: a copy of a file adds nothing
    bar = Progress(file_size(paths), "asynctrace report", enabled=progress)
    try:
        for path in paths:
            for record, raw in iter_file(path, stats, bar):
                if "session_id" not in record:
                    out.no_session_id += 1
                    continue
                line_hash = hash(raw.strip())
                if line_hash in seen:
                    out.copies += 1
                    continue
                seen.add(line_hash)
                out.count += 1
                out.statuses[str(record.get("status"))] += 1
                for key, value in record.items():
                    if key.endswith("_s"):
                        _add_duration(out, path, key, value)
                row = _session_row(record, phase_order, out)
                if row is None:
                    out.no_submit += 1
                    continue
                out.on_timeline += 1
                if len(reservoir) < _TIMELINE_SESSIONS:
                    reservoir.append(row)
                else:
                    slot = sample.randrange(out.on_timeline)
                    if slot < _TIMELINE_SESSIONS:
                        reservoir[slot] = row
    finally:
        bar.close()
    out.timeline = sorted(reservoir, key=lambda r: (r.submit, r.session_id))
    out.phases = list(phase_order)
    return out


def _add_duration(out: Sessions, path: Path, key: str, value: object) -> None:
    """Add one ``*_s`` value to its histogram, or count it as left out."""
    seconds = _seconds(value)
    if seconds is None:  # NaN, an infinity, an int no float holds, a string, null
        out.bad_durations += 1
        if len(out.bad_samples) < 3:
            out.bad_samples.append(f"{path.name}: {key[:40]}")
        return
    values = out.durations.get(key)
    if values is None:
        if len(out.durations) >= MAX_DURATION_FIELDS:  # a file cannot make endless charts
            out.other_fields += 1
            return
        values = out.durations[key] = array("d")
    values.append(seconds)


def _seconds(value: object) -> float | None:
    """*value* as a time in seconds, if it is a finite number a float holds."""
    return float(value) if real_number(value, _MAX_S) else None  # type: ignore[arg-type]


_MAX_S = 1e12  # about 31,700 years: any real timestamp


def _latest(phases: object, submit: float) -> float:
    """The latest time a pending session's phase runs name (its submit time if none):
    where its open runs are drawn to, as no end was recorded."""
    latest = submit
    if isinstance(phases, dict):
        for runs in phases.values():
            for run in runs if isinstance(runs, list) else ():
                if isinstance(run, dict):
                    for key in ("start_ts", "end_ts"):
                        seconds = _seconds(run.get(key))
                        if seconds is not None and seconds > latest:
                            latest = seconds
    return latest


def _session_row(
    record: dict[str, Any], phase_order: dict[str, None], out: Sessions
) -> SessionRow | None:
    submit = _seconds(record.get("submit_ts"))
    if submit is None:
        return None
    raw = record.get("phases")
    finalized = _seconds(record.get("finalized_ts"))
    if finalized is None:  # still pending at shutdown (AReaL's style): its latest time
        finalized = _latest(raw, submit)
    phases: list[tuple[str, float, float]] = []
    if raw is not None and not isinstance(raw, dict):
        out.bad_phase_runs += 1  # the whole field: its runs cannot be told apart
    if isinstance(raw, dict):
        for name, runs in raw.items():
            if not isinstance(runs, list):
                out.bad_phase_runs += 1
                continue
            if name not in phase_order:
                if len(phase_order) >= MAX_PHASES:  # a file cannot make endless colours
                    out.phase_runs_left_out += len(runs)
                    continue
                phase_order[name] = None
            for run in runs:
                if not isinstance(run, dict):
                    out.bad_phase_runs += 1
                    continue
                start = _seconds(run.get("start_ts"))
                end_ts = run.get("end_ts")
                end = finalized if end_ts is None else _seconds(end_ts)  # None: still running
                if start is None or end is None or end < start:
                    out.bad_phase_runs += 1
                    continue
                if len(phases) >= _MAX_PHASE_RUNS:
                    out.phase_runs_left_out += 1
                    continue
                phases.append((name, start, end))
    return SessionRow(
        session_id=str(record.get("session_id")),
        task_id=str(record.get("task_id")),
        status=str(record.get("status")),
        submit=submit,
        finalized=finalized,
        phases=phases,
    )
