"""The paths a command is given, checked before anything is read: an output that is no
input and can be written, inputs that can be read more than once."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from ._common import CliError

__all__ = ["check_output", "require_regular_files"]


def check_output(name: str, target: Path, inputs: Iterable[Path], example: str) -> None:
    """Refuse an output that is one of *inputs* or cannot be written, before reading anything.

    *name* is the output as the user wrote it, *example* a file name to suggest
    when it names a directory.

    Raises:
        CliError: the output is an input (same path, symbolic or hard link), a
            symbolic link loop, a directory, or in a directory that does not exist.
    """
    try:
        one_of = _is_one_of(target, inputs)
    except (RuntimeError, OSError) as exc:  # Path.resolve on a loop (RuntimeError until 3.13)
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            raise CliError(f"{name}: {exc.strerror or exc}") from None
        raise CliError(f"-o: {name}: symbolic link loop") from None
    if one_of:
        raise CliError(f"{name}: the output is also an input")
    if target.is_dir():
        raise CliError(f"{name}: is a directory; name the output file, e.g. -o {target / example}")
    # through a symbolic link, the file it resolves to is the one written
    place = Path(os.path.realpath(target)) if target.is_symlink() else target
    if not place.parent.is_dir():
        raise CliError(f"{name}: no such directory: {place.parent}")


def _is_one_of(target: Path, inputs: Iterable[Path]) -> bool:
    """Whether *target* is the same file as one of *inputs* (by path, or by inode)."""
    resolved = target.resolve()
    try:
        stat = target.stat()
        identity: tuple[int, int] | None = (stat.st_dev, stat.st_ino)
    except OSError:
        identity = None
    for path in inputs:
        if path.resolve() == resolved:
            return True
        if identity is not None:
            try:
                other = path.stat()
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == identity:
                return True
    return False


def require_regular_files(paths: Iterable[Path], prog: str) -> None:
    """Refuse an input that is not a regular file (a pipe, ``<(zcat x.gz)``): *prog*
    reads its inputs more than once, and a pipe reads as empty the second time.

    Raises:
        CliError: naming the first such path.
    """
    for path in paths:
        if not path.is_file():
            raise CliError(
                f"{path}: not a regular file (a pipe?); {prog} reads its inputs more than "
                "once, so each must be a regular file or a directory: write it to a file "
                "first (gzip files are read as they are, no need to decompress them)"
            )
