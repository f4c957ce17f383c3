"""Chrome Trace Event JSON lines, written off the event loop.

One complete JSON object per line in ``traces-r{rank}.jsonl``: a complete
event (``"ph": "X"``) per span, an instant event (``"ph": "i"``) per span
event, and metadata events naming the process (rank, role) and every track.

Tracks: a span goes on the track of the (thread, task) that *started* it, so
spans of concurrent asyncio or trio tasks never share a track; a span that
would not nest on its track (it ended on another task, or outlived its parent)
goes to an overflow track instead (see :mod:`asynctrace.export._tracks`).

The hot path (``on_start``/``on_end``) only records a track id and appends
the span's fields (a tuple: plain values and the ended span's own attribute
mapping) to a bounded deque; encoding, track
placement and the ``write`` happen on the exporter's daemon thread
(:mod:`asynctrace.export._chrome_writer`), one ``write`` of whole lines per
batch, so a killed process leaves at most one torn last line.

Reading a trace back is in :mod:`asynctrace.export._chrome_read` (its names
are importable from here).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span
from opentelemetry.trace import SpanContext

from .._backend import trio_task
from .._errors import report_internal_error
from .._fast._forget import MAX_OPEN_SPANS, forget_open_spans
from .._fast._provider import current_task_of
from ._checks import check_count, check_delay_millis, check_limit
from ._chrome_read import ChromeTrace, read_chrome_trace
from ._chrome_read import event_ok as event_ok
from ._chrome_read import iter_chrome_lines as iter_chrome_lines
from ._chrome_writer import (
    ChromeWriter,
    NewTrack,
    context_span_id,
    span_fields,
)
from ._queue import _CONTROL, QueuedSpanProcessor

__all__ = ["ChromeTrace", "ChromeTraceProcessor", "read_chrome_trace"]

_get_running_loop = asyncio._get_running_loop
_current_asyncio_task = current_task_of

_NO_TRACK = 0
"""The track of a span that started while the queue was full (tids start at 1).

