"""The file ``-o`` names: written so that a reader never sees it half written, and never
a device, a FIFO or a descriptor replaced by a regular file.

While it is written, SIGTERM (``timeout``, a batch scheduler, ``kill``) raises
:class:`Terminated`, so the temporary file is removed as on Ctrl-C; a SIGTERM
ignored when the command started (``trap '' TERM``) stays ignored. The handler
removes the temporary file itself before it raises, so the file is gone wherever
the exception is then taken (or lost); while the file is made, and while it is put
in place, a SIGTERM waits until the output knows where it is.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

from ._common import CliError, WholeWrites

__all__ = ["Output", "Terminated", "stdout_bytes"]


class Terminated(KeyboardInterrupt):
    """SIGTERM received while an output was written: taken like Ctrl-C, so the
    partial output is removed; the command's exit status is then 143.

    *left* says what became of the output: removed (a temporary file), cut
    short (written directly: a FIFO, a device, a descriptor, or in place), or
    never written.
    """

    def __init__(self, left: str = "the partial output was removed") -> None:
        super().__init__(left)
        self.left = left


# A directory of descriptor links: /proc/<pid>/fd (self, thread-self, or a thread's).
_FD_DIRECTORY = re.compile(r"/proc/(self|thread-self|\d+)(?:/task/\d+)?/fd")
_MAX_LINKS = 40  # as the kernel's ELOOP limit
_SHORT_NAME = 40  # characters of the output's name kept in its temporary file's name


def stdout_bytes() -> IO[bytes]:
    """Standard output as bytes, each write written whole or raising (:class:`WholeWrites`)."""
    return cast("IO[bytes]", WholeWrites(sys.stdout.buffer))


def _descriptor_link(name: str) -> tuple[bool, int | None]:
    """Whether *name* is, or passes through, a descriptor link (``/dev/stdout``,
    ``/dev/fd/N``, ``/proc/<pid>/fd/N``), and the descriptor it names when it is
    one of this process's.

    The links are followed one at a time, as the kernel would, so that a chain
    (``/dev/stdout`` to ``/proc/self/fd/1`` to the file the shell opened) is
    seen for what it is: an open descriptor, not the file it leads to.
    """
    try:
        here = "" if name.startswith("/") else os.getcwd()
    except OSError:  # the working directory was removed: the open says so
        return False, None
    pending = here.split("/") + name.split("/")
    resolved = "/"
    links = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            resolved = os.path.dirname(resolved)
            continue
        directory = _FD_DIRECTORY.fullmatch(resolved)
        if directory is not None or resolved == "/dev/fd":
            owner = "self" if directory is None else directory.group(1)
            own = owner in ("self", "thread-self") or owner == str(os.getpid())
            return True, int(part) if own and part.isdigit() and not pending else None
        candidate = os.path.join(resolved, part)
        try:
            target = os.readlink(candidate)
        except OSError:  # not a link, or not there
            resolved = candidate
            continue
        links += 1
        if links > _MAX_LINKS:  # a loop: the open says so
            return False, None
        if target.startswith("/"):
            resolved = "/"
        pending[:0] = target.split("/")
    return False, None


@contextmanager
def _sigterm_held() -> Iterator[None]:
    """SIGTERM held back by this thread while the block runs, delivered on leaving it
    (where the signal mask cannot be set: nothing held). Only this thread's: a
    SIGTERM another thread takes still runs the handler (see ``Output._holding``)."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    previous = mask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, previous)


