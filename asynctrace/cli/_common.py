"""What every subcommand shares: the error type, JSON codecs, the progress bar, argparse."""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NoReturn

__all__ = [
    "CliError",
    "Output",
    "Parser",
    "Progress",
    "dumps",
    "escape_controls",
    "escape_surrogates",
    "loads",
    "note",
    "positive_int",
    "write_stdout",
]


class CliError(Exception):
    """An error reported as one line on stderr, with an exit code (2 unless told).

    Example:
        >>> str(CliError("trace.jsonl: no such file"))
        'trace.jsonl: no such file'
    """

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    r"""*text* with each lone surrogate written as its ``\udXXX`` escape.

    The writers keep a lone surrogate (from a non-UTF-8 path, say); no UTF-8
    output can hold one. The escape is what the JSON lines hold: inside a
    JSON or JavaScript string it means the same character again, and in text
    it shows where it was.

    Example:
        >>> escape_surrogates("rl.step" + chr(0xDCFF))
        'rl.step\\udcff'
    """
    if text.isascii():
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    r"""*text* safe for a terminal: control characters and lone surrogates written as escapes.

    A name read from a trace can hold anything. C0 and C1 control characters
    and DEL (an escape sequence that clears the screen or sets the window
    title, a newline that would forge a row of a table) are shown as ``\n``,
    ``\t``, ``\r`` or ``\xNN``, and a lone surrogate as ``\udXXX`` (as
    :func:`escape_surrogates`), so every character of a name is seen and none
    acts on the terminal.

    Example:
        >>> print(escape_controls("rl.step\x1b[2J\nfake row"))
        rl.step\x1b[2J\nfake row
    """
    if text.isprintable():  # the common case: no control character, no surrogate
        return text
    return _CONTROL.sub(_escape_one, text)


def write_stdout(text: str) -> None:
    """Write *text* to standard output as UTF-8 whatever the locale, lone surrogates
    escaped (see :func:`escape_surrogates`).

    The bytes go to ``sys.stdout.buffer`` (a name read from a trace may be any
    character, which an ASCII locale could not encode); a stream without one
    (a ``StringIO`` put in its place) gets the text.

    Raises:
        BrokenPipeError: the reader went away (``| head``); the caller handles it.
        CliError: stdout refuses the bytes (a full disk, ``> /dev/full``).
    """
    text = escape_surrogates(text)
    try:
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        sys.stdout.flush()  # what was written as text first stays first
        buffer.write(text.encode("utf-8"))
        buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise CliError(f"stdout: {exc.strerror or exc}") from None


# A directory of descriptor links: /proc/<pid>/fd (self, thread-self, or a thread's).
_FD_DIRECTORY = re.compile(r"/proc/(self|thread-self|\d+)(?:/task/\d+)?/fd")
_MAX_LINKS = 40  # as the kernel's ELOOP limit
_SHORT_NAME = 40  # characters of the output's name kept in its temporary file's name


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

    def open(self) -> IO[bytes]:
        """The stream to write to.

        Raises:
            CliError: it cannot be opened (the message names the output, and
                the directory when that is what refused).
        """
        if self._loop:
            raise CliError(f"-o: {self.name}: symbolic link loop")
        if self.direct:
            try:
                self._stream = self._open_direct()
            except OSError as exc:
                raise CliError(f"{self.name}: {exc.strerror or exc}") from None
            return self._stream
        try:
            fd, self._temporary = _create_beside(self.final)
        except OSError as exc:
            self._stream = self._in_place(exc)
            return self._stream
        if self._mode is not None:
            try:
                os.fchmod(fd, self._mode)
            except OSError:
                pass
        self._stream = os.fdopen(fd, "wb")
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
        """
        try:
            if self._stream is not None:
                self._stream.close()
            if self._temporary is not None:
                os.replace(self._temporary, self.final)
                self._temporary = None
        except OSError as exc:
            self.abort()
            raise CliError(f"{self.name}: {exc.strerror or exc}") from None

    def abort(self) -> None:
        """Close the stream and remove the temporary file, if any (never raises)."""
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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _stdlib_codecs() -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    # NaN and Infinity are not JSON: a line holding one is malformed, so that
    # what we pass through verbatim stays valid JSON.
    decode = json.JSONDecoder(parse_constant=_reject_constant).decode
    encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
    ascii_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

    def loads(data: bytes) -> Any:
        try:
            return decode(data.decode("utf-8"))
        except RecursionError:  # nested deeper than the interpreter's stack allows
            raise ValueError("JSON nested too deeply") from None

    def dumps(obj: Any) -> bytes:
        text = encode(obj)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, kept by the writers as an escape
            return ascii_encode(obj).encode("ascii")

    return loads, dumps


def _codecs() -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    """orjson when it is installed (the ``cli`` extra; faster), else the standard library.

    Either way, ``loads`` raises :class:`ValueError` for what it cannot read,
    JSON nested too deeply included (orjson stops at 1,024 levels, the
    standard library at the interpreter's recursion limit): such a line is
    malformed, like a torn one.

    orjson refuses strings holding a lone surrogate, which the writers keep
    (as a ``\\udcff`` escape, say, from a non-UTF-8 path): such a line is
    read, and such an event written, by the standard library instead.
    """
    try:
        orjson: Any = importlib.import_module("orjson")
    except ImportError:
        return _stdlib_codecs()
    fast_loads, fast_dumps = orjson.loads, orjson.dumps
    slow_loads, slow_dumps = _stdlib_codecs()

    def loads(data: bytes) -> Any:
        try:
            return fast_loads(data)
        except ValueError:
            return slow_loads(data)

    def dumps(obj: Any) -> bytes:
        try:
            return fast_dumps(obj)  # type: ignore[no-any-return]
        except TypeError:
            return slow_dumps(obj)

    return loads, dumps


loads, dumps = _codecs()


def positive_int(text: str) -> int:
    """An argparse ``type`` for a count: an integer of at least 1.

    Example:
        >>> positive_int("3")
        3
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: an integer of at least 1")
    return value


def note(prog: str, message: str) -> None:
    """One informational line on stderr, prefixed with the command's name.

    *message* may carry names read from the inputs: its control characters
    are escaped (see :func:`escape_controls`), so it stays one line and
    never acts on the terminal.
    """
    print(f"{prog}: {escape_controls(message)}", file=sys.stderr, flush=True)


class Progress:
    """A progress bar over bytes read, on stderr, only when stderr is a terminal.

    Uses tqdm when it is importable; otherwise (or when piped) it does nothing.

    Example:
        >>> bar = Progress(1000, "convert")
        >>> bar.advance(500)
        >>> bar.close()
    """

    def __init__(self, total_bytes: int, description: str, *, enabled: bool = True) -> None:
        self._bar: Any = None
        if not enabled or not _is_terminal(sys.stderr):
            return
        try:
            tqdm: Any = importlib.import_module("tqdm")
        except ImportError:
            return
        self._bar = tqdm.tqdm(
            total=total_bytes,
            desc=description,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            leave=False,
        )

    def advance(self, nbytes: int) -> None:
        """Count *nbytes* more as read."""
        if self._bar is not None:
            self._bar.update(nbytes)

    def close(self) -> None:
        """Remove the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (a :class:`CliError`)."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: error: {message} (see '{self.prog} --help')")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in the epilog as written."""
