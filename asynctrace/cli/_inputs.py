"""Finding and opening the inputs: files, directories and glob patterns.

Inputs are files, directories (searched recursively) and glob patterns. Files
compressed with gzip (long runs compress their traces) are read as they are,
recognised by their content; directories also yield ``traces*.jsonl.gz``. A
directory (or glob) that holds both ``X.jsonl`` and ``X.jsonl.gz`` gives only one
of them, the uncompressed one unless it is empty (``gzip -k`` leaves both, with
the same spans): the other is named in a note.

An input that is not a regular file (a pipe, such as ``<(zcat run.jsonl.gz)``)
is read once, from its start: :func:`single_pass` tells a caller that would read
it twice.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import gzip
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, cast

from ._common import CliError, note

__all__ = [
    "BOM",
    "SESSION_PATTERN",
    "TRACE_PATTERN",
    "drop_twins",
    "expand_inputs",
    "file_size",
    "find_files",
    "open_input",
    "single_pass",
    "skip_rest",
]

TRACE_PATTERN = "traces*.jsonl"
SESSION_PATTERN = "sessions*.jsonl"
_SKIP_CHUNK = 1 << 20  # bytes read at a time past the start of an overlong line
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, which some editors put first


def _has_magic(text: str) -> bool:
    return any(c in text for c in "*?[")


# A directory that cannot be listed because it is gone (removed while searched, a
# stale NFS handle) or not readable: passed over, as a file in it could not be read.
_PASSED_OVER = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ESTALE, errno.EACCES, errno.EPERM})


def _unlistable(exc: OSError) -> None:
    if exc.errno not in _PASSED_OVER:
        raise exc


def find_files(directory: Path, patterns: Sequence[str]) -> list[Path]:
    """The regular files under *directory* (its subdirectories too, not through
    symbolic links) whose name matches one of *patterns*, sorted.

    A subdirectory removed while it is searched (a job rotating its temporary
    directories), or one that cannot be read, is passed over.

    Raises:
        OSError: a directory cannot be listed for another reason (an I/O error).
    """
    found = []
    for parent, _, names in os.walk(directory, onerror=_unlistable):
        for name in names:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
                path = Path(parent, name)
                if path.is_file():
                    found.append(path)
    return sorted(found)


def _search(directory: Path, patterns: Sequence[str]) -> list[Path]:
    variants = [variant for pattern in patterns for variant in (pattern, pattern + ".gz")]
    try:
        return find_files(directory, variants)
    except OSError as exc:
        raise CliError(f"{exc.filename or directory}: {exc.strerror or exc}") from None


_GZIP_MAGIC = b"\x1f\x8b"


class _GzipInput(gzip.GzipFile):
    """Gzip data read from an open handle, which closing it closes too."""

    def __init__(self, handle: IO[bytes]) -> None:
        super().__init__(fileobj=handle, mode="rb")
        self._handle = handle

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._handle.close()


def open_input(path: Path) -> IO[bytes]:
    """*path* opened for reading bytes; decompressed on the fly when it is gzip data.

    The file is opened once: its first two bytes are looked at without being
    consumed, so a pipe (``<(zcat run.jsonl.gz)``) is read whole.

    Raises:
        OSError: it cannot be opened.
    """
    handle = open(path, "rb")  # noqa: SIM115 (returned: the caller closes it)
    try:
        magic = handle.peek(2)[:2]
    except OSError:
        handle.close()
        raise
    if magic == _GZIP_MAGIC:
        return cast("IO[bytes]", _GzipInput(handle))
    return handle


def single_pass(path: Path) -> bool:
    """Whether *path* can be read only once: it is not a regular file (a pipe, say).

    Reading it consumes it: a command that reads its inputs twice (to sniff
    their kind first, to rebase timestamps) can read such an input only once.

    Example:
        >>> single_pass(Path("/dev/stdin")), single_pass(Path(__file__))  # doctest: +SKIP
        (True, False)
    """
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def expand_inputs(
    specs: Iterable[str], patterns: Sequence[str], what: str, prog: str = "asynctrace"
) -> list[Path]:
    """Files named by *specs*: files as given, directories searched, globs expanded.

    Of ``X.jsonl`` and ``X.jsonl.gz`` side by side (``gzip -k`` leaves both,
    holding the same spans) only one is read, the uncompressed one unless it
    is empty; a note on stderr (prefixed with *prog*) names the other.

    Raises:
        CliError: a path is empty or does not exist, a glob matches nothing, or a
            directory holds no file matching *patterns*.

    Example:
        >>> expand_inputs(["run/"], [TRACE_PATTERN], "trace")  # doctest: +SKIP
        [PosixPath('run/traces-r0.jsonl'), PosixPath('run/traces-r1.jsonl')]
    """
    out: list[Path] = []
    seen: set[Path] = set()

    def add(path: Path) -> None:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            out.append(path)

    for spec in specs:
        if not spec:  # Path("") is the current directory: "$RUN" with RUN unset
            raise CliError("empty path among the inputs (an unset shell variable?)")
        path = Path(spec)
        if path.is_dir():
            files = _search(path, patterns)
            if not files:
                raise CliError(
                    f"{spec}: no {what} files ({', '.join(patterns)}) in this directory"
                )
            for file in files:
                add(file)
        elif path.exists():
            add(path)
        elif _has_magic(spec):
            matches = sorted(glob.glob(spec, recursive=True))
            if not matches:
                raise CliError(f"{spec}: no file matches this pattern")
            for match in matches:
                matched = Path(match)
                if matched.is_dir():
                    for file in _search(matched, patterns):
                        add(file)
                else:
                    add(matched)
        else:
            raise CliError(f"{spec}: no such file or directory")
    kept, dropped = drop_twins(out)
    for line in dropped:
        note(prog, line)
    return kept


def drop_twins(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """*paths* without one of each ``X.jsonl`` / ``X.jsonl.gz`` pair in one directory,
    and a sentence per file left out.

    The uncompressed file is kept (a live run may still be adding to it), unless
    it is empty and the compressed one is not.
    """
    by_place = {(p.resolve().parent, p.name): p for p in paths}
    left_out: set[Path] = set()
    notes = []
    for path in paths:
        if not path.name.endswith(".gz"):
            continue
        plain = by_place.get((path.resolve().parent, path.name[:-3]))
        if plain is None:
            continue
        if _size(plain) == 0 and _size(path) != 0:
            left_out.add(plain)
            notes.append(f"{plain}: not read, it is empty and {path.name} beside it is not")
        else:
            left_out.add(path)
            notes.append(
                f"{path}: not read, {plain.name} beside it holds the same trace "
                "uncompressed (gzip -k leaves both); read that one"
            )
    return [p for p in paths if p not in left_out], notes


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def skip_rest(stream: IO[bytes]) -> int:
    """Read past the end of the current line, a chunk at a time; the bytes read."""
    skipped = 0
    while True:
        chunk = stream.readline(_SKIP_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk[-1] == 10:  # end of file, or the line's newline
            return skipped


def file_size(paths: Sequence[Path]) -> int:
    """Total size of *paths* in bytes (for the progress bar)."""
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    return total