def _create_beside(final: Path) -> tuple[int, Path]:
    """A new file beside *final*, created as ``open()`` would create it (the umask
    and a default ACL applied by the kernel), under a name not in use.

    The name starts with the output's own (cut short, to stay within the
    255-byte limit), so a file left by a killed command says whose it is.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    short = final.name[:_SHORT_NAME]
    for _ in range(100):
        path = final.parent / f".{short}.at-{os.urandom(4).hex()}.tmp"
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(final.parent))


class Output:
    """The file ``-o`` names, written so that a reader never sees it half written.

    A regular file (or a new name) is written to a temporary file beside it
    that replaces it once complete, with the replaced file's permissions;
    through a symbolic link, the file the link resolves to is replaced, the
    link kept. A descriptor link (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``) is written into the descriptor, as a shell
    redirection would, whatever it leads to (a pipe, a file opened with
    ``>>``). Anything else that exists and is not a regular file (a FIFO, a
    character device such as ``/dev/null``, a terminal) is written into
    directly: it is never replaced by a regular file. When no file can be
    created beside an existing output that can be written (a link in a
    writable directory to a file in a read-only one), the output is written
    in place.

    Example:
        >>> out = Output("/dev/null")  # doctest: +SKIP
        >>> out.open().write(b"x"); out.commit()  # doctest: +SKIP
    """

    def __init__(self, name: str) -> None:
        self.name = name
        target = Path(name)
        through, self._descriptor = _descriptor_link(name)
        self._loop = False
        try:
            status: os.stat_result | None = os.stat(target)  # follows links
        except OSError as exc:
            status = None
            self._loop = exc.errno == errno.ELOOP
        regular = status is not None and stat.S_ISREG(status.st_mode)
        self.direct = through or (status is not None and not regular)
        # the permissions of the file replaced, given to the one that replaces it
        self._mode = status.st_mode & 0o777 if status is not None and regular else None
        # through a link: the file it resolves to is replaced, not the link
        self.final = Path(os.path.realpath(target)) if target.is_symlink() else target
        self._temporary: Path | None = None
        self._stream: IO[bytes] | None = None
        self._sigterm: Any = None  # the SIGTERM handler replaced while writing, if any
        # While set, a SIGTERM's handler only notes it (in _held), to be taken once the
        # output knows its temporary file, or has put it in place. A flag, not the signal
        # mask: a SIGTERM another thread takes (tqdm's monitor, say) runs the handler
        # in the main thread all the same.
        self._holding = False
        self._held = False
        self._terminated: str | None = None  # what a SIGTERM's Terminated said

    def _catch_sigterm(self) -> None:
        """SIGTERM raises :class:`Terminated` until :meth:`commit` or :meth:`abort` (the
        main thread only: no other can set a handler), unless it is ignored (the
        command started with ``trap '' TERM``): then it stays so."""
        if self._sigterm is None and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
                return
            previous = signal.signal(signal.SIGTERM, self._terminate)
            self._sigterm = signal.SIG_DFL if previous is None else previous

    def _terminate(self, signum: int, frame: object) -> None:
        if self._holding:
            self._held = True
            return
        if self._temporary is not None:
            # Removed here, not only by abort(): the exception may surface where no
            # abort() follows (between open() and the caller's try, say).
            left = "the partial output was removed"
            try:
                self._temporary.unlink(missing_ok=True)
            except OSError:
                pass
        elif self._stream is not None:  # written into directly, or in place
            left = "the output was cut short"
        else:
            left = "nothing was written to the output"
        self._terminated = left
        raise Terminated(left)

    def _stop_holding(self) -> None:
        """SIGTERM no longer held; one that came meanwhile is taken now."""
        self._holding = False
        if self._held:
            self._held = False
            self._terminate(signal.SIGTERM, None)

    def _release_sigterm(self, *, deliver: bool) -> None:
        """The SIGTERM handler :meth:`_catch_sigterm` replaced, put back; a SIGTERM held
        meanwhile handed to it when *deliver* (dropped otherwise)."""
        if self._sigterm is not None:
            with _sigterm_held():  # none lost between the two handlers
                signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None
        self._holding = False
        held, self._held = self._held, False
        if held and deliver:
            signal.raise_signal(signal.SIGTERM)

    def open(self) -> IO[bytes]:
        """The stream to write to.

        Raises:
            CliError: it cannot be opened (the message names the output, and
                the directory when that is what refused).
        """
        if self._loop:
            raise CliError(f"-o: {self.name}: symbolic link loop")
        self._catch_sigterm()
        try:
            return self._open()
        except BaseException:
            self.abort()
            raise

    def _open(self) -> IO[bytes]:
        if self.direct:
            try:
                self._stream = self._open_direct()
            except OSError as exc:
                raise CliError(f"{self.name}: {exc.strerror or exc}") from None
            return self._stream
        refused: OSError | None = None
        self._holding = True  # the file and its stream known before a SIGTERM is taken
        try:
            try:
                fd, self._temporary = _create_beside(self.final)
            except OSError as exc:
                refused = exc
            else:
                if self._mode is not None:
                    try:
                        os.fchmod(fd, self._mode)
                    except OSError:
                        pass
                self._stream = os.fdopen(fd, "wb")
        finally:
            self._stop_holding()  # Terminated, the file removed, if one came meanwhile
        if refused is not None:
            self._stream = self._in_place(refused)
        assert self._stream is not None
        return self._stream

    def _open_direct(self) -> IO[bytes]:
        if self._descriptor is not None:
            try:
                fd = os.dup(self._descriptor)  # its offset and O_APPEND shared, as a shell's
            except OSError:
                pass
            else:
                try:
                    if self._descriptor == sys.stdout.fileno():
                        sys.stdout.flush()  # what was printed first stays first
                except (AttributeError, OSError, ValueError):
                    pass
                return os.fdopen(fd, "wb")
        return open(self.name, "wb")

    def _in_place(self, refused: OSError) -> IO[bytes]:
        """The output opened by its name and truncated, as a shell's ``>`` would: when no
        temporary file can be created beside it (*refused*) but it can be written."""
        directory = self.final.parent
        why = f"cannot write in {directory}: {refused.strerror or refused}"
        if self._mode is None or refused.errno not in (errno.EACCES, errno.EPERM):
            raise CliError(f"{self.name}: {why}") from None
        try:
            return open(self.name, "wb")
        except OSError as exc:
            raise CliError(f"{self.name}: {exc.strerror or exc}; {why}") from None

    def commit(self) -> None:
        """Close the stream and put the file in place.

        Raises:
            CliError: it cannot be written or put in place.
            Terminated: a SIGTERM came while it was written, and its
                :class:`Terminated` was lost on the way (the output is removed).
        """
        try:
            if self._stream is not None:
                self._stream.close()
            if self._terminated is not None:
                self.abort()
                raise Terminated(self._terminated)
            # A SIGTERM while the file is put in place is handed on once it is: the
            # output is complete, it is not removed nor said to be.
            self._holding = True
            if self._temporary is not None:
                os.replace(self._temporary, self.final)
                self._temporary = None
        except OSError as exc:
            self.abort()
            raise CliError(f"{self.name}: {exc.strerror or exc}") from None
        self._release_sigterm(deliver=True)

    def abort(self) -> None:
        """Close the stream and remove the temporary file, if any (never raises).

        A second SIGTERM meanwhile is dropped, so the file is removed all the same.
        """
        self._holding = True
        if self._stream is not None:
            try:
                self._stream.close()
            except OSError:
                pass
        if self._temporary is not None:
            try:
                self._temporary.unlink(missing_ok=True)
            except OSError:
                pass
            self._temporary = None
        self._release_sigterm(deliver=False)
