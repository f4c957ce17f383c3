"""``asynctrace watch DIR``: a live terminal view of a running job's goodput.

It follows the ``goodput-*.jsonl`` files (one line per finished step, written
by the runtime with ``goodput`` on) and the ``sessions-*.jsonl`` files under
DIR, across ranks, by polling: no inotify, so a shared filesystem works. A
line is read once it is complete, a file in chunks of at most 1 MiB. A file
that is no longer the one read so far (replaced, deleted and written anew,
truncated) is read again from its start, and what it gave before is dropped;
a file gone from DIR no longer counts at all: the view shows what the files
hold now. Steps are shown in the order of their ``time``, whichever file they
came from. On a terminal the view is redrawn in place; otherwise (``watch DIR
> log``) it is printed again after each poll that changed it. SIGTERM ends it
like Ctrl-C.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import CliError, HelpFormatter, escape_controls, positive_int
from ._events import real_number

__all__ = ["Follower", "State", "add_parser", "run"]

EPILOG = """\
examples:
  asynctrace watch asynctrace-traces/20261129-101500-ab12cd/
  asynctrace watch run/ --interval 5 --stale 300     # a shared filesystem, slow steps
  asynctrace watch run/ --once                       # print the view once and exit

The job writes goodput-r{rank}.jsonl with the goodput configuration key on
(goodput: true). Ctrl-C or SIGTERM leaves the view (status 0). When the output
is not a terminal (watch DIR > log), the view is printed after each poll that
changed it.
"""

BUCKET_STYLES = (
    ("productive", "green"),
    ("overhead", "yellow"),
    ("idle", "blue"),
    ("wasted", "red"),
    ("unattributed", "bright_black"),
)
_BAR = 30
_BUCKETS = ("productive_s", "overhead_s", "idle_s", "wasted_s")
_CHUNK = 1 << 20  # bytes read at a time: memory stays bounded whatever a poll finds new
_MAX_LINE = 16 << 20  # a longer unfinished line is skipped (and counted), not held
_PRINT = 4096  # bytes of the file's start, and before where reading stopped, checked
_KEEP_STEPS = 500
_KEEP_PHASE = 10_000


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
        "--interval",
        type=_interval,
        default=1.0,
        metavar="S",
        help=f"seconds between polls, more than 0 and at most {MAX_INTERVAL:g} (1)",
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=15,
        metavar="N",
        help="steps shown, the latest, at least 1 (15)",
    )
    parser.add_argument(
        "--stale",
        type=_stale,
        default=60.0,
        metavar="S",
        help="a rank with no new line for S seconds (and no end line) is shown as stopped; "
        "more than 0, finite (60)",
    )
    parser.add_argument("--once", action="store_true", help="print the view once and exit")
    parser.set_defaults(run=run)


MAX_INTERVAL = 86400.0
"""The longest ``--interval`` (a day, in seconds): a longer sleep is no live view."""


def _interval(text: str) -> float:
    """``--interval``: seconds, more than 0 and at most :data:`MAX_INTERVAL`."""
    value = _seconds(text)
    if not 0 < value <= MAX_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted: seconds, more than 0 and at most {MAX_INTERVAL:g}"
        )
    return value


def _stale(text: str) -> float:
    """``--stale``: seconds, more than 0 and finite."""
    value = _seconds(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: seconds, more than 0 (finite)")
    return value


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None


def _check(args: argparse.Namespace) -> None:
    """The options again, for a namespace not made by the parser (each one named)."""
    for option, value, check in (
        ("--interval", args.interval, _interval),
        ("--steps", args.steps, positive_int),
        ("--stale", args.stale, _stale),
    ):
        try:
            check(str(value))
        except argparse.ArgumentTypeError as exc:
            raise CliError(f"asynctrace watch: error: argument {option}: {exc}") from None


class Follower:
    """New complete lines of one file, by polling.

    Reading goes on from where the last poll stopped as long as the file is
    the same one: same device and inode, not shorter, and the same bytes at
    its start and just before that point (checked when its size or mtime
    changed). Otherwise (deleted and written anew, even on a reused inode;
    replaced by a rename; truncated, even if it has grown again) it is read
    from its start and :attr:`restarted` is true after that call, so that
    what the earlier file gave can be dropped.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._stat: tuple[int, int, int, int] | None = None  # dev, inode, size, mtime
        self._head = b""  # the file's first bytes, up to _PRINT
        self._tail = b""  # the last bytes before _offset, up to _PRINT
        self._partial = b""
        self._discarding = False  # inside an overlong line, already counted
        self.modified = 0.0
        self.skipped = 0  # lines that are not a JSON object (NaN, an overlong line, not JSON)
        self.restarted = False

    @property
    def torn(self) -> bool:
        """Whether the file ends in an unfinished line, held until its newline arrives."""
        return bool(self._partial)

    def lines(self) -> Iterator[dict[str, Any]]:
        """The JSON objects of the lines completed since the last call.

        The file is checked (and :attr:`restarted` set) by the call; it is read,
        a chunk at a time, as the iterator is consumed, which it must be before
        the next call.
        """
        self.restarted = False
        try:
            info = self.path.stat()
        except OSError:
            return iter(())
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if key != self._stat:
            try:
                same = self._stat is None or self._same_file(info)
            except OSError:
                return iter(())
            if not same:
                self._restart()
            self._stat = key
        self.modified = info.st_mtime
        if info.st_size <= self._offset:
            return iter(())
        return self._read(info.st_size)

    def _same_file(self, info: os.stat_result) -> bool:
        assert self._stat is not None
        if (info.st_dev, info.st_ino) != self._stat[:2] or info.st_size < self._offset:
            return False
        if not self._offset:
            return True
        with self.path.open("rb") as handle:
            if handle.read(len(self._head)) != self._head:
                return False
            handle.seek(self._offset - len(self._tail))
            return handle.read(len(self._tail)) == self._tail

    def _restart(self) -> None:
        self._offset, self._head, self._tail, self._partial = 0, b"", b"", b""
        self._discarding = False
        self.skipped = 0
        self.restarted = True

    def _read(self, end: int) -> Iterator[dict[str, Any]]:
        try:
            handle = self.path.open("rb")
        except OSError:
            return
        with handle:
            handle.seek(self._offset)
            while self._offset < end:
                try:
                    chunk = handle.read(min(_CHUNK, end - self._offset))
                except OSError:
                    return
                if not chunk:  # shrunk since: the next call sees it
                    return
                if self._offset < _PRINT:
                    self._head += chunk[: _PRINT - self._offset]
                self._tail = (self._tail + chunk[-_PRINT:])[-_PRINT:]
                self._offset += len(chunk)
                yield from self._parse(chunk)

    def _parse(self, chunk: bytes) -> Iterator[dict[str, Any]]:
        *complete, rest = chunk.split(b"\n")
        if complete:
            # the first completes the line held from before (or ends an overlong one)
            complete[0] = b"" if self._discarding else self._partial + complete[0]
            self._partial, self._discarding = b"", False
        if not self._discarding:
            if len(self._partial) + len(rest) > _MAX_LINE:
                self._partial, self._discarding = b"", True
                self.skipped += 1
            else:
                self._partial += rest
        for raw in complete:
            if not raw.strip():
                continue
            try:
                item = json.loads(raw, parse_constant=_no_constant)
            except (ValueError, RecursionError):  # torn, NaN, not JSON, nested too deep
                self.skipped += 1
                continue
            if isinstance(item, dict):
                yield item
            else:
                self.skipped += 1


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


