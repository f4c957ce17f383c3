"""The rollup's intake: events and spans checked, keyed by trace and span id, accounted."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

from ._builtin_groups import LOOP_STALL
from ._rollup_notes import _TRACE_LIMIT
from ._rollup_spans import _BUCKET_INDEX as _BUCKET_TABLE
from ._rollup_spans import _BUCKETED, _HAS_ITERATION, RollupSpans
from ._rollup_tree import Entry, as_iteration
from ._scopes import _INT64_MAX as _I64_MAX
from ._scopes import _INT64_MIN as _I64_MIN

__all__ = ["RollupIntake"]

_INT_HIGH: Final = int(sys.float_info.max)  # integer times past it hold in no float
_INT_LOW: Final = -_INT_HIGH
_NAMES_LIMIT: Final = 65536
# Bound here, not imported: a method call on an imported name compiles as a module's
# attribute (a bound method made per call), and _account calls its get per span.
_BUCKET_INDEX: Final = _BUCKET_TABLE


class RollupIntake(RollupSpans):
    """How a rollup takes events (:meth:`add`) and spans (:meth:`add_span`) in."""

    _sibling: Entry
    _traces: dict[str, int]
    _last_trace: Any
    _last_high: int | None
    _names: dict[str, str]
    _spans: int
    _without_ids: int
    _bad_ids: int
    _duplicates: int

    def add(self, event: dict[str, Any], origin: int = 0) -> None:
        """Account one complete event (other phases are ignored).

        Events without a ``ts`` (or with a ``ts`` or ``dur`` that is not a finite
        number, or times no float holds), a ``trace_id`` (a non-empty string) or
        hex span ids are counted in ``without_ids``;
        a span or parent id outside 0 .. 2**64 - 1 in ``bad_ids`` (either would
        stand for another trace's span).
        """
        if event.get("ph") != "X":
            return
        args = event.get("args")
        if args.__class__ is not dict:
            self._without_ids += 1
            return
        assert isinstance(args, dict)
        span_id: Any = args.get("span_id")
        trace_id: Any = args.get("trace_id")
        try:
            start = event["ts"]
            end = start + event.get("dur", 0)
            if end.__class__ is int:  # both ints (an int and a float make a float)
                # Each of start, end and the duration within what a float holds (exact:
                # |a + b| and |a - b| bound |a| and |b|), as the sums and the grace need.
                if not (
                    _INT_LOW <= end + start <= _INT_HIGH and _INT_LOW <= end - start <= _INT_HIGH
                ):
                    raise ValueError(end)
            elif not -1e999 < end - start < 1e999:  # NaN or infinite (1e999 is inf)
                raise ValueError(end)
            sid = int(span_id, 16)
            parent_id: Any = args.get("parent_span_id")
            pid = int(parent_id, 16) if parent_id else None
        except (KeyError, TypeError, ValueError, OverflowError):  # (an int no float holds)
            self._without_ids += 1
            return
        if sid >> 64 or (pid is not None and pid >> 64):
            # Negative ("-1") or past 64 bits: it would take the trace's bits, another
            # trace's span id (x >> 64 is 0 exactly for 0 <= x < 2**64).
            self._bad_ids += 1
            return
        # The last event's trace (a str: only those are kept there), else looked up.
        high = self._last_high if trace_id == self._last_trace else self._trace_high(trace_id)
        if high is None:  # no trace id: its span ids would name another trace's spans
            self._without_ids += 1
            return
        key = sid | high
        pkey = pid | high if pid is not None else None
        self._account(event.get("name"), key, pkey, start, end, args, event.get("cat"), origin)

    def add_span(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        parent_id: int,
        start: float,
        end: float,
        attributes: Mapping[str, Any],
        cat: Any,
        origin: int = 0,
        remote: bool = False,
    ) -> None:
        """Account one span given by its fields (the in-process driver).

        The same as :meth:`add` of the Chrome event the chrome exporter writes
        for it: *start* and *end* in µs as written (``ns // 1000``, the end
        never before the start), *cat* the event's category. *remote*: the
        parent is another process's span (remote, and not open here), so it
        never arrives: the span is settled at once as one whose parent is
        missing (what :meth:`finish` does for a parent that never arrived).
        A span whose *start* or *end* is not a finite number (or is an integer
        no float holds) is counted in ``without_ids``, as :meth:`add` counts
        the event the exporter writes for it (its ``dur`` written ``null``).
        """
        first: Any = start  # ints too (a float annotation takes them)
        last: Any = end
        try:
            if last.__class__ is int and first.__class__ is int:  # what a float holds
                if not (
                    _INT_LOW <= last + first <= _INT_HIGH and _INT_LOW <= last - first <= _INT_HIGH
                ):
                    raise ValueError(end)
            elif not -1e999 < last - first < 1e999:  # NaN or infinite (1e999 is inf)
                raise ValueError(end)
        except (TypeError, ValueError, OverflowError):
            self._without_ids += 1
            return
        key = span_id | trace_id << 64
        pkey = parent_id | trace_id << 64 if parent_id else None
        self._account(name, key, pkey, start, end, attributes, cat, origin, remote)

    def _account(
        self,
        name: Any,
        key: int,
        pkey: int | None,
        start: float,
        end: float,
        args: Mapping[str, Any],
        cat: Any,
        origin: int,
        remote: bool = False,
    ) -> None:
        if key in self._home:
            self._duplicates += 1
            return
        if remote and pkey is not None and pkey not in self._home:
            self._remote_wait(pkey, end)
        remote = False  # waited for like any parent, until its deadline (_seal)
        if end > self._next_seal:
            self._seal(end)
        self._spans += 1
        if name.__class__ is not str:  # any other name is its text, as the trace file writes it
            name = str(name)
        interned = self._names.get(name)
        name = interned if interned is not None else self._intern(name)
        bucket: Any = args.get("rl.bucket")
        iteration = args.get("rl.iteration")
        if iteration is not None and (
            iteration.__class__ is not int or not _I64_MIN <= iteration <= _I64_MAX
        ):
            iteration = self._checked_iteration(iteration, name)
        group = args.get("asynctrace.group")
        if group == LOOP_STALL and bucket is None:
            self._stall(name, key, None if remote else pkey, start, end)
            return
        group_step = group == "step" or cat == "step"  # (one of no duration: _finished)
        if bucket is not None and pkey is not None and not group_step and not remote:
            # _span's common case, inline (most spans): a bucketed leaf whose parent is
            # still open and whose own children, if any, have not arrived.
            index = _BUCKET_INDEX.get(bucket, -1) if isinstance(bucket, str) else -1
            pending, home = self._pending, self._home
            stubs = self._stubs  # evicted waits' candidates: their parent takes _span
            gone = self._gone  # evicted waits' bucketed spans: their parent takes _span
            if (
                index >= 0
                and key not in pending
                and pkey not in home
                and (not stubs or key not in stubs)
                and (not gone or key not in gone)
            ):
                target = pending.get(pkey)
                if target is None:
                    target = self._wait(pkey)
                target.leaves.append((start, end, index, name, key))
                flags = _HAS_ITERATION | _BUCKETED if iteration is not None else _BUCKETED
                entry = self._sibling  # a group is one parent's: the same group, same pkey
                if entry[1] is not target or entry[3] is not name or entry[2] != flags:
                    entry = self._sibling = (pkey, target, flags, name)
                home[key] = entry  # _remember, inline
                order = self._order
                order.append(key)
                if len(order) > self._window:
                    home.pop(order.popleft(), None)
                self._load += 1
                if self._load > self._limit:
                    self._evict()
                return
        self._span(name, key, pkey, start, end, bucket, iteration, group_step, origin, remote)

    def _checked_iteration(self, value: Any, name: str) -> int | None:
        """*value* as an ``rl.iteration`` (:func:`as_iteration`); one that is not an integer
        (a number the tracer provider wrote as its text, ``"1"``) is counted: its
        span is no step by it, not silently."""
        iteration = as_iteration(value)
        if iteration is None:
            self.bad_iterations += 1
            if self._bad_iteration_first is None:
                self._bad_iteration_first = f"{name!r}: {value!r} ({type(value).__name__})"[:200]
        return iteration

    def _trace_high(self, trace_id: Any) -> int | None:
        """The key bits of *trace_id* (above the span id's 64): the id itself when it is
        32 lowercase hex digits, else an index in the table of other ids; ``None`` for
        no trace id (missing, empty, or not a string)."""
        if trace_id.__class__ is not str or not trace_id:
            return None
        high = None
        if trace_id.__class__ is str and len(trace_id) == 32:
            try:
                value = int(trace_id, 16)
            except ValueError:
                value = -1
            if value >= 0 and f"{value:032x}" == trace_id:
                high = value << 64
        if high is None:
            index = self._traces.get(trace_id)
            if index is None:
                index = self._traces[trace_id] = len(self._trace_ids)
                self._trace_ids.append(trace_id)
            high = (_TRACE_LIMIT | index) << 64
        self._last_trace, self._last_high = trace_id, high
        return high

    def _intern(self, name: str) -> str:
        found = self._names.get(name)
        if found is not None:
            return found
        if len(self._names) < _NAMES_LIMIT:
            self._names[name] = name
        return name
