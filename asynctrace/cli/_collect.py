"""Trace files read through one rollup: the step options, :func:`collect` and what it gives."""

from __future__ import annotations

import argparse
import heapq
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rollup import GoodputSettings, Rollup, RollupResult
from ._areal import ArealEvents, parse_bucket_map
from ._common import CliError, Progress
from ._inputs import file_size
from ._open_files import allow_open_files
from ._origins import Origins
from ._read_stats import ReadStats
from ._records import iter_file

__all__ = [
    "CLI_WINDOW",
    "GRACE_ACCEPTED",
    "LIVE",
    "MAX_GRACE_S",
    "STEP_RULE",
    "Collected",
    "add_step_options",
    "collect",
]

STEP_RULE = (
    "a step is a span of group 'step', or an unbucketed span carrying an integer "
    "rl.iteration whose parent carries neither rl.iteration nor rl.bucket and is not "
    "a step itself"
)
LIVE = GoodputSettings()  # the live rollup's defaults: the same grace as a live rollup
MAX_GRACE_S = 1e9  # the bound of the live key goodput.grace_s
GRACE_ACCEPTED = "a number of seconds of at least 0 and below 1e9 (as goodput.grace_s)"
CLI_WINDOW = 200_000  # spans remembered, over every rank's file at once


def add_step_options(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``report``."""
    parser.add_argument(
        "--step-name",
        metavar="REGEX",
        help="only spans whose name matches REGEX can be taken for steps by their "
        "rl.iteration; spans of group 'step' are steps whatever their name "
        "(default: any name)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar, even on a terminal"
    )
    parser.add_argument(
        "--bucket-map",
        metavar="CAT=BUCKET,...",
        help="for AReaL's own trace files: the bucket of each category (or a JSON file of "
        "them), over the default compute=productive, comm/io/scheduler/instr=overhead, "
        "sync=idle, misc=none",
    )


@dataclass
class Collected:
    """The rollup of a set of trace files."""

    paths: list[Path]
    result: RollupResult
    origins: Origins
    stats: ReadStats
    max_pending: int | None = None
    without_ph: int = 0  # JSON objects that are not trace events (no "ph"): skipped
    areal_outside_steps: int = 0  # AReaL's bucketed events under no step
    areal_outside_steps_s: float = 0.0
    areal_notes: list[str] = field(default_factory=list)  # what ArealEvents left out
    areal_without_ts: int = 0  # AReaL's complete events without a ts (in without_ids too)
    # how AReaL's events were given ids, to give them the same again (see read_waterfall)
    areal_buckets: dict[str, str | None] = field(default_factory=dict)
    areal_first_ids: dict[int, int] = field(default_factory=dict)


def _step_pattern(text: str | None) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise CliError(f"--step-name: invalid regular expression {text!r}: {exc}") from None


def collect(
    paths: Sequence[Path],
    *,
    step_name: str | None,
    progress: bool,
    prog: str,
    bucket_map: str | None = None,
    grace_s: float = LIVE.grace_s,
    window: int = CLI_WINDOW,
    max_pending: int | None = None,
) -> Collected:
    """Read *paths* (merged in end-time order) through a :class:`Rollup`.

    *grace_s*, *window* and *max_pending* are the rollup's (see
    :mod:`asynctrace.rollup`), as the live rollup's ``goodput.grace_s``,
    ``goodput.window`` and ``goodput.max_pending``. The grace is the live
    default; the other two are larger: the files of every rank are read
    through one rollup, and memory is not what bounds it (``report`` uses the
    same defaults). Give a run's own values to reproduce what its live rollup
    gave up.

    AReaL's own complete events (no span ids) are held per process and
    added last, with parents, buckets (*bucket_map* over the default table)
    and ``rl.iteration`` from ``global_step`` (see :mod:`._areal`).
    """
    pattern = _step_pattern(step_name)
    if not 0 <= grace_s < MAX_GRACE_S:  # grace_s * 1e6 must stay finite (a library caller)
        raise CliError(f"grace: {grace_s!r} is not accepted; accepted: {GRACE_ACCEPTED}")
    buckets = parse_bucket_map(bucket_map)
    areal = ArealEvents(buckets)
    stats = ReadStats()
    origins = Origins(paths)
    rollup = Rollup(
        step_name=pattern, grace_us=grace_s * 1e6, window=window, max_pending=max_pending
    )
    # the soft limit raised for the read only: a library caller's is put back
    restore_limit = allow_open_files(len(paths), prog) if len(paths) > 1 else None
    bar = Progress(file_size(paths), prog, enabled=progress)
    try:
        others = [0]  # JSON objects without "ph", over every file
        streams = [
            _complete_events(i, p, stats, bar, origins, others) for i, p in enumerate(paths)
        ]
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams)
        add = rollup.add
        origin = origins.origin
        take = areal.take
        for _, index, _, pid, event in merged:
            source = origin(index, pid)
            if not take(event, source):
                add(event, source)
        for event, source in areal.drain():
            add(event, source)
    finally:
        bar.close()
        if restore_limit is not None:
            restore_limit()
    if not stats.records:
        raise CliError(_nothing_read(paths, stats))
    result = rollup.finish()
    result.without_ids += areal.without_ts  # no time, as asynctrace's own events without one
    return Collected(
        list(paths),
        result,
        origins,
        stats,
        max_pending,
        without_ph=others[0],
        areal_outside_steps=areal.outside_steps,
        areal_outside_steps_s=areal.outside_steps_s,
        areal_notes=areal.notes(),
        areal_without_ts=areal.without_ts,
        areal_buckets=buckets,
        areal_first_ids=areal.first_ids,
    )


def _nothing_read(paths: Sequence[Path], stats: ReadStats) -> str:
    if len(paths) == 1 and stats.empty:
        return f"{paths[0]}: empty file, no trace events"
    refusal = stats.refusal() if len(paths) == 1 else None
    if refusal is not None:
        return refusal
    return f"no trace events in the {len(paths)} input file(s) ({stats.summary() or 'all empty'})"


def _complete_events(
    index: int,
    path: Path,
    stats: ReadStats,
    bar: Progress,
    origins: Origins,
    others: list[int],
) -> Iterator[tuple[float, int, int, object, dict[str, Any]]]:
    """``(end, file index, sequence, pid, event)`` for the complete events of one file.

    The file's ``process_name`` metadata is recorded as it passes; it precedes
    the spans in files asynctrace writes. JSON objects without ``ph`` (not
    trace events: a session record, say) are counted in ``others[0]``.
    """
    seq = 0
    for event, _ in iter_file(path, stats, bar):
        ph = event.get("ph")
        if ph == "X":
            ts = event.get("ts")
            dur = event.get("dur", 0)
            try:
                end = float(ts + dur)
            except TypeError:
                end = 0.0
            seq += 1
            yield end, index, seq, event.get("pid"), event
        elif ph == "M" and event.get("name") == "process_name":
            origins.set_metadata(index, event.get("pid"), event.get("args"))
        elif ph is None and "ph" not in event:
            others[0] += 1