def _buckets_ok(line: dict[str, Any]) -> bool:
    """Whether a step line's seconds can be true: none negative, and its buckets together
    at most ``leaves`` times its wall time (each leaf is clipped to the step; the
    seconds are rounded to the microsecond)."""
    wall = line.get("wall_s")
    buckets = [float(line.get(key) or 0.0) for key in _BUCKETS]
    if (wall is not None and wall < 0) or min(buckets) < 0:
        return False
    leaves = line.get("leaves")
    if leaves is None or wall is None:
        return True
    if leaves.__class__ is not int or not 0 <= leaves <= 1 << 53:
        return False
    return bool(sum(buckets) <= leaves * (wall + 1e-6) + 1e-5)


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
            if (kind == "step" and not (_step_ok(line) and _buckets_ok(line))) or not _time_ok(
                line
            ):
                rank.skipped += 1
                continue
            if isinstance(line.get("time"), (int, float)):
                rank.last_line = max(rank.last_line, float(line["time"]))
            exporters = line.get("exporters")
            if exporters is not None:
                if _exporters_ok(exporters):
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
                    phase = self.phases.setdefault(key, deque(maxlen=_KEEP_PHASE))
                    phase.append((path, float(value)))


def _when(step: tuple[Path, tuple[float, int], dict[str, Any]]) -> tuple[float, int]:
    return step[1]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def _bar(step: dict[str, Any]) -> Any:
    from rich.text import Text

    wall = step.get("wall_s") or 0.0
    text = Text()
    if not wall > 0:
        return text
    used = 0
    for bucket, style in BUCKET_STYLES:
        seconds = float(step.get(f"{bucket}_s") or 0.0)
        # within [0, 1] whatever the line says: 1e300 s of a 1e-300 s step is a full bar
        fraction = min(1.0, max(0.0, seconds / wall)) if seconds > 0 else 0.0
        cells = min(_BAR - used, round(fraction * _BAR))
        text.append("█" * cells, style=style)
        used += cells
    return text