Its track is decided when it ends (a span's recorded tid of 0 is not one), and the
writer puts a span that still has it on a ``late spans`` track."""


_next_track_id = itertools.count(1).__next__
"""Track ids for every Chrome writer of the process (a C call: atomic).

Process-wide, not per processor: after a reconfiguration, a new writer may
append to the file of the one before it (the same run id and output
directory), with the same pid; its tracks must not reuse the ids, and so the
names, of the earlier ones. A forked child continues the count, harmlessly:
its lines carry its own pid."""


class _ThreadToken:
    """Lives in a thread-local; its death tells us the thread is gone."""

    __slots__ = ("__weakref__",)


def _task_name(task: object) -> str:
    get_name = getattr(task, "get_name", None)
    if callable(get_name):
        return str(get_name())
    return str(getattr(task, "name", None) or f"task-{id(task):x}")


class ChromeTraceProcessor(QueuedSpanProcessor):
    """Write ended spans as Chrome Trace Event JSON lines to *path*.

    Args:
        path: the ``.jsonl`` file; opened for appending (a torn last line left
            by a killed process is closed off first).
        resource_attributes: used for the process name and labels
            (``service.name``, ``asynctrace.rank``, ``asynctrace.role``, ...).
        max_queue_size: spans buffered before new ones are dropped.
        max_export_batch_size: lines per ``write`` (twice as many while two
            batches or more are waiting, so the writer catches up).
        schedule_delay_millis: longest time a span waits before it is written.
        max_attribute_length: strings longer than this are cut (for spans of
            the fast provider; the SDK cuts its own).
        max_event_attributes: attributes kept per span event (fast provider).
        max_event_attribute_length: strings of span events cut to this length
            (fast provider; default: *max_attribute_length*).

    The sizes and the delay take the ranges of the configuration keys of the
    same names; the attribute limits are integers ``>= 0`` or ``None`` (no
    limit). A new task or thread gets its track while the queue has room; one
    whose first span starts while it is full (the writer stuck) gets it at
    that span's end, or, if the queue is still full then, its spans go to a
    ``late spans`` track. Of the spans that never end, the track of at most
    100,000 is remembered (past it, the longest-open after the oldest are
    forgotten a tenth at a time, counted in :attr:`forgotten`); a forgotten one
    that ends goes on the track of the task that ends it.

    Raises:
        ConfigurationError: an argument out of its range, or of the wrong type.

    Example:
        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> provider = TracerProvider()
        >>> processor = ChromeTraceProcessor("traces-r0.jsonl")  # doctest: +SKIP
        >>> provider.add_span_processor(processor)  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        resource_attributes: Mapping[str, Any] | None = None,
        max_queue_size: int = 8192,
        max_export_batch_size: int = 512,
        schedule_delay_millis: float = 1000.0,
        max_attribute_length: int | None = None,
        max_event_attributes: int | None = 128,
        max_event_attribute_length: int | Literal["same"] | None = "same",
    ) -> None:
        # Checked before the file is opened (the queue checks its limits again).
        check_count("max_queue_size", max_queue_size, 1)
        check_count("max_export_batch_size", max_export_batch_size, 1)
        check_delay_millis("schedule_delay_millis", schedule_delay_millis)
        check_limit("max_attribute_length", max_attribute_length)
        check_limit("max_event_attributes", max_event_attributes)
        if max_event_attribute_length != "same":
            check_limit("max_event_attribute_length", max_event_attribute_length, "'same', ")
        self.path = Path(path)
        self._next_tid = _next_track_id
        self._writer = ChromeWriter(
            self.path,
            dict(resource_attributes or {}),
            self._next_tid,
            max_attribute_length,
            max_event_attributes,
            max_event_attribute_length,
        )
        self._local = threading.local()
        self._tids: dict[int, int] = {}  # span id -> the track it started on, until it ends
        self.forgotten = 0
        """Spans that never ended (yet) whose track was forgotten past 100,000 of them."""
        self._refs: dict[int, weakref.ref[Any]] = {}
        self._writer.post = self._put_control  # bound now, called once the queue exists
        super().__init__(
            self._writer,
            name="chrome",
            max_queue_size=max_queue_size,
            max_export_batch_size=max_export_batch_size,
            schedule_delay_millis=schedule_delay_millis,
        )

    _control_types = (*_CONTROL, NewTrack, int)  # int: a retired track's id

    @property
    def shortened(self) -> int:
        """Lines cut to 64 MiB, the longest the readers take: their largest values, marked."""
        return self._writer.shortened

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Remember the track (thread and task) the span starts on."""
        try:
            ctx = getattr(span, "_context", None)  # the SDK's field: no property call
            if ctx.__class__ is SpanContext:
                span_id = context_span_id(ctx)
            else:
                span_id = span.get_span_context().span_id
            tids = self._tids
            tids[span_id] = self._current_tid()
            if len(tids) > MAX_OPEN_SPANS:
                self._forget_tids()
        except Exception as exc:
            report_internal_error(("chrome", "on_start"), exc)

    def _forget_tids(self) -> None:
        """Forget the tracks of spans that never ended, past the bound (as the tracker does)."""
        self.forgotten += len(forget_open_spans(self._tids, MAX_OPEN_SPANS))

    def on_end(self, span: ReadableSpan) -> None:
        """Queue the span's fields and its track for the writer thread."""
        try:  # the track is the one it started on, else (started before we were added) ours
            record = span_fields(span, self._tids, self._current_tid)
            queue = self._queue  # QueuedSpanProcessor._put, inline: once per span
            if len(queue) >= self._max_queue_size or self._closing:
                self._drop(1)
                return
            queue.append(record)
            if len(queue) >= self._batch_size:
                if not self._wake.is_set():
                    self._wake.set()
                elif self._handoff._starved or not len(queue) % self._batch_size:
                    self.behind()  # batches behind (or starved: at every span) let it run
        except Exception as exc:
            report_internal_error(("chrome", "on_end"), exc)

    def _current_tid(self) -> int:
        loop = _get_running_loop()
        if loop is not None:
            task: object | None = _current_asyncio_task(loop)
        else:
            task = trio_task()
        local = self._local
        try:
            tasks: dict[int, int] = local.tasks
        except AttributeError:
            if self._full():
                return _NO_TRACK
            tasks = self._open_thread(local)
        if task is None:
            tid: int = local.tid
            return tid
        found = tasks.get(id(task))
        if found is None:
            found = self._open_task(tasks, task)
        return found

    def _open_thread(self, local: threading.local) -> dict[int, int]:
        tid = self._next_tid()
        tasks: dict[int, int] = {}
        token = _ThreadToken()
        local.tid = tid
        local.tasks = tasks
        local.token = token
        self._refs[tid] = weakref.ref(token, functools.partial(self._gone, None, 0, tid))
        self._put_control(NewTrack(tid, f"thread: {threading.current_thread().name}"))
        return tasks

    def _full(self) -> bool:
        """Whether the queue is full: no new track is announced then (see ``_put_control``)."""
        return len(self._queue) >= self._max_queue_size

    def _open_task(self, tasks: dict[int, int], task: object) -> int:
        if self._full():
            return _NO_TRACK  # not remembered: the task's next span tries again
        tid = self._next_tid()
        key = id(task)
        tasks[key] = tid
        thread = threading.current_thread().name
        self._put_control(NewTrack(tid, f"task: {_task_name(task)} [{thread}]"))
        try:
            self._refs[tid] = weakref.ref(task, functools.partial(self._gone, tasks, key, tid))
        except TypeError:  # not weak-referenceable: the track simply lives on
            pass
        return tid

    def _gone(self, tasks: dict[int, int] | None, key: int, tid: int, _ref: object) -> None:
        """Weakref callback: a task or thread died; retire its track after its spans."""
        if tasks is not None and tasks.get(key) == tid:
            tasks.pop(key, None)
        self._refs.pop(tid, None)
        self._put_control(tid)
