"""Chrome events as JSON lines: one msgspec call per batch, within the readers' line limit.

A span's complete event is a :class:`Complete` struct, any other event a
dict. Non-finite floats are written as text (``"nan"``), a value no encoder
takes is left out and counted (:func:`salvaged`), and a line over
:data:`~asynctrace._jsonl.MAX_LINE_BYTES` has its largest values cut
(:func:`shortened`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

from .._errors import MissingExtraError
from .._jsonl import MAX_LINE_BYTES, encode_lines

try:
    import msgspec
except ImportError as exc:  # installed by the sdk extra, like the SDK itself
    raise MissingExtraError("sdk", "msgspec") from exc

__all__ = [
    "DROPPED_ATTRIBUTES",
    "Complete",
    "encode",
    "salvaged",
    "shortened",
    "spans_in_lines",
]


class Complete(msgspec.Struct, gc=False):
    """A complete ("X") event; encoded with its fields in this order."""

    ph: str
    name: str
    cat: str
    ts: int
    dur: int
    pid: int
    tid: int
    args: dict[str, Any]


def encode(events: list[Any], nonfinite: bool = True) -> tuple[bytes, list[int]]:
    """JSON lines, and the indexes of the events left out (could not be encoded at all).

    msgspec writes NaN and infinities as ``null``. OpenTelemetry attributes
    never hold ``None`` except inside sequences, so a batch without ``null``
    anywhere (the common case) is written as encoded; otherwise it is encoded
    again with non-finite floats turned into strings (``"nan"``) first.
    With *nonfinite* false (no span of the batch can hold one: see
    :data:`asynctrace._fast._span.NONFINITE`), the bytes are not searched.
    """
    data, skipped = encode_lines(events, _finite_event)
    if not nonfinite or b"null" not in data:
        return data, skipped
    try:
        finite = [_finite_event(event) for event in events]
    except Exception:  # not expected: keep the nulls rather than lose the batch
        return data, skipped
    return encode_lines(finite, _finite_event)


def _finite_event(event: Any) -> Any:
    """*event* with non-finite floats in its ``args`` turned into strings."""
    if isinstance(event, Complete):
        return msgspec.structs.replace(event, args=_finite_args(event.args))
    args = event.get("args")
    if not isinstance(args, dict):
        return event
    return {**event, "args": _finite_args(args)}


def _finite_args(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _finite(v) for k, v in args.items()}


def _finite(value: Any) -> Any:
    """*value* with non-finite floats as their text (``'nan'``), at any depth."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return [_finite(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    return value


DROPPED_ATTRIBUTES = "otel.dropped_attributes_count"


def salvaged(event: Any) -> Any:
    """*event* without the ``args`` values no encoder takes, counted in its ``args``.

    An int too long to be written as text, or an object whose ``str()``
    raises: that value is left out and counted in
    ``otel.dropped_attributes_count``, as the SDK conversion drops and counts
    it; the event and its other values are kept.
    """
    args = event.args if event.__class__ is Complete else event.get("args")
    if not isinstance(args, dict):
        return event
    kept: dict[str, Any] = {}
    lost = 0
    for key, value in args.items():
        try:
            _, bad = encode_lines([{key: value}], _finite_args)
        except Exception:  # not expected: the value is left out all the same
            bad = [0]
        if bad:
            lost += 1
        else:
            kept[key] = value
    if not lost:
        return event
    before = kept.get(DROPPED_ATTRIBUTES)
    kept[DROPPED_ATTRIBUTES] = lost + (before if before.__class__ is int else 0)
    if event.__class__ is Complete:
        return msgspec.structs.replace(event, args=kept)
    return {**event, "args": kept}


_NOTE = "...<truncated {} chars>"


def shortened(event: Any, size: int) -> tuple[Any, bytes] | None:
    """*event* (a line of *size* bytes) cut to at most :data:`MAX_LINE_BYTES`, and its line.

    Its largest values (``args`` values, its name, its category) are cut
    first, each to what the line can hold, a string ending with
    ``...<truncated N chars>`` (a value that is not a string: its JSON text,
    cut). ``None`` if it cannot be made that short.
    """
    struct = event.__class__ is Complete
    if struct:
        fields: dict[str, Any] = {"name": event.name, "cat": event.cat}
        args = dict(event.args)
    else:
        fields = dict(event)
        found = fields.pop("args", None)
        args = dict(found) if isinstance(found, dict) else {}
    sized = [
        (_json_size(value), top, key)
        for top, values in ((True, fields), (False, args))
        for key, value in values.items()
        if top is False or value.__class__ is str
    ]
    over = size - MAX_LINE_BYTES
    for value_size, top, key in sorted(sized, key=operator.itemgetter(0), reverse=True):
        if over <= 0:
            break
        holder = fields if top else args
        value = holder[key]
        text = value if value.__class__ is str else _json_text(value)
        holder[key] = cut = _cut_text(text, value_size - over)
        over -= value_size - _json_size(cut)
    if struct:
        event = msgspec.structs.replace(event, name=fields["name"], cat=fields["cat"], args=args)
    else:
        event = {**fields, "args": args} if "args" in event else fields
    line, bad = encode([event])
    if bad or len(line) > MAX_LINE_BYTES:
        return None
    return event, line[:-1]


def _json_size(value: Any) -> int:
    """Bytes of *value* as JSON (0 if it cannot be encoded)."""
    data, bad = encode_lines([value], _finite)
    return 0 if bad else len(data) - 1


def _json_text(value: Any) -> str:
    data, bad = encode_lines([value], _finite)
    return "" if bad else data[:-1].decode("utf-8", "replace")


def _cut_text(text: str, room: int) -> str:
    """*text* cut and marked, at most *room* bytes as JSON when that holds the note."""
    size = _json_size(text)
    keep = len(text)
    for _ in range(8):  # keep shrinks by the bytes per character of what it kept
        keep = min(keep - 1, keep * (room - 64) // max(size, 1))  # a bit less than would fit
        if keep <= 0:
            break
        cut = text[:keep] + _NOTE.format(len(text) - keep)
        size = _json_size(cut)
        if size <= room:
            return cut
    return _NOTE.format(len(text))


def spans_in_lines(events: list[Any], skipped: list[int], lines: int) -> int:
    """How many spans the first *lines* lines written of *events* hold (after a failed write)."""
    left_out = set(skipped)
    done = 0
    for index, event in enumerate(events):
        if index in left_out:
            continue
        if lines <= 0:
            break
        lines -= 1
        if event.__class__ is Complete:
            done += 1
    return done