def _percent(ratio: float) -> str:
    """*ratio* as a percentage, short whatever its size (a line may say anything)."""
    percent = ratio * 100
    return f"{percent:.1f}%" if abs(percent) < 1e6 else f"{percent:.3g}%"


def _text(value: object, style: str = "") -> Any:
    """A cell or line holding *value* as it is: never read as rich markup, control
    characters escaped (a name from a file never acts on the terminal)."""
    from rich.text import Text

    return Text(escape_controls(str(value)), style=style)


def render(state: State, directory: Path, stale: float, show: int, now: float) -> Any:
    """The view, as a rich renderable.

    Every string read from the files (and the directory's name) is shown with
    its control characters escaped and is never read as markup.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    wall = state.wall
    goodput = _percent(state.productive / wall) if wall > 0 else "-"
    parts.append(
        Text.assemble(
            ("asynctrace watch ", "bold"),
            escape_controls(str(directory)),
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
    for path, _, step in list(state.steps)[-show:]:
        value = step.get("goodput")
        steps.add_row(
            _text(state.label(path)),
            _text("-" if step.get("iteration") is None else step["iteration"]),
            _text(step.get("name")),
            f"{float(step.get('wall_s') or 0.0):.3f}",
            "-" if value is None else _percent(value),
            _bar(step),
        )
    parts.append(steps)
    if state.steps:
        path, _, last = state.steps[-1]
        label = state.label(path)
        spans = sorted((last.get("spans") or {}).items(), key=lambda kv: -kv[1])[:5]
        # a line of its own, not the table's title: the title wraps at the table's width
        parts.append(
            _text(
                f"slowest leaf spans of the last step ({label}, iteration {last.get('iteration')})"
            )
        )
        slow = Table(box=None)
        slow.add_column("span")
        slow.add_column("seconds", justify="right")
        for name, seconds in spans:
            slow.add_row(_text(name), f"{seconds:.3f}")
        parts.append(slow)
    statuses = state.statuses
    if statuses:
        counts = ", ".join(f"{status} {n}" for status, n in sorted(statuses.items()))
        parts.append(_text(f"sessions: {counts}"))
        table = Table(box=None, header_style="bold")
        for column in ("phase", "p50 s", "p90 s", "p99 s", "n"):
            table.add_column(column, justify="left" if column == "phase" else "right")
        for key in sorted(state.phases)[:12]:
            values = [value for _, value in state.phases[key]]
            table.add_row(
                _text(key.removesuffix("_s")),
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
            parts.append(_text(f"{rank.label}: exporter " + "; ".join(problems), "red"))
        if rank.ended:
            parts.append(_text(f"{rank.label}: finished ({rank.steps} steps)"))
        elif now - rank.last_line > stale:
            parts.append(
                _text(
                    f"{rank.label}: stopped writing {now - rank.last_line:.0f} s ago "
                    f"(after {rank.steps} steps)",
                    "bold red",
                )
            )
    skipped = state.skipped
    if skipped or state.unreadable:
        parts.append(
            Text(
                f"skipped: {state.unreadable} lines that are not JSON objects, "
                f"{skipped} with fields the view cannot read",
                style="yellow",
            )
        )
    if not state.ranks:
        parts.append(
            _text(
                f"waiting for goodput-*.jsonl under {directory} (the job needs the "
                "'goodput' configuration key on)"
            )
        )
    return Group(*parts)


def _poll(
    directory: Path,
    followers: dict[Path, Follower],
    state: State,
    *,
    final: bool = False,
    stale: float = 60.0,
    now: float | None = None,
) -> None:
    """Read what the files under *directory* gained since the last poll into *state*.

    An unfinished last line counts as unreadable once its writer is taken
    for gone: on the *final* poll (``--once``), or when its file has not
    changed for *stale* seconds; until then its newline may still come.
    """
    found = set()
    for path in sorted(directory.rglob("goodput-*.jsonl")):
        found.add(path)
        follower = followers.get(path)
        if follower is None:
            follower = followers[path] = Follower(path)
        lines = follower.lines()
        if follower.restarted:
            state.forget(path)
        state.add_goodput(path, lines, follower.modified)
    for path in sorted(directory.rglob("sessions-*.jsonl")):
        found.add(path)
        follower = followers.get(path)
        if follower is None:
            follower = followers[path] = Follower(path)
        lines = follower.lines()
        if follower.restarted:
            state.forget(path)
        state.add_sessions(path, lines)
    for path in [path for path in followers if path not in found]:
        del followers[path]  # deleted (or moved away): what it gave no longer counts
        state.drop(path)
    state.relabel(directory)
    now = time.time() if now is None else now
    unreadable = sum(
        follower.skipped + (follower.torn and (final or now - follower.modified > stale))
        for follower in followers.values()
    )
    if unreadable != state.unreadable:
        state.unreadable = unreadable
        state.changes += 1


def _shown(state: State, stale: float, now: float) -> tuple[int, tuple[bool, ...]]:
    """What a printed view depends on, but for the seconds it counts: the counts,
    and which ranks are shown as stopped."""
    return state.changes, tuple(
        not rank.ended and now - rank.last_line > stale for rank in state.ranks.values()
    )


class _Terminated(KeyboardInterrupt):
    """SIGTERM, taken like Ctrl-C."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


