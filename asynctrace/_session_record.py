"""A session record: the live record a tracer keeps, and the JSON object written for it.

The tracer (:mod:`asynctrace._session_tracer`) changes a :class:`Record`
only while the session is live; once finalized, the writer
(:mod:`asynctrace._session_writer`) turns it into one JSON line
(:mod:`asynctrace._session_lines`) from :func:`record_dict` and releases it.
"""

from __future__ import annotations

import math
from typing import Any, Final

from ._session_names import redacted_name

__all__ = ["Record", "merge_payload", "record_dict"]

_NS: Final = 1e9


def _task_id_field(task_id: int | str | None) -> int | str | None:
    """A record's ``task_id``: a str (a subclass as the plain str it holds) redacted
    and bounded as :func:`redacted_name` makes it, as ``rl.task_id`` is on spans."""
    if type(task_id) is str:
        return redacted_name(task_id, count=True)
    if isinstance(task_id, str):
        return redacted_name(str.__str__(task_id), count=True)
    return task_id


class Record:
    """One live session.

    ``runs`` is flat, three slots per execution: ``phase, start_ns, end_ns``
    (``end_ns`` is ``None`` while the execution is open). One list per session
    instead of a dict of lists of lists keeps sessions cheap to make and to
    collect. ``payloads`` holds what callers attached, made on first use:
    key ``-1`` for the session, an execution's handle (its index in ``runs``)
    for that execution.
    """

    __slots__ = (
        "counters",
        "finalized_ns",
        "payloads",
        "reason",
        "runs",
        "session_id",
        "status",
        "submit_ns",
        "task_id",
    )

    status: str
    reason: str | None
    finalized_ns: int

    def __init__(self, session_id: str, task_id: int | str | None, submit_ns: int) -> None:
        self.session_id = session_id
        self.task_id = task_id
        self.submit_ns = submit_ns
        self.runs: list[Any] = []
        self.counters: dict[str, float] | None = None  # made on first use
        self.payloads: dict[int, dict[str, Any]] | None = None  # made on first use
        # status, reason and finalized_ns are set once, by finalization (see
        # SessionWriter.add), after which nothing else touches the record.


def merge_payload(record: Record, key: int, payload: dict[str, Any]) -> None:
    """Add *payload* to the record's payload *key* (-1: the session; else an execution)."""
    payloads = record.payloads
    if payloads is None:
        record.payloads = {key: dict(payload)}
    elif key in payloads:
        payloads[key].update(payload)
    else:
        payloads[key] = dict(payload)


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of intervals: overlapping executions count once."""
    total = 0
    current_start = current_end = None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None and current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        elif end > current_end:
            current_end = end
    if current_end is not None and current_start is not None:
        total += current_end - current_start
    return total


def record_dict(
    record: Record,
    status: str,
    reason: str | None,
    finalized_ns: int,
    *,
    rank: int,
    role: str | None,
    run_id: str,
    style: str = "asynctrace",
) -> dict[str, Any]:
    """The JSON object written for one finished session.

    Executions still open at finalization end at ``finalized_ts`` and are
    flagged ``truncated``; every execution is clipped to
    ``[submit_ts, finalized_ts]``, and ``<phase>_s`` is the length of the union
    of its executions, so it never exceeds ``total_s``.

    With *style* ``"areal"`` (see :meth:`SessionTracer.set_record_style`), a
    numeric session id is written as a JSON integer, and a ``pending`` session
    (never finalized: written at shutdown, or evicted) as AReaL writes one: no
    ``finalized_ts`` and no ``total_s``, an execution still open has
    ``end_ts`` ``null``, and ``<phase>_s`` counts the ended executions only
    (left out when none ended).
    """
    submit = record.submit_ns
    task_id = record.task_id
    session_id: Any = record.session_id
    unfinished = False
    if style == "areal":
        if session_id.isdigit():
            session_id = int(session_id)
        unfinished = status == "pending"
    finalized = max(finalized_ns, submit)
    out: dict[str, Any] = {
        "run_id": run_id,
        "task_id": _task_id_field(task_id),
        "session_id": session_id,
        "rank": rank,
        "role": role,
        "status": status,
        "reason": reason,
        "submit_ts": submit / _NS,
    }
    if not unfinished:
        out["finalized_ts"] = finalized / _NS
        out["total_s"] = (finalized - submit) / _NS
    _add_phases(out, record, submit, None if unfinished else finalized, open_null=style == "areal")
    return out


def _add_phases(
    out: dict[str, Any],
    record: Record,
    submit: int,
    finalized: int | None,
    *,
    open_null: bool = False,
) -> None:
    """The phases, ``<phase>_s``, counters and payload of *record* into *out*.

    Each execution is clamped into the session (from *submit* to *finalized*);
    one still open ends at *finalized* as ``truncated``. With *finalized*
    ``None`` (a never-finalized session in AReaL's style) an open execution has
    ``end_ts`` ``null`` and counts in no ``<phase>_s``.
    """
    phases: dict[str, list[dict[str, Any]]] = {}
    intervals: dict[str, list[tuple[int, int]]] = {}
    runs = record.runs
    payloads = record.payloads or {}
    for handle in range(0, len(runs), 3):
        name, start_raw, end_raw = runs[handle : handle + 3]
        start = max(start_raw, submit)
        if finalized is not None:
            start = min(start, finalized)
            if end_raw is not None:
                end: int | None = min(max(end_raw, start), finalized)
            else:  # AReaL's style: an execution open at finalization never ended
                end = None if open_null else finalized
        else:
            end = None if end_raw is None else max(end_raw, start)
        execution: dict[str, Any] = {
            "start_ts": start / _NS,
            "end_ts": None if end is None else end / _NS,
            "truncated": finalized is not None and end_raw is None and not open_null,
        }
        if end is not None:
            intervals.setdefault(name, []).append((start, end))
        if handle in payloads:
            execution["payload"] = payloads[handle]  # plain JSON values (made at the call)
        phases.setdefault(name, []).append(execution)
    for name, spans in intervals.items():
        out[f"{name}_s"] = _union_ns(spans) / _NS
    out["phases"] = phases
    out["counters"] = _counters(record.counters)
    out["payload"] = payloads.get(-1, {})


def _counters(counters: dict[str, float] | None) -> dict[str, Any]:
    """A copy, names redacted; a value JSON cannot hold (an infinite sum) is written as
    a string. Names that redact alike (``token=a``, ``token=b``) add up."""
    if not counters:
        return {}
    sums: dict[str, Any] = {}
    for name, value in counters.items():
        key = redacted_name(name, count=True)
        sums[key] = _add(sums[key], value) if key in sums else value
    return {k: _counter_value(v) for k, v in sums.items()}


def _add(total: Any, value: Any) -> Any:
    """``total + value``; an int sum past a float's range becomes an infinity."""
    try:
        return total + value
    except OverflowError:
        big = total if type(total) is int else value
        return math.inf if big > 0 else -math.inf


def _counter_value(value: Any) -> Any:
    if type(value) is int:  # any size: JSON holds it
        return value
    try:
        if math.isfinite(value):
            return value
    except (TypeError, OverflowError):
        pass
    return repr(value)
