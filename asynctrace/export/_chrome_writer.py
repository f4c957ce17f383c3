"""Chrome trace lines: spans to events, track placement and the file (writer thread).

The processor in :mod:`asynctrace.export.chrome` turns each ended span into a
tuple of its fields (:func:`span_fields`) on the hot path; everything else
happens here, on the exporter's daemon thread: each batch becomes a list of
events, encoded as JSON lines by one msgspec call
(:mod:`~asynctrace.export._chrome_encode`) and written with one ``write``.
"""

from __future__ import annotations

import logging
import operator
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from .._carriers import PLAIN_CONTEXT
from .._fast._evict import STAMP_KEYS
from .._fast._span import NONFINITE, SPAN_TYPES
from .._files import AppendFile
from .._jsonl import MAX_LINE_BYTES
from .._redact import redact_text
from .._semconv import GROUP, RL_BUCKET
from ._chrome_encode import Complete as _Complete  # (under the names export() reads)
from ._chrome_encode import encode as _encode
from ._chrome_encode import salvaged as _salvaged
from ._chrome_encode import shortened
from ._chrome_encode import spans_in_lines as _spans_in_lines
from ._chrome_metadata import owner_name, process_events, thread_name
from ._convert import finish_event
from ._tracks import TrackAssigner

__all__ = ["ChromeWriter", "NewTrack", "span_fields"]

logger = logging.getLogger("asynctrace")


# SpanContext's trace_id/span_id properties cost a Python call each; when it is
# the plain tuple _carriers checks for at import, indexing is a C call.
context_trace_id: Callable[[Any], int] = (
    operator.itemgetter(0) if PLAIN_CONTEXT else operator.attrgetter("trace_id")
)
context_span_id: Callable[[Any], int] = (
    operator.itemgetter(1) if PLAIN_CONTEXT else operator.attrgetter("span_id")
)
_INTERNAL = SpanKind.INTERNAL
_ERROR = StatusCode.ERROR
_NO_OWNER = object()
# Bounds for a track's last end in the writer's loop: before any start (an empty track)
# and after every start (no primary track at hand: place() decides).
_BEFORE_ALL = -(1 << 80)
_AFTER_ALL = 1 << 80


class NewTrack:
    """Control item: a primary track appeared (travels in the span queue)."""

    __slots__ = ("name", "tid")

    def __init__(self, tid: int, name: str) -> None:
        self.tid = tid
        self.name = name


