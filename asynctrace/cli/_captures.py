"""Profiler captures merged onto the span timeline.

The files are ``profile-[{role}-]r{rank}-step{N}.{backend}.json`` (the role as
in the trace files' names, for roles other than ``worker``; ``N`` the step, of
either sign, or ``na``, then ``_2``, ... for a name taken). A file named
``profile-*-step*.json`` otherwise is found too, and reported as not a capture.

A capture is a Chrome trace of its own (viztracer's or ``torch.profiler``'s),
on its backend's clock. The process that wrote it measured the offset to the
spans' clock and stored it, with its error bound, under
``otherData.asynctrace``, with the trace and span ids of the profiled span,
its pid and rank; here each event is shifted by that offset, put under the
process whose trace holds that span (else the one with that pid and rank),
and given tracks of its own (``profile step N: <thread>``), so Perfetto shows
operators and Python calls right under the step they belong to.

A capture is read twice, a piece at a time, and never held whole: once to
check it and learn its thread names, once to write its events.
"""

from __future__ import annotations

import codecs
import fnmatch
import glob
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from asynctrace import redact_text

from ._common import CliError, dumps
from ._events import event_ok
from ._inputs import find_files

__all__ = ["CAPTURE_NAME", "Capture", "find_captures", "is_capture", "load_capture"]

# The step part of a capture's name, as the profiler writes it (an integer of either
# sign, or "na"; "_N" for a step captured again): tests/test_profiling_dec06_night.py
# reads back every name the profiler makes.
_STEP_NAME = r"(?:-?\d+|na)(?:_\d+)?"

CAPTURE_NAME = re.compile(
    r"^profile-(?:(?P<role>[A-Za-z0-9][A-Za-z0-9_.\-]*?)-)?r(?P<rank>\d+)"
    rf"-step(?P<step>{_STEP_NAME})\.(?P<backend>\w+)\.json$"
)
# Found as a capture: one not named by CAPTURE_NAME is reported, never read as a trace.
_FOUND = "profile-*-step*.json"
_FIRST_TID = 3_000_000_000  # tids of the capture tracks this command adds
_DROPPED_METADATA = {"process_name", "process_labels", "process_sort_index"}
_READ = 1 << 20  # bytes read at a time
_SPACE = re.compile(r"[ \t\n\r]*")
_NO_ALIGNMENT = "no clock alignment recorded (saved by an interrupted process?)"


def is_capture(path: Path) -> bool:
    """Whether *path* is named as a profiler capture (``profile-r0-step3.python.json``),
    or nearly: ``profile-*-step*.json`` (:func:`load_capture` says what is wrong with it).

    Example:
        >>> is_capture(Path("run/profile-r0-step-1.python.json"))
        True
        >>> is_capture(Path("run/profile-r0-stepX.python.json"))
        True
        >>> is_capture(Path("run/traces-r0.jsonl"))
        False
    """
    return fnmatch.fnmatchcase(path.name, _FOUND)


def find_captures(specs: Iterable[str]) -> list[Path]:
    """The capture files among *specs*: given by name or by a glob, or found in directories.

    A subdirectory removed while it is searched, or one that cannot be read, is
    passed over (as by :func:`~._inputs.find_files`).

    Raises:
        CliError: a directory cannot be listed for another reason (an I/O error).
    """
    found: dict[Path, Path] = {}
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            candidates: Iterable[Path] = _search(path)
        elif not path.exists() and any(c in spec for c in "*?["):
            candidates = []
            for match in sorted(glob.glob(spec, recursive=True)):
                matched = Path(match)
                candidates.extend(_search(matched) if matched.is_dir() else [matched])
        else:
            candidates = [path]
        for candidate in candidates:
            if is_capture(candidate) and candidate.is_file():
                found.setdefault(candidate.resolve(), candidate)
    return list(found.values())


def _search(directory: Path) -> list[Path]:
    try:
        return find_files(directory, [_FOUND])
    except OSError as exc:
        raise CliError(f"{exc.filename or directory}: {exc.strerror or exc}") from None


class _NotJson(ValueError):
    """NaN or Infinity: Python's json reads them, JSON has no such value."""


class _TopLevelList(ValueError):
    """The document is an array (a capture saved without ``otherData``)."""


def _reject_constant(name: str) -> Any:
    raise _NotJson(name)


