"""``asynctrace watch DIR``: a live terminal view of a running job's goodput.

It follows the ``goodput-*.jsonl`` files (one line per finished step, written
by the runtime with ``goodput`` on) and the ``sessions-*.jsonl`` files under
DIR, across ranks, by polling: no inotify, so a shared filesystem works. A
line is read once it is complete; a file that shrinks or is replaced is read
again from its start.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import CliError, HelpFormatter
from ._reader import real_number

__all__ = ["Follower", "State", "add_parser", "run"]

EPILOG = """\
examples:
  asynctrace watch asynctrace-traces/20261129-101500-ab12cd/
  asynctrace watch run/ --interval 5 --stale 300     # a shared filesystem, slow steps
  asynctrace watch run/ --once                       # print the view once and exit

The job writes goodput-r{rank}.jsonl with the goodput configuration key on
(goodput: true). Ctrl-C leaves the view.
"""

BUCKET_STYLES = (
    ("productive", "green"),
    ("overhead", "yellow"),
    ("idle", "blue"),
    ("wasted", "red"),
    ("unattributed", "bright_black"),
)
_BAR = 30


def add_parser(subparsers: Any) -> None:
    """Register the ``watch`` subcommand."""
    parser = subparsers.add_parser(
        "watch",
        help="live view of a running job's goodput, from its output directory",
        description="Per-step goodput bars with their bucket split, the slowest leaf spans "
        "of the last step, session status counts and phase percentiles, exporter drops and "
        "errors, and which ranks stopped writing; refreshed as the files grow.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("directory", metavar="DIR", type=Path, help="the job's output directory")
    parser.add_argument(
        "--interval", type=float, default=1.0, metavar="S", help="seconds between polls (1)"
    )
    parser.add_argument(
        "--steps", type=int, default=15, metavar="N", help="steps shown, the latest (15)"
    )
    parser.add_argument(
        "--stale",
        type=float,
        default=60.0,
        metavar="S",
        help="a rank with no new line for S seconds (and no end line) is shown as stopped (60)",
    )
    parser.add_argument("--once", action="store_true", help="print the view once and exit")
    parser.set_defaults(run=run)


class Follower:
    """New complete lines of one file, by polling (a replaced or shrunk file restarts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._identity: tuple[int, int] | None = None
        self._partial = b""
        self.modified = 0.0
        self.skipped = 0  # lines that are not a JSON object (a torn line of a killed writer)

    def lines(self) -> list[dict[str, Any]]:
        """The JSON objects of the lines completed since the last call."""
        try:
            info = self.path.stat()
        except OSError:
            return []
        identity = (info.st_dev, info.st_ino)
        if identity != self._identity or info.st_size < self._offset:
            self._identity, self._offset, self._partial = identity, 0, b""
        self.modified = info.st_mtime
        if info.st_size == self._offset:
            return []
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read(info.st_size - self._offset)
        except OSError:
            return []
        self._offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        out = []
        for raw in complete:
            if not raw.strip():
                continue
            try:
                item = json.loads(raw, parse_constant=_no_constant)
            except ValueError:  # a torn line of a killed writer, NaN, not JSON
                self.skipped += 1
                continue
            if isinstance(item, dict):
                out.append(item)
            else:
                self.skipped += 1
        return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON holds")


def _step_ok(line: dict[str, Any]) -> bool:
    """Whether a step line's fields have the types the view reads: the times and the
    goodput numbers, ``spans`` names to numbers (a line of another shape is skipped)."""
    for key, value in line.items():
        timed = key.endswith("_s") or key in ("goodput", "time")
        if timed and value is not None and not real_number(value):
            return False
    spans = line.get("spans")
    return spans is None or (isinstance(spans, dict) and all(map(real_number, spans.values())))


def _time_ok(line: dict[str, Any]) -> bool:
    """A line's ``time``, when it has one, is a number the view can compare."""
    value = line.get("time")
    return value is None or real_number(value)


def _exporters_ok(value: object) -> bool:
    """``{name: [exported, dropped, failed, ...]}`` with integer counts."""
    return isinstance(value, dict) and all(
        isinstance(counts, list)
        and len(counts) >= 3
        and all(c.__class__ is int for c in counts[:3])
        for counts in value.values()
    )


@dataclass
class Rank:
    """What one writer's goodput file said last."""

    label: str
    steps: int = 0
    last_line: float = 0.0  # wall time of its latest line (or the file's mtime)
    ended: bool = False
    exporters: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class State:
    """Everything the view shows, updated from new lines."""

    steps: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=500))
    ranks: dict[Path, Rank] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)
    phases: dict[str, deque[float]] = field(default_factory=dict)
    total_steps: int = 0
    productive: float = 0.0
    wall: float = 0.0
    skipped: int = 0  # lines of a shape the view cannot show (counted, shown in the view)
    unreadable: int = 0  # lines that are not a JSON object, in every file followed

    def add_goodput(self, path: Path, lines: Iterable[dict[str, Any]], modified: float) -> None:
        rank = self.ranks.get(path)
        if rank is None:
            rank = self.ranks[path] = Rank(path.name.removeprefix("goodput-").split(".")[0])
        rank.last_line = max(rank.last_line, modified)
        for line in lines:
            if (line.get("kind") == "step" and not _step_ok(line)) or not _time_ok(line):
                self.skipped += 1
                continue
            if isinstance(line.get("time"), (int, float)):
                rank.last_line = max(rank.last_line, float(line["time"]))
            exporters = line.get("exporters")
            if exporters is not None:
                if _exporters_ok(exporters):
                    rank.exporters = exporters
                else:
                    self.skipped += 1
            if line.get("kind") == "end":
                rank.ended = True
            elif line.get("kind") == "step":
                rank.steps += 1
                rank.ended = False
                self.total_steps += 1
                line["_rank"] = rank.label
                self.steps.append(line)
                if isinstance(line.get("wall_s"), (int, float)):
                    self.wall += line["wall_s"]
                    self.productive += float(line.get("productive_s") or 0.0)

    def add_sessions(self, lines: Iterable[dict[str, Any]]) -> None:
        for line in lines:
            self.statuses[str(line.get("status"))] += 1
            for key, value in line.items():
                if key.endswith("_s") and real_number(value):
                    self.phases.setdefault(key, deque(maxlen=10_000)).append(float(value))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def _bar(step: dict[str, Any]) -> Any:
    from rich.text import Text

    wall = step.get("wall_s") or 0.0
    text = Text()
    if wall <= 0:
        return text
    used = 0
    for bucket, style in BUCKET_STYLES:
        seconds = max(0.0, float(step.get(f"{bucket}_s") or 0.0))
        cells = min(_BAR - used, round(seconds / wall * _BAR))
        text.append("█" * cells, style=style)
        used += cells
    return text