class ChromeWriter:
    """The sink: turns queued items into lines and writes them (writer thread only)."""

    any_batch_size = True  # lines are lines: a batch of any size is written as it comes

    def __init__(
        self,
        path: Path,
        resource: dict[str, Any],
        new_tid: Callable[[], int],
        max_attribute_length: int | None = None,
        max_event_attributes: int | None = 128,
        max_event_attribute_length: int | Literal["same"] | None = "same",
    ) -> None:
        self.path = path
        self._new_tid = new_tid
        self._max_len = max_attribute_length
        self._event_limits = (
            max_event_attributes,
            max_attribute_length
            if max_event_attribute_length == "same"
            else max_event_attribute_length,
        )
        self._owners: dict[int, int] = {}  # id(task or thread) -> its track, while it lives
        # How a retired track reaches the writer thread (the processor's control queue).
        self.post: Callable[[Any], None] | None = None
        self.pid = os.getpid()
        self._file = AppendFile(path)  # a torn tail left by a killed writer is closed off
        self.lost = 0  # spans written to a file that was then deleted or replaced
        self._in_file = 0  # spans written to the file as it is now
        self.shortened = 0
        """Lines cut to :data:`MAX_LINE_BYTES` (their largest values, marked)."""
        self._resource = resource
        # Every event's args name the writer's rank (and role), as AReaL's perf_tracer
        # writes them: its converter rebuilds process and track names from these.
        role = resource.get("asynctrace.role")
        self._ident: dict[str, Any] = {"rank": resource.get("asynctrace.rank", 0)}
        if role is not None:
            self._ident["role"] = role
        # Metadata lines not yet in the file: written before the next batch's spans,
        # and kept for the next batch if a write fails before they reach the file.
        self._pending: list[dict[str, Any]] = process_events(resource, self.pid, self._ident)
        self._refs: dict[int, weakref.ref[Any]] = {}
        self._tracks = TrackAssigner(new_tid, self._track_made)
        self._last_trace_id = 0
        self._last_trace_hex = ""
        self._warned = False
        data, self._pending = self._encoded_metadata(self._pending)
        lines, error = self._file.write(data, len(self._pending))
        del self._pending[:lines]
        if error is not None:
            self._warn(f"writing {self.path} failed", error)

    def _metadata(self) -> list[dict[str, Any]]:
        """The process's and every live track's names, written again into a new file.

        Every track: the primary ones, their overflow tracks and the late spans'
        tracks; and the names not written yet (a track already retired, say).
        """
        events = process_events(self._resource, self.pid, self._ident)
        named = set()
        for tid, name in self._tracks.names():
            named.add(tid)
            events.append(thread_name(self.pid, tid, name, self._ident))
        events.extend(m for m in self._pending if "tid" in m and m["tid"] not in named)
        return events

    def _encoded_metadata(self, meta: list[dict[str, Any]]) -> tuple[bytes, list[dict[str, Any]]]:
        """*meta* as lines, and the events they hold (one that cannot be encoded left out)."""
        data, skipped = _encode(meta)
        if len(data) > MAX_LINE_BYTES:  # a task named with 64 MiB of text, say
            data = self._fit(meta, data, skipped)
        if not skipped:
            return data, meta
        self._warn("metadata could not be serialized", ValueError("left out"))
        left_out = set(skipped)
        return data, [m for i, m in enumerate(meta) if i not in left_out]

    # -- Sink API ---------------------------------------------------------------

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Write *batch* (queued spans and control items) as lines; ``(written, failed)``.

        Spans are placed on their tracks and encoded in one call; the track
        names not yet in the file go first, and the whole is one ``write``.
        A span that cannot be serialized, or whose line cannot be cut to
        :data:`MAX_LINE_BYTES`, is counted failed; one written to a file that
        was then deleted or replaced is counted in :attr:`lost`.
        """
        events: list[Any] = []  # _Complete structs and plain dicts
        append = events.append
        place = self._tracks.place
        primary = self._tracks.primary
        most = self._tracks.max_intervals
        pid = self.pid
        failed = controls = 0
        nonfinite = NONFINITE[0]  # a NaN or infinity was ever stored: search the lines
        owners = self._owners
        max_len = self._max_len
        event_limits = self._event_limits
        line: Any = None  # the primary track of the owner of the last fast-provider span
        ends: list[int] = []  # its top-level intervals' ends, and its two lists' appends
        add_start = add_end = ends.append
        last_end = _AFTER_ALL  # the end of its last interval (none: every span to place())
        span_types = SPAN_TYPES
        last_trace, last_trace_hex = self._last_trace_id, self._last_trace_hex
        last_parent, last_parent_hex = 0, ""
        last_owner: object = _NO_OWNER
        last_tid = 0
        ident = self._ident
        rank = ident["rank"]
        role = (("role", ident["role"]),) if "role" in ident else ()  # (for _add_missing)
        last_cls: type | None = None  # the last fast-provider span's class
        for item in batch:
            # A span, inline (this loop runs once per span). Ids are hex-encoded
            # with int.to_bytes().hex(), about twice as fast as a format spec.
            try:
                cls = item.__class__
                if cls is last_cls or cls in span_types:
                    # A fast-provider span: its own path, written for speed. Plain
                    # attribute loads: the interpreter specializes them for slots,
                    # far cheaper than an attrgetter of many names.
                    last_cls = cls  # the batch's spans are mostly of one class
                    owner = item._owner
                    if owner is not last_owner:
                        if line is not None:  # the last owner's intervals, bounded
                            line.bound(most)
                        last_tid = owners.get(id(owner)) or self._owner_track(owner)
                        last_owner = owner
                        line = primary.get(last_tid)  # a primary track lives as long as its owner
                        if line is not None:  # its lists change in place only: kept at hand
                            ends = line.ends
                            add_start, add_end = line.starts.append, ends.append
                            last_end = ends[-1] if ends else _BEFORE_ALL
                        else:
                            last_end = _AFTER_ALL
                    start = item._start // 1000
                    end = item._end // 1000
                    if end < start:
                        end = start
                    if last_end <= start:
                        # TrackAssigner.place's common case, inline; the bound on the
                        # track's intervals is kept once per owner and batch (below)
                        add_start(start)
                        add_end(end)
                        last_end = end
                        track = last_tid
                    else:
                        track = place(last_tid, start, end)
                        if line is not None:  # place() may have changed its intervals
                            last_end = ends[-1] if ends else _BEFORE_ALL
                    trace_id = item._trace_id
                    if trace_id is not last_trace:  # a trace's spans share its id object
                        last_trace = trace_id
                        last_trace_hex = trace_id.to_bytes(16, "big").hex()
                    # A copy and stores: cheaper than {**raw, ...}, and (measured) than an
                    # args struct per attribute key set, its keys encoded once by msgspec.
                    args = (
                        item._attributes.copy()
                        if max_len is None
                        else _truncated(item._attributes, max_len)
                    )
                    args["trace_id"] = last_trace_hex
                    args["span_id"] = item._span_id.to_bytes(8, "big").hex()
                    parent_id = item._parent_id
                    if parent_id:
                        if parent_id is not last_parent:  # siblings share the object
                            last_parent = parent_id
                            last_parent_hex = parent_id.to_bytes(8, "big").hex()
                        args["parent_span_id"] = last_parent_hex
                    elif "parent_span_id" in args:  # a root: an attribute is not its parent
                        del args["parent_span_id"]
                    args.setdefault("rank", rank)  # an attribute of that name stays as it is
                    if role:
                        _add_missing(args, role)
                    if item._status is not None or item._kind is not _INTERNAL:
                        _fast_status_and_kind(args, item._status, item._kind)
                    cat = args.get(GROUP) or args.get(RL_BUCKET) or item._tracer.scope.name
                    if cat.__class__ is not str:
                        cat = str(cat)
                    # f"{}": a str as it is, in one instruction; any other name (the span
                    # helpers do not check theirs) as its text
                    append(
                        _Complete("X", f"{item._name}", cat, start, end - start, pid, track, args)
                    )
                    if item._events:
                        nonfinite = True  # event attributes are not watched: search
                        _instant_events(item._events, cat, pid, track, events, event_limits, ident)
                    continue
                if cls is tuple:
                    nonfinite = True  # an SDK span: its attributes are not watched here
                    (name, span_id, trace_id, parent_id, start_ns, end_ns, raw, span_events,
                     error, kind, scope, category, tid) = item  # fmt: skip
                else:
                    controls += 1
                    self._control(item)
                    continue
                start = start_ns // 1000
                dur = end_ns // 1000 - start
                if dur < 0:
                    dur = 0
                end = start + dur
                sdk_line = primary.get(tid)  # not `line`: that one is the last fast span's
                if sdk_line is not None and (not sdk_line.ends or sdk_line.ends[-1] <= start):
                    sdk_line.starts.append(start)  # TrackAssigner.place's common case, inline
                    sdk_line.ends.append(end)
                    if len(sdk_line.ends) > most:
                        sdk_line.compact()
                    track = tid
                else:
                    track = place(tid, start, end)
                if trace_id != last_trace:
                    last_trace = trace_id
                    last_trace_hex = trace_id.to_bytes(16, "big").hex()
                args = raw.copy() if raw else {}
                args["trace_id"] = last_trace_hex
                args["span_id"] = span_id.to_bytes(8, "big").hex()
                if parent_id:
                    if parent_id != last_parent:  # siblings in a row share it
                        last_parent = parent_id
                        last_parent_hex = parent_id.to_bytes(8, "big").hex()
                    args["parent_span_id"] = last_parent_hex
                elif "parent_span_id" in args:  # a root: an attribute is not its parent
                    del args["parent_span_id"]
                if error is not None or kind is not None:
                    _status_and_kind(args, error, kind)
                if "rank" not in args:
                    args["rank"] = rank
                if role:
                    _add_missing(args, role)
                cat = category if category.__class__ is str else scope
                append(_Complete("X", f"{name}", cat, start, dur, pid, track, args))  # (as above)
                if span_events:
                    _instant_events(span_events, cat, pid, track, events, None, ident)
            except Exception as exc:
                failed += 1
                self._warn("a span could not be serialized; it is skipped", exc)
        if line is not None:  # the last owner's intervals, bounded
            line.bound(most)
        written = len(batch) - controls - failed
        self._last_trace_id, self._last_trace_hex = last_trace, last_trace_hex
        data, skipped = _encode(events, nonfinite)
        if skipped:  # a value no encoder takes: that value left out, not the event
            for i in skipped:
                events[i] = _salvaged(events[i])
            data, skipped = _encode(events, nonfinite)
        if len(data) > MAX_LINE_BYTES:  # only then can a line be too long for the readers
            data = self._fit(events, data, skipped)
        count = len(events) - len(skipped)  # one line per event encoded
        if skipped:
            self._warn(f"{len(skipped)} events could not be serialized", ValueError("left out"))
            lost = sum(1 for i in skipped if events[i].__class__ is _Complete)  # spans only
            written -= lost
            failed += lost
        out = self._file
        meta = self._pending
        if out.moved():  # deleted (rm -rf of the output directory), replaced, truncated, rotated
            if not out.rotated:  # renamed away intact (logrotate): its spans are not lost
                self.lost += self._in_file
            self._in_file = 0
            try:
                out.reopen()
            except OSError as exc:
                self._warn(f"opening {self.path} again failed", exc)
                return 0, written + failed
            meta = self._metadata()
        head = 0
        if meta:  # names first: a write that fails part way keeps those not written
            head_data, meta = self._encoded_metadata(meta)
            data = head_data + data
            head = len(meta)
            count += head
        lines, error = out.write(data, count)
        if head or self._pending:
            self._pending = meta[lines:]
        if error is not None:
            self._warn(f"writing {self.path} failed", error)
            done = _spans_in_lines(events, skipped, lines - head)
            failed += written - done
            written = done
        self._in_file += written
        return written, failed

    def _fit(self, events: list[Any], data: bytes, skipped: list[int]) -> bytes:
        """*data* (the lines of *events*) with none longer than :data:`MAX_LINE_BYTES`.

        An overlong line's event is cut (:func:`~._chrome_encode.shortened`) and counted in
        :attr:`shortened`; one that cannot be cut short enough is left out,
        its index added to *skipped*. Runs only for a batch over the limit.
        """
        lines = data.split(b"\n")  # one per event encoded, and the empty rest
        left_out = set(skipped)
        encoded = (i for i in range(len(events)) if i not in left_out)
        for n, index in zip(range(len(lines) - 1), encoded, strict=False):  # equal lengths
            if len(lines[n]) < MAX_LINE_BYTES:
                continue
            found = shortened(events[index], len(lines[n]) + 1)
            if found is None:
                skipped.append(index)
                lines[n] = b""
                continue
            events[index], lines[n] = found
            self.shortened += 1
            self._warn(
                f"a line over {MAX_LINE_BYTES >> 20} MiB was cut to be read back",
                ValueError("values cut"),
            )
        return b"".join([line + b"\n" for line in lines[:-1] if line])

    def _control(self, item: Any) -> None:
        """A track opened (:class:`NewTrack`) or retired (its tid)."""
        if item.__class__ is NewTrack:
            name = redact_text(item.name)  # a task named after its request's URL, say
            self._tracks.open(item.tid, name)
            self._track_made(item.tid, name)
        else:
            self._tracks.retire(item)

    def _owner_track(self, owner: object) -> int:
        """The track of a fast-provider span's task or thread, opened on first sight.

        The span holds its owner, so the owner is alive here; when it dies,
        its track is retired (a later object with the same ``id`` gets a new one).
        """
        tid = self._new_tid()
        key = id(owner)
        name = owner_name(owner) if owner is not None else "spans started before the exporter"
        self._owners[key] = tid
        self._tracks.open(tid, name)
        self._track_made(tid, name)
        owners, refs = self._owners, self._refs

        def gone(_ref: object) -> None:
            # Any thread: forget the owner at once (its id may be reused), and
            # retire the track on the writer thread, after the spans before it.
            if owners.get(key) == tid:
                owners.pop(key, None)
            refs.pop(tid, None)
            post = self.post
            if post is not None:
                post(tid)
            else:  # a writer used on its own, without a queue
                self._tracks.retire(tid)

        try:
            self._refs[tid] = weakref.ref(owner, gone)
        except TypeError:  # not weak-referenceable: the track lives on
            pass
        return tid

    def flush(self) -> bool:
        """Lines are written unbuffered, batch by batch; a flush makes them durable.

        ``False`` if the disk refused (``fdatasync`` failed): that flush fails.
        """
        error = self._file.sync()
        if error is not None:
            self._warn("the trace file could not be made durable", error)
        return error is None

    def shutdown(self) -> None:
        """Close the file."""
        self._file.close()

    # -- events -----------------------------------------------------------------

    def _track_made(self, tid: int, name: str) -> None:
        self._pending.append(thread_name(self.pid, tid, name, self._ident))

    # -- file -------------------------------------------------------------------

    def _warn(self, message: str, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "asynctrace: chrome exporter: %s (further errors are counted, not logged)",
                message,
                exc_info=exc,
            )


def _add_missing(args: dict[str, Any], items: Sequence[tuple[str, Any]]) -> None:
    """Store each of *items* in *args* unless an attribute of that name is there."""
    for key, value in items:
        if key not in args:
            args[key] = value


def _fast_status_and_kind(args: dict[str, Any], status: Any, kind: SpanKind) -> None:
    """:func:`_status_and_kind` from a fast-provider span's status and kind."""
    error = status if status is not None and status.status_code is _ERROR else None
    _status_and_kind(args, error, None if kind is _INTERNAL else kind.name)


