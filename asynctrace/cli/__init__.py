"""The ``asynctrace`` command line: convert, goodput, report, groups, demo.

``import asynctrace`` never imports this package; the console script and
``python -m asynctrace`` do.

Example:
    >>> from asynctrace.cli import main
    >>> main(["groups", "--resolve", "default"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import convert, demo, goodput, groups, report, watch
from ._common import CliError, HelpFormatter, Parser, escape_controls
from ._output import Terminated

__all__ = ["main"]

EPILOG = """\
examples:
  asynctrace convert asynctrace-traces/<run_id>/ -o trace.json   # then open it in ui.perfetto.dev
  asynctrace goodput asynctrace-traces/<run_id>/
  asynctrace report asynctrace-traces/<run_id>/ -o report.html
  asynctrace groups --resolve per_step
  asynctrace watch asynctrace-traces/<run_id>/                  # live, while the job runs
  asynctrace demo

Run 'asynctrace COMMAND --help' for the options of a command.
"""


def build_parser() -> Parser:
    """The argument parser with every subcommand."""
    parser = Parser(
        prog="asynctrace",
        description="Read asynctrace's trace and session files: convert them for Perfetto, "
        "roll up goodput per step, write an offline HTML report, list span groups.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    from asynctrace import __version__

    parser.add_argument("--version", action="version", version=f"asynctrace {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    convert.add_parser(commands)
    goodput.add_parser(commands)
    report.add_parser(commands)
    groups.add_parser(commands)
    watch.add_parser(commands)
    demo.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    0: success; 1: ``goodput``/``report`` found invariant violations; 2: bad
    usage or unreadable input; 130: interrupted (Ctrl-C); 141: the reader of
    stdout went away (``| head``), so the output is incomplete; 143: ended by
    SIGTERM while writing an output, which is removed (cut short when written
    directly, into a FIFO or a device). Errors are one line on
    stderr, without a traceback (set ``ASYNCTRACE_DEBUG=1`` to get one).

    Example:
        >>> main(["groups", "--resolve", "default"])  # doctest: +SKIP
        checkpoint
        ...
        0
    """
    parser = build_parser()
    prog = "asynctrace"
    no_stdout = sys.stdout is None  # started with descriptor 1 closed (>&-)
    if no_stdout:
        sys.stdout = _NoStdout()
    try:
        args, extra = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
        if args.command:
            prog = f"asynctrace {args.command}"
        if extra:  # the subcommand's usage error, pointing at its own help
            raise CliError(
                f"{prog}: error: unrecognized arguments: {' '.join(extra)} (see '{prog} --help')"
            )
        run = getattr(args, "run", None)
        if run is None:
            parser.print_help(sys.stderr)
            return 2
        code: int = run(args)
        sys.stdout.flush()
        return code
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    except CliError as exc:
        _error(prog, str(exc))
        return exc.code
    except BrokenPipeError:
        # The reader went away (| head): no message, as a command killed by SIGPIPE
        # gives none, but not success either (the output is cut short): the status
        # a shell reports for SIGPIPE.
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Terminated as exc:
        _error(prog, f"terminated (SIGTERM); {exc.left}")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        _error(prog, "interrupted")
        return 130
    except Exception as exc:
        if os.environ.get("ASYNCTRACE_DEBUG"):
            raise
        _error(prog, f"internal error: {type(exc).__name__}: {exc} (ASYNCTRACE_DEBUG=1 shows it)")
        return 2
    finally:
        if no_stdout:
            sys.stdout = None  # as it was


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command the signal ended
EXIT_TERMINATED = 143  # 128 + SIGTERM


class _NoStdout(io.TextIOBase):
    """``sys.stdout`` for a process started without one (``>&-``): writing to it
    is an error that names stdout, not an ``AttributeError`` on ``None``."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise CliError("stdout: it is closed (started with >&-); redirect it, to /dev/null say")

    @property
    def buffer(self) -> _NoStdout:
        return self


def _error(prog: str, message: str) -> None:
    # One line; what else is a control character (in a file name, an argument) shows as text.
    text = escape_controls(" ".join(message.split("\n")))
    if not text.startswith("asynctrace"):
        text = f"{prog}: error: {text}"
    print(text, file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