@contextmanager
def _sigterm_leaves() -> Iterator[None]:
    """SIGTERM (``timeout``, a batch scheduler, ``kill``) raises :class:`_Terminated`
    while the view runs, so it ends with its last view as Ctrl-C does. Only the
    main thread can set a handler; elsewhere SIGTERM keeps its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    _check(args)
    followers: dict[Path, Follower] = {}
    state = State()
    console = Console()
    if args.once:
        _poll(directory, followers, state, final=True, stale=args.stale)
        console.print(render(state, directory, args.stale, args.steps, time.time()))
        return 0
    if not console.is_terminal:
        return _print_views(console, directory, followers, state, args)
    try:
        with _sigterm_leaves(), Live(console=console, auto_refresh=False) as live:
            while True:
                _poll(directory, followers, state, stale=args.stale)
                view = render(state, directory, args.stale, args.steps, time.time())
                live.update(view, refresh=True)
                time.sleep(args.interval)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM: Live leaves the last view drawn
        return 0


def _print_views(
    console: Any,
    directory: Path,
    followers: dict[Path, Follower],
    state: State,
    args: argparse.Namespace,
) -> int:
    """The view for a file or a pipe (a batch job's log): printed once after each poll
    that changed it, never redrawn; once more at the end if it changed since."""
    printed: tuple[int, tuple[bool, ...]] | None = None

    def show() -> None:
        nonlocal printed
        now = time.time()
        shown = _shown(state, args.stale, now)
        if shown != printed:
            console.print(render(state, directory, args.stale, args.steps, now))
            console.file.flush()
            printed = shown

    try:
        with _sigterm_leaves():
            while True:
                _poll(directory, followers, state, stale=args.stale)
                show()
                time.sleep(args.interval)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM
        show()
        return 0
