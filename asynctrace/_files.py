"""Appending JSON lines to an output file: torn lines, lost lines, moved files, durability.

:class:`AppendFile` is how both writer threads (chrome lines, session
records) append JSON lines, with three promises:

- a torn last line (a killed writer, a failed ``write``) is closed off with a
  newline before anything else is appended, so at most the last line of a
  file is ever torn, and only until the next write;
- a failed or partial ``write`` (``ENOSPC``, ``EFBIG``) says how many whole
  lines reached the file, so the writer counts exactly what was lost;
- a file that was deleted (``rm -rf`` of the output directory, or the
  directory replaced by a file) or replaced is found before the next write,
  by its inode, and opened again (while it cannot be, each write fails and
  is counted); so is a file truncated in place (logrotate's ``copytruncate``),
  found by its size falling below the end of this writer's last write. A
  file renamed away (logrotate's default) is told apart
  (:attr:`AppendFile.rotated`): what was written is intact in the renamed
  file, so nothing is counted lost.

Two more, for durability and for processes that share a rank by mistake:

- the first :meth:`AppendFile.sync` after the file (or its directories) was
  created also syncs the directories whose entries changed, as ``fsync(2)``
  requires for a new file to survive a power loss;
- the file is locked (``flock``, advisory, non-blocking, :mod:`asynctrace._file_lock`)
  while it is open; a file another live process holds is written all the same
  (instrumentation never breaks its host), with one warning naming it.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from ._file_lock import HeldKey, release_lock, take_lock
from ._forksafe import call_in_child
from ._output_dir import make_dirs, sync_new_entries

__all__ = ["AppendFile"]

logger = logging.getLogger("asynctrace")


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
        self._held: HeldKey | None = None  # the lock taken: (file, pid)
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
        """Take the file's advisory lock, warning once if another process holds it."""
        self._held, shared = take_lock(self._fd, self._identity)
        if shared and not self._warned_shared:
            self._warned_shared = True
            logger.warning(
                "asynctrace: %s is being written by another process too (it holds the "
                "file's lock): their lines are interleaved in one file under one rank; "
                "give each process its own rank (init_worker(config, rank=..., "
                "world_size=...)) or role (configure(config, role=...))",
                self.path,
            )

    def _unlock(self) -> None:
        """Forget this writer's lock (closing the descriptor releases it)."""
        key, self._held = self._held, None
        release_lock(key)

    def moved(self) -> bool:
        """Whether the file was deleted, replaced, renamed or truncated since it was opened.

        Then :meth:`reopen` it. Truncated: smaller than it was after this
        writer's last write (appends, by this or another writer, only grow it).
        :attr:`rotated` tells a file renamed away (logrotate's default), still
        linked and as long as written, whose lines are all there, from one
        deleted or truncated, whose lines are lost.

        A directory on the way replaced by a file (``NotADirectoryError``) is
        a file gone, as a missing one is. Where the path cannot be looked at
        otherwise (a symbolic-link loop, a directory made unreadable), the open
        file tells: unlinked, it was deleted; still linked, it is written on.
        """
        try:
            info = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        except OSError:
            if not self._unlinked():
                return False  # cannot tell: keep writing where we write
            info = None
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

    def _unlinked(self) -> bool:
        """Whether the open file has no name left (deleted); ``False`` when nothing is
        open or it cannot be told."""
        if self._fd < 0:
            return False
        try:
            return os.fstat(self._fd).st_nlink == 0
        except OSError:
            return False

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
        """Sync the new file's directory entry, and those of the directories made for it.

        Raises:
            OSError: a directory could not be synced (tried again at the next sync).
        """
        sync_new_entries(self.path.parent)
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
