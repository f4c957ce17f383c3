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
  falling below the end of this writer's last write. A file renamed away
  (logrotate's default) is told apart (:attr:`AppendFile.rotated`): what was
  written is intact in the renamed file, so nothing is counted lost.

Two more, for durability and for processes that share a rank by mistake:

- the first :meth:`AppendFile.sync` after the file (or its directories) was
  created also syncs the directories whose entries changed, as ``fsync(2)``
  requires for a new file to survive a power loss;
- the file is locked (``flock``, advisory, non-blocking) while it is open; a
  file another live process holds is written all the same (instrumentation
  never breaks its host), with one warning naming it.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from ._errors import ConfigurationError
from ._forksafe import call_in_child, reinit_at_fork

_flock: Callable[[int, int], None] | None
_LOCK_FLAGS = 0
try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock, no warning
    _flock = None
else:
    _flock, _LOCK_FLAGS = _fcntl.flock, _fcntl.LOCK_EX | _fcntl.LOCK_NB

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
    """``mkdir -p`` *directory*, remembering the directories made for :meth:`AppendFile.sync`.

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
        self.rotated = False
        """Set by :meth:`moved`: the old file was renamed away, intact (not lost)."""
        self._warned = False
        self._warned_rotated = False
        self._warned_shared = False
        self._unsynced_entry = False  # created: its directory entry is not synced yet
        self._held: tuple[tuple[int, int], int] | None = None  # the lock taken: (file, pid)
        self._fd = -1
        self._identity = (0, 0)
        self._end = 0  # the file's size after this writer's last write, at least
        self._at_line_start = True
        self._open()
        call_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """Close the descriptor a forked child inherited (never unlocking it: the lock is
        the parent's too), so the parent's lock ends with the parent's own close. A
        write in the child opens the file again, and meets the parent's lock."""
        fd, self._fd = self._fd, -1
        self._held = None
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def _open(self) -> None:
        """Open the path, which must be (or become) a regular file.

        Opened non-blocking, so a FIFO put in the file's place fails at once
        (``ENXIO``) rather than blocking the writer thread until a reader comes;
        anything but a regular file is then refused, and the descriptor made
        blocking again for the writes.

        Raises:
            OSError: the file cannot be opened, or is not a regular file.
        """
        created = True
        try:
            fd = os.open(self.path, _OPEN_FLAGS | _NONBLOCK | os.O_EXCL, 0o666)
        except FileExistsError:
            created = False
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
        self._unsynced_entry = self._unsynced_entry or created
        self._lock()

    def _lock(self) -> None:
        """Take the file's advisory lock, warning once if another process holds it.

        ``flock`` locks belong to the open file: a child forked from this
        process shares this one (and never releases it: no ``LOCK_UN`` is
        ever made, closing is enough), while a child that opens the file
        again, as its own ``init_worker()`` does, meets it and warns.
        """
        if _flock is None:
            return
        try:
            _flock(self._fd, _LOCK_FLAGS)
        except BlockingIOError:
            key = (self._identity, os.getpid())
            with _made_lock:
                ours = _held.get(key, 0) > 0  # another writer of this process (a reconfigure)
            if not ours and not self._warned_shared:
                self._warned_shared = True
                logger.warning(
                    "asynctrace: %s is being written by another process too (it holds the "
                    "file's lock): their lines are interleaved in one file under one rank; "
                    "give each process its own rank (init_worker(config, rank=..., "
                    "world_size=...)) or role (configure(config, role=...))",
                    self.path,
                )
            return
        except OSError:
            return  # a file system without locks: nothing to tell
        with _made_lock:
            key = (self._identity, os.getpid())
            _held[key] = _held.get(key, 0) + 1
            self._held = key

    def _unlock(self) -> None:
        """Forget this writer's lock (closing the descriptor releases it)."""
        key, self._held = self._held, None
        if key is None:
            return
        with _made_lock:
            left = _held.get(key, 0) - 1
            if left > 0:
                _held[key] = left
            else:
                _held.pop(key, None)

    def moved(self) -> bool:
        """Whether the file was deleted, replaced, renamed or truncated since it was opened.

        Then :meth:`reopen` it. Truncated: smaller than it was after this
        writer's last write (appends, by this or another writer, only grow it).
        :attr:`rotated` tells a file renamed away (logrotate's default), still
        linked and as long as written, whose lines are all there, from one
        deleted or truncated, whose lines are lost.
        """
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            info = None
        except OSError:
            return False  # cannot tell: keep writing where we write
        if info is not None and (info.st_dev, info.st_ino) == self._identity:
            if info.st_size >= self._end:
                return False
            self.rotated = False  # truncated in place: what was written is gone
            return True
        self.rotated = False
        if self._fd >= 0:
            try:
                old = os.fstat(self._fd)
            except OSError:
                pass
            else:
                self.rotated = old.st_nlink > 0 and old.st_size >= self._end
        return True

    def reopen(self) -> None:
        """Open the file at its path again (making its directory), warning once.

        Raises:
            OSError: the directory or the file cannot be made, or what is at
                the path now is not a regular file (a directory, a FIFO, a
                socket); the next write tries again.
        """
        if self.rotated:
            if not self._warned_rotated:
                self._warned_rotated = True
                logger.warning(
                    "asynctrace: %s was renamed away (rotated); a new file is written from "
                    "now on (what was written before is intact in the renamed file)",
                    self.path,
                )
        elif not self._warned:
            self._warned = True
            logger.warning(
                "asynctrace: %s was deleted or replaced (or truncated in place); it is written "
                "again from now on "
                "(what was written before went with the old file; the count is in stats())",
                self.path,
            )
        self.rotated = False
        old, self._fd = self._fd, -1
        self._unlock()
        try:
            if old >= 0:
                os.close(old)
        except OSError:
            pass
        make_dirs(self.path.parent)
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
            if self._unsynced_entry:
                self._sync_entries()
        except OSError as exc:
            return exc
        return None

    def _sync_entries(self) -> None:
        """Sync the directory of the new file, and the parent of each directory made
        for it, once: a new file survives a power loss only with its entry.

        Raises:
            OSError: a directory could not be synced (tried again at the next sync).
        """
        directory = self.path.parent
        with _made_lock:
            chain = [directory]
            while chain[-1] in _made_dirs:
                chain.append(chain[-1].parent)
        for entry in chain:
            _sync_dir(entry)
        with _made_lock:
            _made_dirs.difference_update(chain)
        self._unsynced_entry = False

    def close(self) -> None:
        """Make the file durable (:meth:`sync`) and close it (idempotent)."""
        self.sync()
        fd, self._fd = self._fd, -1
        self._unlock()
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # absent on Windows, where there are no FIFOs to block

# fdatasync where the platform has it (Linux); fsync elsewhere (macOS has no fdatasync).
_datasync = getattr(os, "fdatasync", os.fsync)


_held: dict[tuple[tuple[int, int], int], int] = {}
"""The files (device, inode) this process (pid) holds the lock of, with how many writers."""


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


def _ends_with_newline(path: Path, size: int) -> bool:
    """Whether the *size* bytes long file ends a line; ``False`` when it cannot be read.

    An unreadable tail gets a newline before the next line: at worst an
    empty line, which every reader skips, rather than a line glued to a torn one.
    """
    try:
        with open(path, "rb") as existing:
            existing.seek(size - 1)
            return existing.read(1) == b"\n"
    except OSError:
        return False
