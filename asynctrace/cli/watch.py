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
import math
import time
from pathlib import Path
from typing import Any

from ._common import CliError, HelpFormatter, positive_int
from ._follower import Follower
from ._inputs import find_files
from ._sigterm import sigterm_leaves
from ._watch_state import State
from ._watch_view import render

__all__ = ["add_parser", "run"]

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
    parser.add_argument(
        "directory", metavar="DIR", type=_directory, help="the job's output directory"
    )
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


def _directory(text: str) -> Path:
    """DIR: any path but an empty one, which would be the current directory."""
    if not text:
        raise argparse.ArgumentTypeError("empty path (an unset shell variable?)")
    return Path(text)


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
    goodput: list[Path] = []
    sessions: list[Path] = []  # one walk: a subdirectory removed meanwhile is passed over
    for path in find_files(directory, ["goodput-*.jsonl", "sessions-*.jsonl"]):
        (goodput if path.name.startswith("goodput-") else sessions).append(path)
    for path in goodput:
        found.add(path)
        follower = followers.get(path)
        if follower is None:
            follower = followers[path] = Follower(path)
        lines = follower.lines()
        if follower.restarted:
            state.forget(path)
        state.add_goodput(path, lines, follower.modified)
    for path in sessions:
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
        with sigterm_leaves(), Live(console=console, auto_refresh=False) as live:
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
        with sigterm_leaves():
            while True:
                _poll(directory, followers, state, stale=args.stale)
                show()
                time.sleep(args.interval)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM
        show()
        return 0