def _status_and_kind(args: dict[str, Any], error: Any, kind: str | None) -> None:
    if error is not None:
        args["otel.status_code"] = "ERROR"
        if error.description:
            args["otel.status_description"] = error.description
    if kind is not None:
        args["otel.span_kind"] = kind


def _instant_events(
    span_events: Sequence[Any],
    cat: str,
    pid: int,
    track: int,
    events: list[Any],
    limits: tuple[int | None, int | None] | None = None,
    ident: Mapping[str, Any] | None = None,
) -> None:
    """A span's events, as instant events on its track.

    *limits* (``max_event_attributes``, ``max_attribute_length``) is given for
    fast-provider spans, whose events are limited here, as the SDK limits its
    own when they are added: the newest attributes kept, strings cut.
    *ident* (the writer's rank and role) joins each event's args.
    """
    for event in span_events:
        if getattr(event, "exception", None) is not None:
            finish_event(event)  # a fast-provider exception: its stack trace, formatted once
        ev_attrs = event.attributes
        if limits is not None and ev_attrs:
            most, length = limits
            if most is not None and len(ev_attrs) > most:
                ev_attrs = dict(islice(ev_attrs.items(), len(ev_attrs) - most, None))
            if length is not None:
                ev_attrs = _truncated(ev_attrs, length)
        events.append(
            {
                "ph": "i",
                "s": "t",
                "name": f"{event.name}",  # a name that is not a str: its text
                "cat": cat,
                "ts": event.timestamp // 1000,
                "pid": pid,
                "tid": track,
                "args": {**ident, **(ev_attrs or {})} if ident else dict(ev_attrs or {}),
            }
        )


