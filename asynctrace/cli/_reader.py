"""Streaming readers for asynctrace's JSON-lines files: traces and session records.

Inputs are files, directories (searched recursively) and glob patterns. Files
compressed with gzip (long runs compress their traces) are read as they are,
recognised by their content; directories also yield ``traces*.jsonl.gz``.
Files are read line by line, so memory does not grow with their size. A line that
is not a JSON object (the torn last line of a killed process, say), or a trace
event whose fields have the wrong types (a ``pid`` that is a list, a ``ts``
that is a string), is skipped and counted. A file none of whose lines is
usable (one torn line, say) is skipped: its lines are counted as malformed and
the file is named in the summary; the commands refuse the input only when
nothing at all could be read. Damaged gzip data (a CRC error, a corrupt
deflate block) ends its file there: the lines read before the damage are kept,
the rest of that file is skipped and the file is named in the summary. A UTF-8
byte order mark at the start of a file is ignored. A directory (or glob) that
holds both ``X.jsonl`` and ``X.jsonl.gz`` gives only one of them, the
uncompressed one unless it is empty (``gzip -k`` leaves both, with the same
spans): the other is named in a note. Lines ending in a comma are read too, which
covers a Chrome JSON document written one event per line, such as the output
of ``asynctrace convert``, and a line that is a whole ``{"traceEvents": [...]}``
document (``json.dump``'s output) gives its events; any other whole-document
JSON file of up to 64 MiB is loaded at once as a fallback. A line longer than
64 MiB is skipped and counted without being parsed or held whole, so memory
stays bounded whatever a file holds.

An input that is not a regular file (a pipe, such as ``<(zcat run.jsonl.gz)``)
is read once, from its start: :func:`iter_file` reads it line by line as it
does a file, but cannot load it again as one JSON document; :func:`single_pass`
tells a caller that would read it twice.
"""

from __future__ import annotations

import functools
import glob
import gzip
import itertools
import os
import re
import stat
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from ._common import CliError, Progress, dumps, loads, note

__all__ = [
    "SESSION_PATTERN",
    "TRACE_PATTERN",
    "ProcessInfo",
    "ReadStats",
    "expand_inputs",
    "iter_records",
    "single_pass",
    "sniff_kind",
]

TRACE_PATTERN = "traces*.jsonl"
SESSION_PATTERN = "sessions*.jsonl"

_FILE_NAME = re.compile(r"^traces-(?:(?P<role>.+?)-)?r(?P<rank>\d+)\.jsonl(?:\.gz)?$")
_STRUCTURAL = (b'{"traceEvents":', b"],", b"]}")
_PROGRESS_EVERY = 0x3FFF  # lines between two progress updates
_SAMPLES = 3
_MAX_DOCUMENT = 64 << 20  # bytes: a larger file with no usable line is not loaded whole
_MAX_LINE = _MAX_DOCUMENT  # bytes: a longer line is skipped (and counted), never parsed
_SKIP_CHUNK = 1 << 20  # bytes read at a time past the start of an overlong line
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, which some editors put first
_DAMAGED = "damaged compressed data"