_STRICT = json.JSONDecoder(parse_constant=_reject_constant)
_LENIENT = json.JSONDecoder()
_SKIPPED = object()  # an element holding NaN or Infinity


class _Scanner:
    """JSON values read from a binary stream a piece at a time."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")()  # a BOM, as json.load
        self._text = ""
        self._pos = 0
        self._eof = False

    def _more(self) -> bool:
        """Read on (at least as much again as is waiting: a long value is not re-read often)."""
        if self._eof:
            return False
        data = self._stream.read(max(_READ, len(self._text) - self._pos))
        self._eof = not data
        self._text = self._text[self._pos :] + self._decoder.decode(data, final=self._eof)
        self._pos = 0
        return True

    def peek(self) -> str:
        """The next character that is not white space (``""`` at the end)."""
        while True:
            self._pos = _SPACE.match(self._text, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._text):
                return self._text[self._pos]
            if not self._more():
                return ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise ValueError(f"expected {char!r}")
        self._pos += 1

    def value(self, *, lenient: bool = False) -> Any:
        """The next value; :data:`_SKIPPED` for one holding NaN or Infinity, unless
        *lenient* (then they are floats)."""
        self.peek()
        decoder = _LENIENT if lenient else _STRICT
        while True:
            try:
                value, end = decoder.raw_decode(self._text, self._pos)
            except _NotJson:
                decoder = _LENIENT  # only to find where it ends
                continue
            except json.JSONDecodeError as exc:
                # Only a value cut at the end of the piece is read on: an error further
                # back is the file's (reading on would load the rest of a huge file).
                cut = exc.pos + 16 >= len(self._text) or exc.msg.startswith("Unterminated")
                if cut and self._more():
                    continue
                raise
            if len(self._text) - end < 32 and self._more():
                continue  # a number may go on in the next piece (``12.`` then ``5``)
            self._pos = end
            return value if lenient or decoder is _STRICT else _SKIPPED

    def elements(self) -> Iterator[Any]:
        """The elements of the array that comes next."""
        self.expect("[")
        if self.peek() == "]":
            self._pos += 1
            return
        while True:
            yield self.value()
            char = self.peek()
            self._pos += 1
            if char == "]":
                return
            if char != ",":
                raise ValueError("expected ',' or ']'")


def _events(path: Path, rest: dict[str, Any]) -> Iterator[Any]:
    """The ``traceEvents`` elements of the document at *path*; its other keys go to *rest*.

    Raises:
        _TopLevelList: the document is an array.
        OSError, ValueError, RecursionError: unreadable, or not JSON.
    """
    with open(path, "rb") as stream:
        scanner = _Scanner(stream)
        if scanner.peek() == "[":
            raise _TopLevelList
        scanner.expect("{")
        if scanner.peek() == "}":
            return
        while True:
            key = scanner.value()
            if not isinstance(key, str):
                raise ValueError("expected a key")
            scanner.expect(":")
            if key in rest:  # json.load would keep the last: which events are meant is unclear
                raise ValueError(f"the key {key!r} is repeated")
            if key == "traceEvents" and scanner.peek() == "[":
                rest[key] = []
                yield from scanner.elements()
            else:
                rest[key] = scanner.value(lenient=True)  # otherData is checked by the caller
            char = scanner.peek()
            scanner.expect(char if char in ",}" else ",")
            if char == "}":
                break
        if scanner.peek():
            raise ValueError("extra data after the document")


def _tid_key(tid: object) -> object:
    """*tid* as a dict key (any JSON value may stand there)."""
    return tid if tid is None or isinstance(tid, (int, float, str)) else repr(tid)


@dataclass
class Capture:
    """One capture, checked; its events are read again from the file when written."""

    path: Path
    pid: object
    offset_us: float
    error_us: float
    step: str
    rank: object = None
    trace_id: str | None = None
    span_id: str | None = None
    names: dict[object, str] = field(default_factory=dict)  # thread names by tid
    # items of traceEvents not written: not an event (not an object, or one without
    # "ph"), NaN or Infinity, a field of the wrong type or out of range (see event_ok)
    skipped: int = 0
    overflow: bool = False  # the backend's buffer filled up: the earliest events are gone
    truncated: bool = False  # stopped by shutdown, before its span ended


def _about_text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:  # an int past a float's range raises here
            number = float(value)
        except OverflowError:
            return None
        if math.isfinite(number):
            return number
    return None


def load_capture(path: Path) -> Capture | str:
    """The capture at *path*, or why it cannot be merged (a one-line reason)."""
    match = CAPTURE_NAME.match(path.name)
    if match is None:  # its step (and rank, and backend) unknown: not read
        return (
            f"{path.name}: not named as a capture is "
            "(profile-[ROLE-]rRANK-stepSTEP.BACKEND.json, STEP an integer or na)"
        )
    rest: dict[str, Any] = {}
    names: dict[object, str] = {}
    skipped = 0
    try:
        for event in _events(path, rest):
            if event is _SKIPPED:
                skipped += 1
            elif (
                isinstance(event, dict)
                and event.get("ph") == "M"
                and event.get("name") == "thread_name"
            ):
                args = event.get("args")
                if isinstance(args, dict) and isinstance(args.get("name"), str):
                    names[_tid_key(event.get("tid"))] = args["name"]
    except _TopLevelList:
        return f"{path.name}: {_NO_ALIGNMENT}"
    except (OSError, ValueError, OverflowError) as exc:
        return f"{path.name}: not readable as JSON ({exc.__class__.__name__})"
    except RecursionError:
        return f"{path.name}: not readable as JSON (nested too deeply)"
    except MemoryError:
        return f"{path.name}: not readable as JSON (a value too large for memory)"
    other = rest.get("otherData")
    about = other.get("asynctrace") if isinstance(other, dict) else None
    if not isinstance(about, dict) or not isinstance(rest.get("traceEvents"), list):
        return f"{path.name}: {_NO_ALIGNMENT}"
    offset, error = _number(about.get("clock_offset_us")), _number(about.get("clock_error_us"))
    if offset is None or error is None or error < 0:
        return f"{path.name}: its clock alignment is not a finite number"
    rank = about.get("rank")
    return Capture(
        path,
        about.get("pid"),
        offset,
        error,
        match["step"],
        rank=rank if rank.__class__ is int else None,
        trace_id=_about_text(about.get("trace_id")),
        span_id=_about_text(about.get("span_id")),
        names=names,
        skipped=skipped,
        overflow=about.get("overflow") is True,
        truncated=about.get("truncated") is True,
    )


def capture_lines(
    capture: Capture, out_pid: object, shift: float, next_tid: Callable[[], int]
) -> Iterator[bytes]:
    """The capture's events for the output: on the spans' clock, under *out_pid*.

    Reads the file again. Raises what reading it raises (``OSError``,
    ``ValueError``, ``RecursionError``) should it have changed since
    :func:`load_capture` read it.
    """
    tids: dict[object, int] = {}
    delta = capture.offset_us - shift
    for event in _events(capture.path, {}):
        if event is _SKIPPED:
            continue  # held NaN or Infinity: counted by load_capture
        if not isinstance(event, dict) or "ph" not in event:
            capture.skipped += 1  # a number, a string, a list, null, an object without ph
            continue
        if event.get("ph") == "M" and (
            event.get("name") in _DROPPED_METADATA or event.get("name") == "thread_name"
        ):
            continue  # the process is ours; tracks are named below
        ts = event.get("ts")
        if ts.__class__ in (int, float):
            try:
                ts += delta
                finite = math.isfinite(ts)
            except OverflowError:  # an int past a float's range
                finite = False
            if not finite:
                capture.skipped += 1
                continue
            event["ts"] = ts
        tid = _tid_key(event.get("tid"))
        event["pid"] = out_pid
        event["tid"] = 0  # its track, below; the one it had may be any JSON value
        if not event_ok(event):  # what trace events must be: a ts within 1e18 µs, ...
            capture.skipped += 1
            continue
        track = tids.get(tid)
        if track is None:
            track = tids[tid] = next_tid()
            # (a capture written before its names were redacted: redacted here)
            name = redact_text(str(capture.names.get(tid, f"tid {tid}")))
            yield dumps(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": out_pid,
                    "tid": track,
                    "args": {"name": f"profile step {capture.step}: {name}"},
                }
            )
        event["tid"] = track
        yield dumps(event)


def tid_counter() -> Callable[[], int]:
    """Fresh tids for capture tracks."""
    state = [_FIRST_TID]

    def take() -> int:
        state[0] += 1
        return state[0]

    return take