def span_fields(
    span: ReadableSpan, tids: dict[int, int], current_tid: Callable[[], int]
) -> tuple[Any, ...]:
    """The span's fields, so the queue does not keep the span object alive.

    ``(name, span_id, trace_id, parent_span_id or 0, start_ns, end_ns,
    attributes or None, events or None, error status or None, kind name or
    None, instrumentation scope name, category, track)``; the category is the
    ``asynctrace.group`` attribute, else ``rl.bucket``; the track is the one
    recorded in *tids* when the span started (popped), else *current_tid()*.
    The attributes mapping is the ended span's own (the SDK never changes an
    ended span's attributes), encoded on the writer thread. The SDK's own
    fields are read directly (the public properties copy: ``attributes``
    wraps a proxy, ``events`` builds a tuple); the properties are the fallback
    for other span types.
    """
    try:
        return _sdk_fields(span.__dict__, tids, current_tid)
    except (KeyError, AttributeError, TypeError):  # not the SDK's layout: the properties
        return _public_fields(span, tids, current_tid)


def _sdk_fields(
    fields: dict[str, Any], tids: dict[int, int], current_tid: Callable[[], int]
) -> tuple[Any, ...]:
    """The same tuple from the SDK span's own fields (its properties copy)."""
    ctx = fields["_context"]
    span_id = context_span_id(ctx)
    parent = fields["_parent"]
    attrs = fields["_attributes"]
    raw = getattr(attrs, "_dict", attrs)
    events = fields["_events"]
    events = getattr(events, "_dq", events)
    status = fields["_status"]
    kind = fields["_kind"]
    scope = fields["_instrumentation_scope"]
    return (
        fields["_name"],
        span_id,
        context_trace_id(ctx),
        context_span_id(parent) if parent is not None else 0,
        fields["_start_time"],
        fields["_end_time"],
        raw or None,
        tuple(events) if events else None,
        status if status.status_code is _ERROR else None,
        None if kind is _INTERNAL else kind.name,
        scope.name if scope is not None else "span",
        (raw.get("asynctrace.group") or raw.get("rl.bucket")) if raw else None,
        tids.pop(span_id, None) or current_tid(),
    )