@dataclass
class ReadStats:
    """What reading the inputs skipped and found, for the one-line summary."""

    files: int = 0
    records: int = 0
    malformed: int = 0
    samples: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    # Files with lines but none usable: (path, "1 line, none usable: 1 not JSON").
    unusable: list[tuple[Path, str]] = field(default_factory=list)
    # Files read only up to damaged compressed data: (path, "after line 37 (...)").
    damaged: list[tuple[Path, str]] = field(default_factory=list)
    kind: str = "trace"  # what the files should be, for the summary

    def summary(self) -> str:
        """``"skipped 2 malformed lines (a.jsonl:7, b.jsonl:3)"``, or ``""``.

        Example:
            >>> ReadStats(malformed=1, samples=["traces-r1.jsonl:57"]).summary()
            'skipped 1 malformed line (traces-r1.jsonl:57)'
            >>> ReadStats(malformed=1, samples=["traces-r1.jsonl:1"],
            ...     unusable=[(Path("traces-r1.jsonl"), "1 line, none usable: 1 not JSON")]
            ... ).summary()  # doctest: +NORMALIZE_WHITESPACE
            'skipped 1 malformed line (traces-r1.jsonl:1); skipped 1 file that is not a
            JSON-lines trace (traces-r1.jsonl: 1 line, none usable: 1 not JSON)'
        """
        parts = []
        if self.malformed:
            where = ", ".join(self.samples)
            more = ", ..." if self.malformed > len(self.samples) else ""
            plural = "s" if self.malformed != 1 else ""
            parts.append(f"skipped {self.malformed} malformed line{plural} ({where}{more})")
        if self.empty:
            plural = "s" if len(self.empty) != 1 else ""
            parts.append(f"{len(self.empty)} empty file{plural} ({', '.join(self.empty[:3])})")
        if self.unusable:
            count = len(self.unusable)
            which = "file that is" if count == 1 else "files that are"
            where = "; ".join(f"{path.name}: {why}" for path, why in self.unusable[:_SAMPLES])
            more = "; ..." if count > _SAMPLES else ""
            parts.append(f"skipped {count} {which} not a JSON-lines {self.kind} ({where}{more})")
        if self.damaged:
            count = len(self.damaged)
            which = "file" if count == 1 else "files"
            where = "; ".join(f"{path.name}: {why}" for path, why in self.damaged[:_SAMPLES])
            more = "; ..." if count > _SAMPLES else ""
            parts.append(
                f"read {count} {which} only up to damaged compressed data, the rest of "
                f"{'it' if count == 1 else 'them'} skipped ({where}{more})"
            )
        return "; ".join(parts)

    def refusal(self) -> str | None:
        """Why a single input file gave nothing, when it had lines but none usable.

        Example:
            >>> stats = ReadStats(files=1, unusable=[(Path("t.jsonl"), "1 line, none usable")])
            >>> stats.refusal()
            't.jsonl: not a JSON-lines trace (1 line, none usable)'
        """
        if self.files != 1 or self.records or not self.unusable:
            return None
        path, why = self.unusable[0]
        if why.startswith(_DAMAGED):
            return f"{path}: {why}"
        return f"{path}: not a JSON-lines {self.kind} ({why})"


def _has_magic(text: str) -> bool:
    return any(c in text for c in "*?[")


def _search(directory: Path, patterns: Sequence[str]) -> list[Path]:
    found = {
        p
        for pattern in patterns
        for variant in (pattern, pattern + ".gz")
        for p in directory.rglob(variant)
        if p.is_file()
    }
    return sorted(found)


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
        CliError: a path does not exist, a glob matches nothing, or a directory
            holds no file matching *patterns*.

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


_SNIFF_LINE = 1 << 20  # bytes of a line sniff_kind parses; a longer one is judged by its start


def _kind_of_start(start: bytes) -> str | None:
    """``"traces"`` or ``"sessions"`` from the first MiB of a line too long to parse here."""
    head = start.lstrip()[:1]
    if head not in (b"{", b"["):
        return None
    if b'"ph"' in start or b'"traceEvents"' in start:
        return "traces"
    if b'"session_id"' in start or b'"submit_ts"' in start:
        return "sessions"
    return None


