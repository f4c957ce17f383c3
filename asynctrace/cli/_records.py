"""Streaming readers for asynctrace's JSON-lines files: traces and session records.

Files are read line by line, so memory does not grow with their size. A line that
is not a JSON object (the torn last line of a killed process, say), or a trace
event whose fields have the wrong types (a ``pid`` that is a list, a ``ts``
that is a string), is skipped and counted. A file none of whose lines is
usable (one torn line, say) is skipped: its lines are counted as malformed and
the file is named in the summary; the commands refuse the input only when
nothing at all could be read. Damaged gzip data (a CRC error, a corrupt
deflate block) ends its file there: the lines read before the damage are kept,
the rest of that file is skipped and the file is named in the summary. A UTF-8
byte order mark at the start of a file is ignored. Lines ending in a comma are
read too, which covers a Chrome JSON document written one event per line, such
as the output of ``asynctrace convert`` (its header and trailer lines are not
counted; a line only shaped like one, a torn document, is, and so is a header carrying
events as the file's last line, a one-line document cut after an event, whose events are
kept), and a line that is a whole
``{"traceEvents": [...]}`` document (``json.dump``'s output) gives its events;
any other whole-document JSON file of up to 64 MiB is loaded at once as a
fallback. A line longer than 64 MiB is skipped and counted without being parsed
or held whole, so memory stays bounded whatever a file holds.

An input that is not a regular file (a pipe) is read once, from its start:
:func:`iter_file` reads it line by line as it does a file, but cannot load it
again as one JSON document.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ._common import CliError, Progress, dumps, loads
from ._documents import MAX_DOCUMENT, whole_document
from ._events import event_ok, negative_dur, usable_events
from ._inputs import BOM, open_input, skip_rest
from ._read_stats import CUT_BEFORE_EVENTS, DAMAGED, SAMPLES, ReadStats, count_malformed

__all__ = ["iter_file", "iter_records"]

_BRACKETS = (b"[", b"]", b"]}")  # a JSON document's own lines: its array opened, closed
_PROGRESS_EVERY = 0x3FFF  # lines between two progress updates
_MAX_LINE = MAX_DOCUMENT  # bytes: a longer line is skipped (and counted), never parsed


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
        if len(self.samples) < SAMPLES:
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
    torn = 0  # the line of a header carrying events, while no line follows it
    cut_document = False  # the last line was such a header: a one-line document cut short
    unclosed = False  # a document's array opened on a line of its own and not closed since
    damage = ""
    try:
        stream = open_input(path)  # closed below, also on early exit
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    try:
        lines = iter(functools.partial(stream.readline, _MAX_LINE + 1), b"")
        head = stream.readline(len(BOM))
        if head == BOM:  # an editor's byte order mark: not part of the JSON
            head = stream.readline(_MAX_LINE + 1)  # the line after it, as any other
            pending_bytes = len(BOM)
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
                pending_bytes += skip_rest(stream)
                if not first:
                    first = line[:64].lstrip()[:1]
                skipped.overlong += 1
                skipped.at(f"{path.name}:{lineno}")
                continue
            raw = line.strip()
            if not raw:
                continue
            torn = 0
            if not first:
                first = raw[:1]
            if raw[-1] == 44:  # ",": one event per line of a JSON document
                raw = raw[:-1].rstrip()
            try:
                obj = loads(raw)
            except ValueError:
                events = _framing(raw)
                if events is None:
                    skipped.not_json += 1
                    skipped.at(f"{path.name}:{lineno}")
                    continue
                if not events:  # the document's header or trailer: no event on it
                    unclosed = raw[:1] in b"{["  # opened, or (a trailer, "]") closed
                    continue
                obj = {"traceEvents": events}  # a header with the first events on its line
                torn = lineno  # unless a line follows: a one-line document cut short
            if obj.__class__ is not dict:
                skipped.not_object += 1
                skipped.at(f"{path.name}:{lineno}")
                continue
            if "ph" in obj:
                if not event_ok(obj):
                    if negative_dur(obj):
                        skipped.negative += 1
                    else:
                        skipped.wrong_types += 1
                    skipped.at(f"{path.name}:{lineno}")
                    continue
            elif obj.get("traceEvents").__class__ is list:  # a whole document on one line
                kept, left_out = usable_events(obj["traceEvents"])
                del obj
                if left_out:
                    skipped.items += left_out
                    skipped.at(f"{path.name}:{lineno} ({left_out} unusable events)")
                    if not kept:
                        skipped.documents += 1
                if not kept:
                    torn = 0  # counted as a document with no usable event
                valid += len(kept)
                for event in kept:
                    yield event, dumps(event)
                continue
            valid += 1
            yield obj, raw
        if torn:  # the events on it are kept, the cut is counted
            cut_document = True
            skipped.at(f"{path.name}:{torn} (traceEvents document cut short)")
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
    bad = skipped.lines - skipped.documents + skipped.items + int(cut_short) + int(cut_document)
    if valid:
        stats.records += valid
        count_malformed(stats, bad, skipped.samples)
        if damage:
            stats.damaged.append((path, damage))
        return
    if damage:  # nothing usable before the damage: the file is not read at all
        count_malformed(stats, bad, skipped.samples)
        stats.unusable.append((path, f"{DAMAGED} {damage}"))
        return
    if not first and not cut_short:
        stats.empty.append(path.name)
        return
    yield from _fallback(path, stats, skipped, first, bad, cut_short, unclosed)


def _framing(raw: bytes) -> list[Any] | None:
    """The events on a line of a Chrome JSON document's frame (none, mostly), or ``None``
    when *raw* is no such line.

    The frame's lines are ``[`` and ``]``, ``]}``, a header that opens the event
    array (``{"traceEvents":[``, as ``convert`` writes it, the first events
    possibly on it) and a trailer that closes it and gives the document's other
    keys (``],"displayTimeUnit":"ms","otherData":{...}}``). Only a line that
    completes into JSON is one of them: a torn header, trailer or one-line
    document is not, and is counted as malformed.
    """
    if raw in _BRACKETS:
        return []
    try:
        if raw[:1] == b"{":  # a header: complete once its array and object are closed
            document = loads(raw + b"]}")
            if document.__class__ is dict and document.get("traceEvents").__class__ is list:
                events: list[Any] = document["traceEvents"]
                return events
        elif raw[:2] == b"]," and loads(b"{" + raw[2:]).__class__ is dict:
            return []  # a trailer: the rest of the object, after the array
    except (ValueError, RecursionError):
        pass
    return None


def _fallback(
    path: Path,
    stats: ReadStats,
    skipped: _Skipped,
    first: bytes,
    bad: int,
    cut_short: bool,
    unclosed: bool = False,
) -> Iterator[tuple[dict[str, Any], bytes]]:
    """A file with no usable line: read as one JSON document, else counted as unusable.

    *unclosed*: its last frame line opened the event array (a document cut
    short before its first event, a writer killed as it began).
    """
    document = whole_document(path) if first in (b"{", b"[") else None
    if isinstance(document, tuple):
        kept, left_out = document
        if left_out:
            count_malformed(stats, left_out, [f"{path.name}: {left_out} unusable events"])
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
    if not bad and unclosed:  # ``{"traceEvents": [`` and nothing after it
        stats.unusable.append((path, CUT_BEFORE_EVENTS))
        return
    if not bad:  # structural lines only (``[`` and ``]``): an empty document
        stats.empty.append(path.name)
        return
    count_malformed(stats, bad, skipped.samples)
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
