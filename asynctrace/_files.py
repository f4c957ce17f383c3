"""Output files: the directory every writer of this process shares, and appending to it.

:class:`AppendFile` is how both writer threads (chrome lines, session
records) append JSON lines, with three promises:

- a torn last line (a killed writer, a failed ``write``) is closed off with a
  newline before anything else is appended, so at most the last line of a
  file is ever torn, and only until the next write;
- a failed or partial ``write`` (``ENOSPC``, ``EFBIG``) says how many whole
  lines reached the file, so the writer counts exactly what was lost;
- a file that was deleted (``rm -rf`` of the output directory) or replaced
  is found before the next write, by its inode, and opened again; so is a
  file truncated in place (logrotate's ``copytruncate``), found by its size
  falling below the end of this writer's last write.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import tempfile
from pathlib import Path

from ._errors import ConfigurationError

__all__ = ["AppendFile", "writable_dir", "writable_file"]

logger = logging.getLogger("asynctrace")


def writable_dir(raw: str | os.PathLike[str], key: str = "output_dir") -> Path:
    """Create *raw* if needed and prove it writable, or raise ConfigurationError naming *key*.

    The directory is returned absolute: fixed when configuring, so that an
    ``os.chdir()`` afterwards (Hydra's launcher makes one) moves no writer,
    no profiler request file and no path reported to the program.
    """
    raw = os.fspath(raw)
    try:
        directory = Path(raw).expanduser().absolute()
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except (OSError, ValueError, RuntimeError) as exc:  # ValueError: NUL; RuntimeError: ~nobody
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(
            f"{key}: {raw!r} is not a writable directory ({type(exc).__name__}: "
            f"{reason}); accepted: a directory path this process can create and write to"
        ) from exc
    return directory


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


class AppendFile:
    """A JSON-lines file opened for appending, written by one thread.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.jsonl"
        >>> out = AppendFile(path)
        >>> out.write(b'{"a":1}\\n')
        (1, None)
        >>> out.close()
    """

    def __init__(self, path: Path) -> None:
        # Absolute from the start: a relative path would name another file after the
        # program's os.chdir() (Hydra's launcher makes one), which would look moved.
        self.path = path.absolute()
        self.reopened = 0
        self._warned = False
        self._fd = -1
        self._identity = (0, 0)
        self._end = 0  # the file's size after this writer's last write, at least
        self._at_line_start = True
        self._open()

    def _open(self) -> None:
        """Open the path, which must be (or become) a regular file.

        Opened non-blocking, so a FIFO put in the file's place fails at once
        (``ENXIO``) rather than blocking the writer thread until a reader comes;
        anything but a regular file is then refused, and the descriptor made
        blocking again for the writes.

        Raises:
            OSError: the file cannot be opened, or is not a regular file.
        """
        fd = os.open(self.path, _OPEN_FLAGS | _NONBLOCK, 0o666)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(self.path))
            if _NONBLOCK:
                os.set_blocking(fd, True)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        self._identity = (info.st_dev, info.st_ino)
        self._end = info.st_size
        self._at_line_start = info.st_size == 0 or _ends_with_newline(self.path, info.st_size)

    def moved(self) -> bool:
        """Whether the file was deleted, replaced or truncated since it was opened.

        Then :meth:`reopen` it. Truncated: smaller than it was after this
        writer's last write (appends, by this or another writer, only grow it).
        """
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False  # cannot tell: keep writing where we write
        return (info.st_dev, info.st_ino) != self._identity or info.st_size < self._end

    def reopen(self) -> None:
        """Open the file at its path again (making its directory), warning once.

        Raises:
            OSError: the directory or the file cannot be made, or what is at
                the path now is not a regular file (a directory, a FIFO, a
                socket); the next write tries again.
        """
        if not self._warned:
            self._warned = True
            logger.warning(
                "asynctrace: %s was deleted or replaced (or truncated in place); it is written "
                "again from now on "
                "(what was written before went with the old file; the count is in stats())",
                self.path,
            )
        old, self._fd = self._fd, -1
        try:
            os.close(old)
        except OSError:
            pass
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open()
        self.reopened += 1

    def write(self, data: bytes, lines: int | None = None) -> tuple[int, OSError | None]:
        """Append whole lines; ``(lines that reached the file whole, the error if any)``.

        After a torn line (the file ended with one, or a write failed half
        way), a newline goes first, so the next line starts fresh. *lines*,
        when the caller knows it, is how many lines *data* holds: a write that
        completes is then not counted again (a failed one always is).
        """
        prefix = 0 if self._at_line_start else 1
        if prefix:
            data = b"\n" + data
        view = memoryview(data)
        done = 0
        error: OSError | None = None
        start = -1
        try:
            if self._fd < 0:
                self.reopen()
            start = os.fstat(self._fd).st_size
            while done < len(view):
                done += os.write(self._fd, view[done:])
        except OSError as exc:
            error = exc
        if start >= 0:
            self._end = start + done
        if done:
            self._at_line_start = data[done - 1] == 0x0A
            if not self._at_line_start and start >= 0:
                self._cut_torn_line(start + done, done - data.rfind(b"\n", 0, done) - 1)
        if lines is not None and error is None and done == len(data):
            return lines, None
        return data.count(b"\n", 0, done) - (1 if prefix and done else 0), error

    def _cut_torn_line(self, end: int, torn: int) -> None:
        """Cut off the half line a failed write left, so no torn line stays mid-file.

        *end* is where the write ended if nobody else appended (the size seen
        before it plus the bytes written), *torn* the half line's length. If
        the file's size is not *end* now, another writer appended meanwhile
        and the half line may not be last: nothing is cut (that would cut the
        other writer's lines); the next write starts with a newline instead,
        as it does if the cut fails.
        """
        try:
            if os.fstat(self._fd).st_size != end:
                return
            os.ftruncate(self._fd, end - torn)
        except OSError:
            return
        self._end = end - torn
        self._at_line_start = True

    def sync(self) -> OSError | None:
        """Make what was written durable (``fdatasync``): a flush that asked for it, and
        a close. The error, if the disk refused; ``None`` when done or nothing is open."""
        if self._fd < 0:
            return None
        try:
            _datasync(self._fd)
        except OSError as exc:
            return exc
        return None

    def close(self) -> None:
        """Make the file durable (:meth:`sync`) and close it (idempotent)."""
        self.sync()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # absent on Windows, where there are no FIFOs to block

# fdatasync where the platform has it (Linux); fsync elsewhere (macOS has no fdatasync).
_datasync = getattr(os, "fdatasync", os.fsync)


def _ends_with_newline(path: Path, size: int) -> bool:
    try:
        with open(path, "rb") as existing:
            existing.seek(size - 1)
            return existing.read(1) == b"\n"
    except OSError:
        return True
