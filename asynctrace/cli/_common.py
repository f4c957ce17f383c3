"""What every subcommand shares: the error type, text escapes, stdout, JSON codecs, the
progress bar, argparse."""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import re
import sys
from collections.abc import Callable
from typing import IO, Any, NoReturn

__all__ = [
    "CliError",
    "Parser",
    "Progress",
    "WholeWrites",
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


class WholeWrites:
    """A byte stream whose every write is written whole, or raises.

    A pipe whose reader goes away mid-write (``| head``) takes part of the
    bytes and the buffered stream says how many, without an error; writing the
    rest raises :class:`BrokenPipeError`, so the output is never cut short
    silently.
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def write(self, data: bytes) -> int:
        """Write all of *data*; :class:`BrokenPipeError` (or another ``OSError``) if it cannot."""
        view = memoryview(data)
        while view:
            count = self._stream.write(view)
            if not count:
                raise OSError(errno.EIO, "stdout took no bytes")
            view = view[count:]
        return len(data)

    def flush(self) -> None:
        """Flush the stream underneath."""
        self._stream.flush()


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
        WholeWrites(buffer).write(text.encode("utf-8"))  # a short write is not success
        buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise CliError(f"stdout: {exc.strerror or exc}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _stdlib_codecs() -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    # NaN and Infinity are not JSON: a line holding one is malformed, so that
    # what we pass through verbatim stays valid JSON.
    decode = json.JSONDecoder(parse_constant=_reject_constant).decode
    encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
    ascii_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

    def loads(data: bytes) -> Any:
        """One JSON value of *data*; :class:`ValueError` if it is not JSON."""
        try:
            return decode(data.decode("utf-8"))
        except RecursionError:  # nested deeper than the interpreter's stack allows
            raise ValueError("JSON nested too deeply") from None

    def dumps(obj: Any) -> bytes:
        """*obj* as compact JSON bytes (lone surrogates kept as escapes)."""
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
        """One JSON value of *data*; :class:`ValueError` if it is not JSON."""
        try:
            return fast_loads(data)
        except ValueError:
            return slow_loads(data)

    def dumps(obj: Any) -> bytes:
        """*obj* as compact JSON bytes (lone surrogates kept as escapes)."""
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
        """Raise the usage error *message* as a one-line :class:`CliError`."""
        raise CliError(f"{self.prog}: error: {message} (see '{self.prog} --help')")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in the epilog as written."""