def render(state: State, directory: Path, stale: float, show: int, now: float) -> Any:
    """The view, as a rich renderable."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    goodput = f"{state.productive / state.wall * 100:.1f}%" if state.wall > 0 else "-"
    parts.append(
        Text.assemble(
            ("asynctrace watch ", "bold"),
            str(directory),
            f"  steps finished: {state.total_steps}  ranks: {len(state.ranks)}  ",
            f"goodput: {goodput}  ",
            *[(f"{bucket} ", style) for bucket, style in BUCKET_STYLES],
        )
    )
    steps = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("rank", "iter", "step", "wall s", "goodput", "buckets"):
        steps.add_column(
            column, justify="left" if column in ("rank", "step", "buckets") else "right"
        )
    for step in list(state.steps)[-show:]:
        value = step.get("goodput")
        steps.add_row(
            str(step.get("_rank")),
            "-" if step.get("iteration") is None else str(step["iteration"]),
            str(step.get("name")),
            f"{float(step.get('wall_s') or 0.0):.3f}",
            "-" if value is None else f"{value * 100:.1f}%",
            _bar(step),
        )
    parts.append(steps)
    if state.steps:
        last = state.steps[-1]
        spans = sorted((last.get("spans") or {}).items(), key=lambda kv: -kv[1])[:5]
        slow = Table(
            title=f"slowest leaf spans of the last step ({last.get('_rank')}, iteration "
            f"{last.get('iteration')})",
            box=None,
            title_justify="left",
        )
        slow.add_column("span")
        slow.add_column("seconds", justify="right")
        for name, seconds in spans:
            slow.add_row(str(name), f"{seconds:.3f}")
        parts.append(slow)
    if state.statuses:
        counts = ", ".join(f"{status} {n}" for status, n in sorted(state.statuses.items()))
        parts.append(Text(f"sessions: {counts}"))
        table = Table(box=None, header_style="bold")
        for column in ("phase", "p50 s", "p90 s", "p99 s", "n"):
            table.add_column(column, justify="left" if column == "phase" else "right")
        for key in sorted(state.phases)[:12]:
            values = list(state.phases[key])
            table.add_row(
                key.removesuffix("_s"),
                *(f"{_percentile(values, q):.3f}" for q in (0.5, 0.9, 0.99)),
                str(len(values)),
            )
        parts.append(table)
    for rank in state.ranks.values():
        problems = [
            f"{name} dropped {dropped}, failed {failed}"
            for name, (_, dropped, failed, *_rest) in sorted(rank.exporters.items())
            if dropped or failed
        ]
        if problems:
            parts.append(Text(f"{rank.label}: exporter " + "; ".join(problems), style="red"))
        if rank.ended:
            parts.append(Text(f"{rank.label}: finished ({rank.steps} steps)"))
        elif now - rank.last_line > stale:
            parts.append(
                Text(
                    f"{rank.label}: stopped writing {now - rank.last_line:.0f} s ago "
                    f"(after {rank.steps} steps)",
                    style="bold red",
                )
            )
    if state.skipped or state.unreadable:
        parts.append(
            Text(
                f"skipped: {state.unreadable} lines that are not JSON objects, "
                f"{state.skipped} with fields the view cannot read",
                style="yellow",
            )
        )
    if not state.ranks:
        parts.append(
            Text(
                f"waiting for goodput-*.jsonl under {directory} (the job needs the "
                "'goodput' configuration key on)"
            )
        )
    return Group(*parts)


def _poll(directory: Path, followers: dict[Path, Follower], state: State) -> None:
    for path in sorted(directory.rglob("goodput-*.jsonl")):
        follower = followers.get(path)
        if follower is None:
            follower = followers[path] = Follower(path)
        lines = follower.lines()
        state.add_goodput(path, lines, follower.modified)
    for path in sorted(directory.rglob("sessions-*.jsonl")):
        follower = followers.get(path)
        if follower is None:
            follower = followers[path] = Follower(path)
        state.add_sessions(follower.lines())
    state.unreadable = sum(follower.skipped for follower in followers.values())


def run(args: argparse.Namespace) -> int:
    """Run ``asynctrace watch``."""
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        raise CliError(
            "asynctrace watch needs rich, which is not installed; install it with: "
            "pip install 'asynctrace[cli]'"
        ) from None
    directory: Path = args.directory
    if not directory.is_dir():
        raise CliError(f"{directory}: not a directory (give the job's output directory)")
    if not args.interval > 0 or args.steps < 1 or not args.stale > 0:
        raise CliError("--interval and --stale must be > 0 and --steps >= 1")
    followers: dict[Path, Follower] = {}
    state = State()
    console = Console()
    _poll(directory, followers, state)
    if args.once:
        console.print(render(state, directory, args.stale, args.steps, time.time()))
        return 0
    try:
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while True:
                _poll(directory, followers, state)
                view = render(state, directory, args.stale, args.steps, time.time())
                live.update(view, refresh=True)
                time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