def sniff_kind(path: Path) -> str | None:
    """``"traces"`` or ``"sessions"`` from the first JSON object in the file, else the name."""
    try:
        with open_input(path) as stream:
            lines = iter(functools.partial(stream.readline, _SNIFF_LINE + 1), b"")
            for _, line in zip(range(64), lines, strict=False):
                if len(line) > _SNIFF_LINE and line[-1] != 10:  # long: judged by its start
                    _skip_rest(stream)
                    kind = _kind_of_start(line)
                    if kind is not None:
                        return kind
                    continue
                raw = line.strip().rstrip(b",")
                if raw.startswith(_BOM):
                    raw = raw[3:].lstrip()
                if not raw:
                    continue
                try:
                    obj = loads(raw)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    if "ph" in obj or isinstance(obj.get("traceEvents"), list):
                        return "traces"
                    if "session_id" in obj or "submit_ts" in obj:
                        return "sessions"
    except (EOFError, zlib.error, gzip.BadGzipFile):  # cut short or damaged: go by the name
        pass  # (reading it names the damage)
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    if path.name.startswith("sessions"):
        return "sessions"
    if path.name.startswith("traces"):
        return "traces"
    return None


def iter_records(
    paths: Sequence[Path], stats: ReadStats, progress: Progress | None = None
) -> Iterator[tuple[int, dict[str, Any], bytes]]:
    """Yield ``(file index, object, raw JSON bytes)`` for every JSON object line.

    Raises:
        CliError: a file cannot be read, or no line of it is a JSON object.
    """
    for index, path in enumerate(paths):
        for obj, raw in iter_file(path, stats, progress):
            yield index, obj, raw


@dataclass
class _Skipped:
    """One file's lines that were skipped, by reason, and where the first few are."""

    not_json: int = 0
    not_object: int = 0
    wrong_types: int = 0
    negative: int = 0
    overlong: int = 0
    documents: int = 0  # one-line traceEvents documents none of whose items is usable
    items: int = 0  # ...and their items (counted as malformed, as a loaded document's)
    samples: list[str] = field(default_factory=list)

    def at(self, where: str) -> None:
        """Name *where* among the samples, if there is room."""
        if len(self.samples) < _SAMPLES:
            self.samples.append(where)

    @property
    def lines(self) -> int:
        """Lines skipped."""
        return (
            self.not_json
            + self.not_object
            + self.wrong_types
            + self.negative
            + self.overlong
            + self.documents
        )

    def reasons(self) -> list[str]:
        """Why, one phrase per reason: ``["1 not JSON", "2 with a negative dur"]``."""
        items = f"{self.items} item{'s' if self.items != 1 else ''}"
        return [
            f"{count} {what}"
            for count, what in (
                (self.not_json, "not JSON"),
                (self.not_object, "JSON but not an object"),
                (self.wrong_types, "with event fields of the wrong type"),
                (self.negative, "with a negative dur"),
                (self.overlong, f"longer than {_MAX_LINE >> 20} MiB (not read)"),
                (self.documents, f"traceEvents document of {items}, none usable"),
            )
            if count
        ]


