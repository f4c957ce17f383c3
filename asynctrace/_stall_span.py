"""A loop stall recorded as one span: its bounds, its parent, its attributes.

The span runs from when the block began (between the last heartbeat that ran
and the first that did not) to when the loop ran again, under the innermost
span known to hold it all (else the span it ended in, clipped to it), folded
from every sample, as the blocked task (so the span lands on that task's
track), unbucketed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, Final, Protocol

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation import _SPAN_KEY

from ._builtin_groups import LOOP_STALL
from ._fast import FastTracer
from ._redact import redact_text
from ._semconv import GROUP, TRUNCATED
from ._stall_samples import _OTEL_VAR
from ._state import GATE

if TYPE_CHECKING:
    from ._stall_samples import Stall

__all__ = ["MAX_STACKS", "SPAN_NAME", "record_stall"]

SPAN_NAME: Final = "asynctrace.loop_stall"
MAX_STACKS: Final = 5  # folded stacks written on the span, most seen first

_current_task = asyncio.current_task
_enter_task = getattr(asyncio.tasks, "_enter_task", None)
_leave_task = getattr(asyncio.tasks, "_leave_task", None)
_get_ident = threading.get_ident


class _Watched(Protocol):
    """What a stall's span is read from, besides the stall: its loop's monitor."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...

    @property
    def loop_thread(self) -> int: ...

    @property
    def threshold(self) -> float: ...


def record_stall(monitor: _Watched, stall: Stall, now: float, truncated: bool = False) -> None:
    """Record *stall*, over at *now* (monotonic), as one span, if it passed the threshold.

    The monitor's ``_record`` (this function itself, no call in between): from
    the heartbeat on the loop thread, or *truncated* from the thread stopping
    the monitor, with the tracer the stall was first seen under.
    """
    # Cut short by a shutdown: the gate has let go of the tracer, still running.
    tracer = stall.tracer if truncated else GATE.tracer
    loop = monitor.loop  # running this heartbeat (or blocked): alive
    if tracer is None or not stall.samples or loop is None:
        return
    wall, mono = time.time_ns(), time.monotonic_ns()
    # The loop ran the heartbeat at `since` and not the one posted at `posted`: the
    # block began in between; the middle is within half that interval of it.
    began = (stall.since + stall.posted) / 2
    if now - began <= monitor.threshold and not truncated:
        return  # not longer than the threshold (one cut short by a shutdown: seen so far)
    start = wall - (mono - int(began * 1e9))
    end = wall - (mono - int(now * 1e9))
    context = _parent_context(stall, start)
    parent = context.get(_SPAN_KEY) if context is not None else None
    parent_start = getattr(parent, "start_time", None)
    parent_end = getattr(parent, "end_time", None)
    if isinstance(parent_start, int) and start < parent_start:
        start = parent_start  # nests under its parent on the task's track
    if isinstance(parent_end, int) and end > parent_end:
        end = max(parent_end, start)
    attributes = _attributes(stall, monitor.threshold)
    if truncated:
        attributes[TRUNCATED] = True
    if context is None:
        context = otel_context.Context()
    task = stall.task
    entered = False
    on_loop = _get_ident() == monitor.loop_thread
    if task is not None and on_loop and _enter_task is not None and _current_task(loop) is None:
        try:  # start the span as the blocked task: its track, for every processor
            _enter_task(loop, task)
            entered = True
        except Exception:
            entered = False
    try:
        if tracer.__class__ is FastTracer:
            span = tracer.start_owned(SPAN_NAME, context, attributes, None, start_time=start)
            owned: Any = span
            if task is not None and not on_loop and getattr(owned, "_owner", None) is not None:
                owned._owner = task  # the blocked task's track, not this thread's
        else:
            span = tracer.start_span(
                SPAN_NAME, context, SpanKind.INTERNAL, attributes, start_time=start
            )
        span.end(end)
    finally:
        if entered and _leave_task is not None:
            _leave_task(loop, task)


def _parent_context(stall: Stall, start: int) -> Any:
    """The OpenTelemetry context the stall's span starts in (*start*: the stall's, in ns).

    That of the span current in the blocked task at the last sample: the span
    the block ended in, ended since or not. When the block began before that
    span started (it crossed into it with no await between), the span current
    in the task when the loop ran again, if it is still open and began before
    the block did: it holds the whole stall.
    """
    last = stall.otel
    context = stall.context
    if last is None or context is None or _OTEL_VAR is None:
        return last
    span_start = getattr(last.get(_SPAN_KEY), "start_time", None)
    if not isinstance(span_start, int) or start >= span_start:
        return last  # the block began inside it
    now = context.get(_OTEL_VAR)
    outer = now.get(_SPAN_KEY) if now is not None else None
    outer_start = getattr(outer, "start_time", None)
    still_open = getattr(outer, "end_time", 0) is None
    if isinstance(outer_start, int) and outer_start <= start and still_open:
        return now
    return last


def _attributes(stall: Stall, threshold: float) -> dict[str, Any]:
    attributes: dict[str, Any] = {GROUP: LOOP_STALL}
    if stall.scopes is not None:
        attributes.update(stall.scopes.stamps)  # rl.iteration, rl.task_id, rl.session_id
    ranked = stall.counts.most_common(MAX_STACKS)
    top = ranked[0][0] if ranked else ()
    if top:
        path, line, function = top[0]
        attributes["code.function.name"] = function
        attributes["code.file.path"] = path
        attributes["code.line.number"] = line
        attributes["asynctrace.stall.frames"] = tuple(f"{p}:{n} {f}" for p, n, f in top)
    attributes["asynctrace.stall.stacks"] = tuple(
        ";".join(f"{f} ({p}:{n})" for p, n, f in reversed(stack)) + f" {count}"
        for stack, count in ranked
        if stack
    )
    attributes["asynctrace.stall.samples"] = stall.samples
    attributes["asynctrace.stall.threshold_ms"] = round(threshold * 1000, 3)
    task = stall.task
    if task is not None:
        get_name = getattr(task, "get_name", None)
        if callable(get_name):
            attributes["asynctrace.stall.task"] = redact_text(str(get_name()))
        get_coro = getattr(task, "get_coro", None)
        coro = get_coro() if callable(get_coro) else None
        name = getattr(coro, "__qualname__", None)
        if isinstance(name, str):
            attributes["asynctrace.stall.coroutine"] = name
    return attributes
