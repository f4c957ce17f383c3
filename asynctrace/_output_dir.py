"""The output directory: checked writable when configuring, made, and its new entries synced.

A directory made here is durable only once its parent is synced: the first
:meth:`asynctrace._files.AppendFile.sync` of a file below it does that
(:func:`sync_new_entries`).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
from pathlib import Path

from ._errors import ConfigurationError
from ._forksafe import reinit_at_fork

__all__ = ["make_dirs", "sync_new_entries", "writable_dir", "writable_file"]


def writable_dir(raw: str | os.PathLike[str], key: str = "output_dir") -> Path:
    """Create *raw* if needed and prove it writable, or raise ConfigurationError naming *key*.

    The directory is returned absolute: fixed when configuring, so that an
    ``os.chdir()`` afterwards (Hydra's launcher makes one) moves no writer,
    no profiler request file and no path reported to the program.
    """
    raw = os.fspath(raw)
    try:
        directory = Path(raw).expanduser().absolute()
        make_dirs(directory)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except (OSError, ValueError, RuntimeError) as exc:  # ValueError: NUL; RuntimeError: ~nobody
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(
            f"{key}: {raw!r} is not a writable directory ({type(exc).__name__}: "
            f"{reason}); accepted: a directory path this process can create and write to"
        ) from exc
    return directory


def make_dirs(directory: Path) -> None:
    """``mkdir -p`` *directory*, remembering the directories made for :func:`sync_new_entries`.

    A directory made here is durable only once its parent is synced; the
    first sync of a file below it does that.

    Raises:
        OSError: a directory cannot be made.
    """
    missing = []
    here = directory
    while not here.exists() and here.parent != here:
        missing.append(here)
        here = here.parent
    directory.mkdir(parents=True, exist_ok=True)
    if missing:
        with _made_lock:
            _made_dirs.update(missing)


_made_dirs: set[Path] = set()
"""Directories this process made whose entry in their parent is not synced yet."""
_made_lock = threading.Lock()
reinit_at_fork(_made_lock)


def writable_file(path: Path, key: str, what: str) -> Path:
    """Prove *path* (in a directory already checked) can be appended to, or raise.

    It must be absent (it is created) or a regular file this process may
    write: a directory, a socket or an unreadable entry in its place would
    only fail once the writer opens it, after the previous configuration
    was shut down.

    Raises:
        ConfigurationError: naming *key*, the file and what is accepted.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        problem = f"cannot be checked ({type(exc).__name__}: {exc.strerror or exc})"
    else:
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            problem = f"exists and is {kind}"
        elif not os.access(path, os.W_OK):
            problem = "exists and is not writable"
        else:
            return path
    raise ConfigurationError(
        f"{key}: the {what} {str(path)!r} {problem}; accepted: a directory where this "
        f"file is absent or a regular file this process can write"
    )


def sync_new_entries(directory: Path) -> None:
    """Sync *directory* (a new file's), and the parent of each directory made for it, once:
    a new file survives a power loss only with its entry.

    Raises:
        OSError: a directory could not be synced (tried again at the next sync).
    """
    with _made_lock:
        chain = [directory]
        while chain[-1] in _made_dirs:
            chain.append(chain[-1].parent)
    for entry in chain:
        _sync_dir(entry)
    with _made_lock:
        _made_dirs.difference_update(chain)


def _sync_dir(directory: Path) -> None:
    """``fsync`` *directory* (its entries); nothing where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except PermissionError:  # a directory this process may not read (or Windows)
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):  # no fsync of directories here
            raise
    finally:
        os.close(fd)