def _skip_rest(stream: IO[bytes]) -> int:
    """Read past the end of the current line, a chunk at a time; the bytes read."""
    skipped = 0
    while True:
        chunk = stream.readline(_SKIP_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk[-1] == 10:  # end of file, or the line's newline
            return skipped


def _rest_of_line(stream: IO[bytes], line: bytes) -> tuple[bytes, bool]:
    """*line*, read without its newline, joined with what follows it, and whether the
    file ended first.

    A live writer may have flushed half a line: reading on gets the rest if
    it is there by now. At the file's end the line is the last one (torn, or
    just without a final newline), and nothing after it is read.
    """
    while True:
        more = stream.readline(_MAX_LINE + 1 - len(line))
        if not more:
            return line, True
        line += more
        if line[-1] == 10 or len(line) > _MAX_LINE:
            return line, False


def iter_file(
    path: Path, stats: ReadStats, progress: Progress | None = None
) -> Iterator[tuple[dict[str, Any], bytes]]:
    """Yield ``(object, raw JSON bytes)`` for every JSON object line of one file.

    A line that is a ``{"traceEvents": [...]}`` document (with no ``ph``)
    gives its events instead, each with its JSON bytes. A line longer than
    64 MiB is skipped and counted, neither parsed nor held whole. A file with
    lines but none usable is skipped: its lines are counted as malformed and
    the file is listed in ``stats.unusable`` (the caller refuses the input when
    nothing at all could be read). Damaged compressed data ends the file: the
    lines before it are kept and the file is listed in ``stats.damaged`` (in
    ``stats.unusable`` when no line came before it). A UTF-8 byte order mark
    starting the file is ignored.

    Raises:
        CliError: the file cannot be read.
    """
    stats.files += 1
    valid = lineno = pending_bytes = 0
    skipped = _Skipped()
    first = b""
    cut_short = False
    damage = ""
    try:
        stream = open_input(path)  # closed below, also on early exit
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    try:
        lines = iter(functools.partial(stream.readline, _MAX_LINE + 1), b"")
        head = stream.readline(len(_BOM))
        if head == _BOM:  # an editor's byte order mark: not part of the JSON
            head = stream.readline(_MAX_LINE + 1)  # the line after it, as any other
            pending_bytes = len(_BOM)
        elif head and head[-1] != 10:
            head += stream.readline(_MAX_LINE + 1 - len(head))
        at_end = False  # the last line had no newline: the file's end as first reached
        for line in itertools.chain((head,), lines) if head else lines:
            if at_end:  # the file grew after its end was reached (a live run): not read
                break
            if line[-1] != 10 and len(line) <= _MAX_LINE:  # the writer's frontier, or the end
                line, at_end = _rest_of_line(stream, line)
            lineno += 1
            size = len(line)
            pending_bytes += size
            if not lineno & _PROGRESS_EVERY and progress is not None:
                progress.advance(pending_bytes)
                pending_bytes = 0
            if size > _MAX_LINE and line[-1] != 10:  # the start of an overlong line
                pending_bytes += _skip_rest(stream)
                if not first:
                    first = line[:64].lstrip()[:1]
                skipped.overlong += 1
                skipped.at(f"{path.name}:{lineno}")
                continue
            raw = line.strip()
            if not raw:
                continue
            if not first:
                first = raw[:1]
            if raw[-1] == 44:  # ",": one event per line of a JSON document
                raw = raw[:-1].rstrip()
            try:
                obj = loads(raw)
            except ValueError:
                if raw in (b"[", b"]") or raw.startswith(_STRUCTURAL):
                    continue
                skipped.not_json += 1
                skipped.at(f"{path.name}:{lineno}")
                continue
            if obj.__class__ is not dict:
                skipped.not_object += 1
                skipped.at(f"{path.name}:{lineno}")
                continue
            if "ph" in obj:
                if not event_ok(obj):
                    if _negative_dur(obj):
                        skipped.negative += 1
                    else:
                        skipped.wrong_types += 1
                    skipped.at(f"{path.name}:{lineno}")
                    continue
            elif obj.get("traceEvents").__class__ is list:  # a whole document on one line
                kept, left_out = _usable_events(obj["traceEvents"])
                del obj
                if left_out:
                    skipped.items += left_out
                    skipped.at(f"{path.name}:{lineno} ({left_out} unusable events)")
                    if not kept:
                        skipped.documents += 1
                valid += len(kept)
                for event in kept:
                    yield event, dumps(event)
                continue
            valid += 1
            yield obj, raw
    except EOFError:  # a gzip stream cut short (a killed writer): keep what was read
        cut_short = True
        skipped.at(f"{path.name}:{lineno + 1} (compressed data cut short)")
    except (zlib.error, gzip.BadGzipFile) as exc:  # nothing after the damage can be trusted
        where = f"after line {lineno}" if lineno else "before its first line"
        damage = f"{where} ({exc})"
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    finally:
        stream.close()
        if progress is not None:
            progress.advance(pending_bytes)
    # Malformed: the lines skipped (an unusable document's items rather than its line).
    bad = skipped.lines - skipped.documents + skipped.items + int(cut_short)
    if valid:
        stats.records += valid
        _count_malformed(stats, bad, skipped.samples)
        if damage:
            stats.damaged.append((path, damage))
        return
    if damage:  # nothing usable before the damage: the file is not read at all
        _count_malformed(stats, bad, skipped.samples)
        stats.unusable.append((path, f"{_DAMAGED} {damage}"))
        return
    if not first and not cut_short:
        stats.empty.append(path.name)
        return
    yield from _fallback(path, stats, skipped, first, bad, cut_short)


def _fallback(
    path: Path, stats: ReadStats, skipped: _Skipped, first: bytes, bad: int, cut_short: bool
) -> Iterator[tuple[dict[str, Any], bytes]]:
    """A file with no usable line: read as one JSON document, else counted as unusable."""
    document = _whole_document(path) if first in (b"{", b"[") else None
    if isinstance(document, tuple):
        kept, left_out = document
        if left_out:
            _count_malformed(stats, left_out, [f"{path.name}: {left_out} unusable events"])
        if kept:
            for obj in kept:
                stats.records += 1
                yield obj, dumps(obj)
        elif left_out:
            plural = "s" if left_out != 1 else ""
            stats.unusable.append(
                (path, f"a JSON document of {left_out} item{plural}, none usable")
            )
        else:
            stats.empty.append(path.name)  # an empty document: ``[]``, ``{"traceEvents": []}``
        return
    if not bad:  # structural lines only (``[`` and ``]``): an empty document
        stats.empty.append(path.name)
        return
    _count_malformed(stats, bad, skipped.samples)
    why = skipped.reasons()
    if isinstance(document, str):
        why.append(document)
    lines = skipped.lines
    if not lines:
        stats.unusable.append((path, "compressed data cut short before its first line"))
        return
    if cut_short:
        why.append("then compressed data cut short")
    plural = "s" if lines != 1 else ""
    stats.unusable.append((path, f"{lines} line{plural}, none usable: {', '.join(why)}"))


def _count_malformed(stats: ReadStats, count: int, samples: list[str]) -> None:
    stats.malformed += count
    stats.samples.extend(samples[: max(0, _SAMPLES - len(stats.samples))])


_IDS = (int, str)
_MAX_US = 1e18  # about 31,700 years of microseconds: any real timestamp or duration


def real_number(value: object, bound: float = sys.float_info.max) -> bool:
    """Whether *value* is an int or float (not a bool) within ``±bound``: not NaN, not an
    infinity, not an int no float holds (``float()`` of it would raise).

    Example:
        >>> real_number(3), real_number(float("nan")), real_number(10**400), real_number(True)
        (True, False, False, False)
    """
    if value.__class__ is bool or not isinstance(value, (int, float)):
        return False
    return -bound <= value <= bound


def event_ok(event: dict[str, Any]) -> bool:
    """Whether a trace event's fields have types every command can use.

    ``ph`` is a string; ``name``, when present, a string; ``pid`` and
    ``tid``, when present, an integer or a string (they are keys); ``ts`` and
    ``dur`` a finite number within 1e18 µs, ``dur`` not negative. Anything
    else (a ``pid`` that is a list, a ``ts`` that is a string or ``1e400``, a
    ``name`` that is a list, a ``true``, a ``dur`` of ``-5``) makes the line
    malformed, skipped and counted like a torn one.

    Example:
        >>> event_ok({"ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1})
        True
        >>> event_ok({"ph": "X", "ts": "1"})
        False
        >>> event_ok({"ph": "X", "ts": 1, "dur": float("inf")})
        False
        >>> event_ok({"ph": "X", "ts": 1, "dur": -1})
        False
    """
    if event["ph"].__class__ is not str:
        return False
    name = event.get("name")
    if name is not None and name.__class__ is not str:
        return False
    for key in ("pid", "tid"):
        value = event.get(key)
        if value is not None and (value.__class__ is bool or not isinstance(value, _IDS)):
            return False
    ts = event.get("ts")  # a time no float holds, NaN or an infinity: not a time
    if ts is not None and not real_number(ts, _MAX_US):
        return False
    dur = event.get("dur")  # ...and a duration is not negative
    return dur is None or (real_number(dur, _MAX_US) and dur >= 0)


def _negative_dur(event: dict[str, Any]) -> bool:
    """Whether *event* (which :func:`event_ok` refused) has a negative ``dur``."""
    dur = event.get("dur")
    return real_number(dur, _MAX_US) and dur < 0  # type: ignore[operator]


def _usable_events(events: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """The items of a document's event list that are usable events, and how many are not."""
    kept = [
        event
        for event in events
        if isinstance(event, dict) and ("ph" not in event or event_ok(event))
    ]
    return kept, len(events) - len(kept)


def _whole_document(path: Path) -> tuple[list[dict[str, Any]], int] | str | None:
    """A Chrome JSON document (``{"traceEvents": [...]}`` or ``[...]``), loaded whole: its
    events, and how many of its items were left out (not an object, or not a usable event).

    ``None`` when it is not such a document; a reason when it was not tried: a
    document over 64 MiB (decompressed) is not loaded, so memory stays bounded,
    and an input that is not a regular file (a pipe) was consumed by reading
    its lines.
    """
    if single_pass(path):
        return "not read again as one JSON document (not a regular file: read once)"
    try:
        with open_input(path) as stream:  # measured first, in chunks: a gzip hides its size
            size, data = 0, b""
            while size <= _MAX_DOCUMENT:
                chunk = stream.read(1 << 20)
                if not chunk:
                    break
                size += len(chunk)
        if size <= _MAX_DOCUMENT:
            with open_input(path) as stream:
                data = stream.read(_MAX_DOCUMENT + 1)  # bounded also if it grew meanwhile
    except (OSError, EOFError, zlib.error):
        return None
    if size > _MAX_DOCUMENT or len(data) > _MAX_DOCUMENT:
        return f"not read as one JSON document (over {_MAX_DOCUMENT >> 20} MiB)"
    try:
        document = loads(data)
    except (ValueError, RecursionError):
        return None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        return None
    return _usable_events(events)


@dataclass(frozen=True)
class ProcessInfo:
    """Who wrote an event: from the ``process_name`` metadata, else the file name.

    Example:
        >>> ProcessInfo.from_file_name("traces-driver-r0.jsonl").label
        'driver r0'
    """

    rank: int | None = None
    role: str | None = None
    run_id: str | None = None
    host: str | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        """``"r1"``, ``"driver r0"``, or ``"?"`` when the rank is unknown."""
        rank = f"r{self.rank}" if self.rank is not None else "?"
        return f"{self.role} {rank}" if self.role and self.role != "worker" else rank

    @classmethod
    def from_file_name(cls, name: str) -> ProcessInfo:
        """Rank and role from ``traces-r{rank}.jsonl`` / ``traces-{role}-r{rank}.jsonl``."""
        match = _FILE_NAME.match(name)
        if match is None:
            return cls()
        return cls(rank=int(match["rank"]), role=match["role"])

    @classmethod
    def from_metadata(cls, args: dict[str, Any], fallback: ProcessInfo) -> ProcessInfo:
        """From the ``args`` of a ``process_name`` metadata event.

        AReaL's tracer names its process ``"[role] Rank N, Process"`` and puts
        no rank or role in these args: they are read from the name then.
        """
        rank = args.get("rank")
        role = args.get("role")
        if rank is None and role is None:
            from ._areal import process_from_name

            rank, role = process_from_name(args.get("name"))
        return cls(
            rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else fallback.rank,
            role=str(role) if role else fallback.role,
            run_id=_opt_str(args.get("run_id")),
            host=_opt_str(args.get("host")),
            name=_opt_str(args.get("name")),
        )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


_SPARE_FILES = 32  # descriptors besides the inputs: stdio, the output, captures, imports


def _unchanged() -> None:
    return None


def allow_open_files(count: int, prog: str) -> Callable[[], None]:
    """Make sure *count* input files can be open at once, as a merge of them keeps them.

    The soft ``RLIMIT_NOFILE`` (``ulimit -n``, often 1024) is raised towards the
    hard limit when it is too low; past the hard limit the command is refused
    with a message that says how to raise it. Where the platform has no such
    limit (no :mod:`resource` module) nothing is checked.

    Returns:
        A function that puts the soft limit back as it was (call it once the
        files are read: a library caller's limit is left as it found it).

    Raises:
        CliError: the hard limit is too low for *count* inputs.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return _unchanged
    needed = count + _SPARE_FILES
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - the limit cannot be read
        return _unchanged
    infinity = resource.RLIM_INFINITY
    if soft == infinity or soft >= needed:
        return _unchanged
    wanted = needed if hard == infinity else min(needed, hard)
    previous = soft

    def restore() -> None:
        try:
            now, now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if now == wanted:  # not changed since by someone else
                resource.setrlimit(resource.RLIMIT_NOFILE, (previous, now_hard))
        except (OSError, ValueError):  # pragma: no cover - the limit cannot be set back
            pass

    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        soft = wanted
    except (OSError, ValueError):
        pass
    if soft < needed:
        restore()
        raise CliError(
            f"{count} input files are read at once (merged by time), but this process may "
            f"open only {soft} files (RLIMIT_NOFILE, hard limit {hard}); raise the limit "
            f"with ulimit -n {needed} before running {prog} (the hard limit is raised in "
            "/etc/security/limits.conf, or with docker run --ulimit nofile=...)"
        )
    return restore


def file_size(paths: Sequence[Path]) -> int:
    """Total size of *paths* in bytes (for the progress bar)."""
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    return total


class Origins:
    """One origin per (input file, pid): the process that wrote an event.

    Example:
        >>> origins = Origins([Path("traces-r1.jsonl")])
        >>> origins.origin(0, 4242), origins.label(0)
        (0, 'r1')
    """

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)
        self._ids: dict[tuple[int, object], int] = {}
        self._meta: dict[tuple[int, object], ProcessInfo] = {}
        self.infos: list[ProcessInfo] = []
        self.keys: list[tuple[int, object]] = []
        self._labels: list[str] = []  # per origin, made on first use of label()

    def set_metadata(self, file_index: int, pid: object, args: object) -> None:
        """Record a ``process_name`` metadata event's ``args`` for *pid* in this file."""
        if isinstance(args, dict):
            fallback = ProcessInfo.from_file_name(self.paths[file_index].name)
            self._meta[(file_index, pid)] = ProcessInfo.from_metadata(args, fallback)

    def origin(self, file_index: int, pid: object) -> int:
        """The origin id of *pid* in the file at *file_index* (made on first use)."""
        key = (file_index, pid)
        found = self._ids.get(key)
        if found is None:
            info = self._meta.get(key) or ProcessInfo.from_file_name(self.paths[file_index].name)
            found = self._ids[key] = len(self.infos)
            self.infos.append(info)
            self.keys.append(key)
        return found

    def label(self, origin: int) -> str:
        """``"r0"``, ``"driver r0"``; the pid is added when two processes share a label.

        The labels of all origins are made at once, on the first call after an
        origin was added (one pass, not one per call).
        """
        labels = self._labels
        if len(labels) != len(self.infos):
            labels[:] = self._make_labels()
        return labels[origin]

    def _make_labels(self) -> list[str]:
        bases = [info.label for info in self.infos]
        counts = Counter(bases)
        labels = []
        for origin, base in enumerate(bases):
            label = self.paths[self.keys[origin][0]].name if base == "?" else base
            if counts[base] > 1:
                label += f" pid {self.keys[origin][1]}"
            labels.append(label)
        return labels
