"""The least a tracer can do at the demo's places (benchmark only).

``bench_demo.py``'s floor: what recording the demo's spans, session records
and trace context costs the event-loop thread when nothing else is done. A
span is an OpenTelemetry API span that is current while it runs, as the
issue's tracer must make it (third-party instrumentations nest under it):
it takes an id from a counter, its parent from the OpenTelemetry context,
and is set as the current span the way ``trace.use_span`` does, without its
layers (one copy of the context, one context-variable set and reset); then
two clock reads and one tuple appended to a list. A request's
``traceparent`` is one f-string; a session is a list, a phase a tuple
appended to it. No sampling decision, no span context built (asked for, it
is made then), no span groups, no scopes (the caller passes every attribute
by hand, as a user of AReaL's tracer does), no limits, no exception
recording, no loop-stall watch, no goodput, and no writer: the records stay
in memory (a writer would run on another thread, which this figure does not
count).
"""

from __future__ import annotations

import contextvars
import itertools
import os
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.util.types import Attributes, AttributeValue

__all__ = ["Phase", "Span", "carrier", "finalize", "records", "reset", "session"]

_time_ns = time.time_ns
_RUNTIME: Any = otel_context._RUNTIME_CONTEXT  # the contextvars runtime: its variable
_CONTEXT: contextvars.ContextVar[Context] = _RUNTIME._current_context
_TRACE = int.from_bytes(os.urandom(16), "big")
_TRACE_HEX = f"{_TRACE:032x}"
_ids = itertools.count(1)
records: list[tuple[Any, ...]] = []  # finished spans, sessions
_append = records.append


def reset() -> None:
    """Forget the records (between runs)."""
    records.clear()


class Span(trace.Span):
    """A recorded span, current while it runs: ``with Span(name, attributes): ...``."""

    __slots__ = ("attributes", "id", "name", "parent", "start", "token")

    def __init__(self, name: str, attributes: dict[str, Any]) -> None:
        self.name = name
        self.attributes = attributes

    def __enter__(self) -> Span:
        self.id = next(_ids)
        current = _CONTEXT.get()
        parent = current.get(_SPAN_KEY)
        self.parent = parent.id if type(parent) is Span else 0
        values = current.copy()
        values[_SPAN_KEY] = self
        self.token = _CONTEXT.set(Context(values))
        self.start = _time_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        end = _time_ns()
        _CONTEXT.reset(self.token)
        _append((self.name, self.id, self.parent, self.start, end, self.attributes))

    # The rest of the API, for code that finds this span current; unused by the demo.
    def get_span_context(self) -> trace.SpanContext:
        return trace.SpanContext(
            _TRACE, self.id, False, trace.TraceFlags(trace.TraceFlags.SAMPLED)
        )

    def end(self, end_time: int | None = None) -> None:
        pass

    def is_recording(self) -> bool:
        return True

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.attributes.update(attributes)

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        pass

    def update_name(self, name: str) -> None:
        self.name = name

    def set_status(self, status: Any, description: str | None = None) -> None:
        pass

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        pass


def carrier(span: Span) -> dict[str, str]:
    """The W3C ``traceparent`` of *span*, for a request's headers."""
    return {"traceparent": f"00-{_TRACE_HEX}-{span.id:016x}-01"}


def session(task_id: int) -> list[Any]:
    """A new session record of *task_id*: id, task, submitted at; phases follow."""
    return [next(_ids), task_id, _time_ns()]


class Phase:
    """One phase of a session: ``with Phase(record, name): ...``."""

    __slots__ = ("name", "record", "start")

    def __init__(self, record: list[Any], name: str) -> None:
        self.record = record
        self.name = name

    def __enter__(self) -> None:
        self.start = _time_ns()

    def __exit__(self, *exc: object) -> None:
        self.record.append((self.name, self.start, _time_ns()))


def finalize(record: list[Any], status: str, reason: str | None) -> None:
    """End a session: its status, and the record kept."""
    record.append((status, reason, _time_ns()))
    _append(tuple(record))
