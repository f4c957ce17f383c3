"""A session record's JSON line: encoded in bulk, each line within the longest a reader takes."""

from __future__ import annotations

from typing import Any

from ._jsonl import MAX_LINE_BYTES, encode_lines
from ._payloads import _count_cut
from ._session_record import Record, record_dict

__all__ = ["encode_records", "record_json"]


def record_json(*args: Any, **kwargs: Any) -> str:
    """:func:`record_dict` as one JSON line (with the trailing newline).

    Raises:
        ValueError: the record cannot be written as JSON.
    """
    data, skipped = encode_lines([record_dict(*args, **kwargs)])
    if skipped:
        raise ValueError("the session record cannot be written as JSON")
    return data.decode()


def encode_records(records: list[Record], meta: dict[str, Any]) -> tuple[bytes, int, int]:
    """The JSON lines of finished records, how many could not be written, and how many
    of those were too long.

    msgspec, when installed, encodes them (about ten times faster than the
    standard library on these mostly-float records). It would write a
    non-finite float as null: counters, the only values that can be one, are
    made finite first. A
    record that cannot be turned into a dict costs only itself.

    No line is longer than :data:`MAX_LINE_BYTES`: a record's payloads are
    each bounded, but many executions may add up past it. Such a record
    loses its largest payloads first, each replaced by
    ``{"<truncated>": "<truncated: a payload of N bytes ...>"}`` and counted in
    :func:`asynctrace._payloads.truncated_payloads`, until it fits; one that
    does not fit even with none is not written (the third count).
    """
    dicts = []
    broken = 0
    for r in records:
        try:
            dicts.append(record_dict(r, r.status, r.reason, r.finalized_ns, **meta))
        except Exception:
            broken += 1
    data, skipped = encode_lines(dicts)
    if len(data) <= MAX_LINE_BYTES:  # no line can be longer than all of them
        return data, broken + len(skipped), 0
    return _fit_lines(data, dicts, skipped, broken)


def _fit_lines(
    data: bytes, dicts: list[dict[str, Any]], skipped: list[int], broken: int
) -> tuple[bytes, int, int]:
    """:func:`encode_records` past its fast path: the lines too long cut to fit, or left out."""
    lines = data.split(b"\n")[:-1]  # JSON escapes a newline in a string: one per record
    left_out = set(skipped)
    written = [index for index in range(len(dicts)) if index not in left_out]
    out: list[bytes] = []
    overlong = 0
    for index, line in zip(written, lines, strict=True):
        if len(line) > MAX_LINE_BYTES:
            fitted = _fit(dicts[index], len(line))
            if fitted is None:
                overlong += 1
                continue
            line = fitted
        out.append(line)
    data = b"".join(line + b"\n" for line in out)
    return data, broken + len(skipped) + overlong, overlong


def _fit(record: dict[str, Any], size: int) -> bytes | None:
    """*record* (its line *size* bytes long) as one line within :data:`MAX_LINE_BYTES`,
    its largest payloads replaced by a marker; ``None`` if it cannot fit."""
    holders: list[dict[str, Any]] = [
        execution
        for executions in record["phases"].values()
        for execution in executions
        if "payload" in execution
    ]
    holders.append(record)  # the session's payload
    sizes = []
    for position, holder in enumerate(holders):
        encoded, failed = encode_lines([holder["payload"]])
        sizes.append((len(encoded) - 1 if not failed else 0, position))
    sizes.sort(reverse=True)
    for length, position in sizes:
        if size <= MAX_LINE_BYTES:
            break
        marker = {
            "<truncated>": f"<truncated: a payload of {length} bytes, left out to keep "
            f"the record within {MAX_LINE_BYTES} bytes>"
        }
        holders[position]["payload"] = marker
        size -= length - (len(encode_lines([marker])[0]) - 1)
        _count_cut()
    encoded, failed = encode_lines([record])
    if failed or len(encoded) - 1 > MAX_LINE_BYTES:
        return None
    return encoded[:-1]
