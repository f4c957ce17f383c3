"""Chrome trace lines: serialization, track placement and the file (writer thread).

The processor in :mod:`asynctrace.export.chrome` turns each ended span into a
tuple of plain values (:func:`span_fields`) on the hot path; everything else
happens here, on the exporter's daemon thread.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from ._tracks import TrackAssigner

__all__ = ["ChromeWriter", "NewTrack", "span_fields"]

logger = logging.getLogger("asynctrace")

_INTERNAL = SpanKind.INTERNAL
_ERROR = StatusCode.ERROR
_encode_json = json.JSONEncoder(
    separators=(",", ":"), allow_nan=False, default=str, check_circular=False
).encode


def _make_attrs_encoder() -> Any:
    """The C encoder, built once (``JSONEncoder.encode`` builds one per call).

    Same options as ``_encode_json``; called as ``encode(obj, 0)``, it returns
    the chunks of the text.
    """
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    try:
        return make(None, str, encode_basestring_ascii, None, ":", ",", False, False, False)
    except TypeError:  # no C accelerator (None), or another signature
        return lambda obj, _level: (_encode_json(obj),)


_encode_attrs = _make_attrs_encoder()


class NewTrack:
    """Control item: a primary track appeared (travels in the span queue)."""

    __slots__ = ("name", "tid")

    def __init__(self, tid: int, name: str) -> None:
        self.tid = tid
        self.name = name


class ChromeWriter:
    """The sink: turns queued items into lines and writes them (writer thread only)."""

    def __init__(self, path: Path, resource: dict[str, Any], new_tid: Callable[[], int]) -> None:
        self.path = path
        self.pid = os.getpid()
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in shutdown()
        self._close_torn_tail()
        self._pending: list[str] = []
        self._tracks = TrackAssigner(new_tid, self._track_made)
        self._names: dict[str, str] = {}
        self._last_trace_id = 0
        self._last_trace_hex = ""
        self._warned = False
        self._write("".join(self._process_lines(resource)))

    # -- Sink API ---------------------------------------------------------------

    def export(self, batch: list[Any]) -> tuple[int, int]:
        lines: list[str] = []
        written = failed = 0
        for item in batch:
            kind = item.__class__
            if kind is tuple:
                try:
                    self._span_lines(item, lines)
                    written += 1
                except Exception as exc:
                    failed += 1
                    self._warn("a span could not be serialized; it is skipped", exc)
            elif kind is NewTrack:
                self._tracks.open(item.tid, item.name)
                self._track_made(item.tid, item.name)
            else:
                self._tracks.retire(item)
        if self._pending:
            lines.extend(self._pending)
            self._pending.clear()
        try:
            self._write("".join(lines))
        except OSError as exc:
            self._warn(f"writing {self.path} failed", exc)
            return 0, written + failed
        return written, failed

    def flush(self) -> None:
        """Lines are written unbuffered, batch by batch: nothing is held back."""

    def shutdown(self) -> None:
        self._file.close()

    # -- lines ------------------------------------------------------------------

    def _span_lines(self, record: tuple[Any, ...], lines: list[str]) -> None:
        (name, span_id, trace_id, parent_id, start_ns, end_ns, attrs, events) = record[:8]
        (error, kind, scope, category, tid) = record[8:]
        start = start_ns // 1000
        end = end_ns // 1000
        if end < start:
            end = start
        track = self._tracks.place(tid, start, end)
        if trace_id != self._last_trace_id:
            self._last_trace_id = trace_id
            self._last_trace_hex = f"{trace_id:032x}"
        if parent_id:
            ids = (
                f'"trace_id":"{self._last_trace_hex}","span_id":"{span_id:016x}",'
                f'"parent_span_id":"{parent_id:016x}"'
            )
        else:
            ids = f'"trace_id":"{self._last_trace_hex}","span_id":"{span_id:016x}"'
        if error is not None or kind is not None:
            ids += _status_and_kind(error, kind)
        cat = category if category.__class__ is str else scope
        names = self._names
        name_json = names.get(name) or self._name(name)
        cat_json = names.get(cat) or self._name(cat)
        head = f"{attrs[:-1]}," if attrs else "{"
        pid = self.pid
        lines.append(
            f'{{"ph":"X","name":{name_json},"cat":{cat_json},"ts":{start},"dur":{end - start},'
            f'"pid":{pid},"tid":{track},"args":{head}{ids}}}}}\n'
        )
        if events:
            for event in events:
                ev_attrs = event.attributes
                ev_raw = dict(ev_attrs) if ev_attrs else {}
                lines.append(
                    f'{{"ph":"i","s":"t","name":{encode_basestring_ascii(event.name)},'
                    f'"cat":{cat_json},"ts":{event.timestamp // 1000},"pid":{pid},'
                    f'"tid":{track},"args":{_json_attrs(ev_raw)}}}\n'
                )

    def _name(self, text: str) -> str:
        encoded = self._names.get(text)
        if encoded is None:
            if len(self._names) > 4096:
                self._names.clear()
            encoded = self._names[text] = encode_basestring_ascii(text)
        return encoded

    def _track_made(self, tid: int, name: str) -> None:
        self._pending.append(
            _encode_json(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": self.pid,
                    "tid": tid,
                    "args": {"name": name},
                }
            )
            + "\n"
        )

    def _process_lines(self, resource: Mapping[str, Any]) -> list[str]:
        rank = resource.get("asynctrace.rank", 0)
        world = resource.get("asynctrace.world_size", 1)
        role = resource.get("asynctrace.role")
        service = resource.get("service.name", "asynctrace")
        label = f"{service} rank {rank}/{world}" + (f" {role}" if role else "")
        args = {
            "name": f"{label} (pid {self.pid})",
            "service": service,
            "rank": rank,
            "world_size": world,
            "role": role,
            "run_id": resource.get("asynctrace.run_id"),
            "host": resource.get("host.name"),
        }
        sort = rank if isinstance(rank, int) else 0
        events = [
            {"ph": "M", "name": "process_name", "pid": self.pid, "args": args},
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": self.pid,
                "args": {"sort_index": sort},
            },
            {"ph": "M", "name": "process_labels", "pid": self.pid, "args": {"labels": label}},
        ]
        return [_json_line(event) for event in events]

    # -- file -------------------------------------------------------------------

    def _write(self, text: str) -> None:
        if not text:
            return
        view = memoryview(text.encode("utf-8"))
        while view:
            written = self._file.write(view)
            view = view[written or 0 :]

    def _close_torn_tail(self) -> None:
        """Start on a fresh line if a killed writer left half a line behind."""
        try:
            size = os.fstat(self._file.fileno()).st_size
            if size:
                with open(self.path, "rb") as existing:
                    existing.seek(size - 1)
                    if existing.read(1) != b"\n":
                        self._file.write(b"\n")
        except OSError:
            pass

    def _warn(self, message: str, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "asynctrace: chrome exporter: %s (further errors are counted, not logged)",
                message,
                exc_info=exc,
            )


def _status_and_kind(error: Any, kind: str | None) -> str:
    extra = ""
    if error is not None:
        extra = ',"otel.status_code":"ERROR"'
        if error.description:
            extra += f',"otel.status_description":{encode_basestring_ascii(error.description)}'
    if kind is not None:
        extra += f',"otel.span_kind":"{kind}"'
    return extra


def _json_attrs(attrs: Mapping[str, Any]) -> str:
    try:
        return "".join(_encode_attrs(attrs, 0))
    except ValueError:  # NaN or infinity: not JSON
        return _encode_json({k: _finite(v) for k, v in attrs.items()})


def span_fields(span: ReadableSpan) -> tuple[Any, ...]:
    """The span as plain values, so the queue does not keep the span's objects alive.

    ``(name, span_id, trace_id, parent_span_id or 0, start_ns, end_ns,
    attributes JSON or "", events or None, error status or None, kind name or
    None, instrumentation scope name, category)``; the category is the
    ``asynctrace.group`` attribute, else ``rl.bucket``. Plain values (str, int,
    None) make the queued tuples invisible to the garbage collector. The
    SDK's own fields are read directly (the public properties copy:
    ``attributes`` wraps a proxy, ``events`` builds a tuple); the properties
    are the fallback for other span types.
    """
    fields = getattr(span, "__dict__", None)
    if fields is not None and "_instrumentation_scope" in fields:
        try:
            return _sdk_fields(fields)
        except (KeyError, AttributeError):  # another SDK layout: the public properties
            pass
    return _public_fields(span)


def _sdk_fields(fields: dict[str, Any]) -> tuple[Any, ...]:
    """The same tuple from the SDK span's own fields (its properties copy)."""
    ctx = fields["_context"]
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
        ctx.span_id,
        ctx.trace_id,
        parent.span_id if parent is not None else 0,
        fields["_start_time"],
        fields["_end_time"],
        _json_attrs(raw) if raw else "",
        tuple(events) if events else None,
        status if status.status_code is _ERROR else None,
        None if kind is _INTERNAL else kind.name,
        scope.name if scope is not None else "span",
        (raw.get("asynctrace.group") or raw.get("rl.bucket")) if raw else None,
    )


def _public_fields(span: ReadableSpan) -> tuple[Any, ...]:
    """The same tuple through the public ``ReadableSpan`` properties."""
    ctx = span.context
    parent = span.parent
    attrs = span.attributes
    status = span.status
    kind = span.kind
    scope = span.instrumentation_scope
    return (
        span.name,
        ctx.span_id if ctx is not None else 0,
        ctx.trace_id if ctx is not None else 0,
        parent.span_id if parent is not None else 0,
        span.start_time,
        span.end_time,
        _json_attrs(dict(attrs)) if attrs else "",
        tuple(span.events) or None,
        status if status.status_code is _ERROR else None,
        None if kind is _INTERNAL else kind.name,
        scope.name if scope is not None else "span",
        (attrs.get("asynctrace.group") or attrs.get("rl.bucket")) if attrs else None,
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return [_finite(v) for v in value]
    return value


def _json_line(event: Mapping[str, Any]) -> str:
    return _encode_json(event) + "\n"