def _public_fields(
    span: ReadableSpan, tids: dict[int, int], current_tid: Callable[[], int]
) -> tuple[Any, ...]:
    """The same tuple through the public ``ReadableSpan`` properties."""
    ctx = span.context
    span_id = ctx.span_id if ctx is not None else 0
    parent = span.parent
    attrs = span.attributes
    status = span.status
    kind = span.kind
    scope = span.instrumentation_scope
    return (
        span.name,
        span_id,
        ctx.trace_id if ctx is not None else 0,
        parent.span_id if parent is not None else 0,
        span.start_time,
        span.end_time,
        dict(attrs) if attrs else None,
        tuple(span.events) or None,
        status if status.status_code is _ERROR else None,
        None if kind is _INTERNAL else kind.name,
        scope.name if scope is not None else "span",
        (attrs.get("asynctrace.group") or attrs.get("rl.bucket")) if attrs else None,
        tids.pop(span_id, None) or current_tid(),
    )


def _truncated(raw: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """Strings (also in sequences and mappings) cut to *limit* characters, as the SDK cuts them;
    asynctrace's stamps (``rl.bucket``, ...) are left whole."""
    out = dict(raw)
    for key, value in raw.items():
        if key in STAMP_KEYS:  # asynctrace's stamps are never cut: goodput reads them
            continue
        if value.__class__ is str:
            if len(value) > limit:
                out[key] = value[:limit]
        elif value.__class__ in _SCALARS:
            continue
        elif isinstance(value, (tuple, list, Mapping)):
            out[key] = _cut(value, limit)
    return out


_SCALARS = frozenset((int, float, bool, bytes))


def _cut(value: Any, limit: int) -> Any:
    """*value* with its strings cut to *limit* characters, at any depth."""
    if value.__class__ is str:
        return value[:limit]
    if isinstance(value, (tuple, list)):
        return [_cut(v, limit) for v in value]
    if isinstance(value, Mapping):
        return {k: _cut(v, limit) for k, v in value.items()}
    return value
