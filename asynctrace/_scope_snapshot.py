"""A picklable snapshot of the caller's trace context, baggage and scopes, for process pools.

A process cannot receive a ``contextvars.Context``: a
:class:`~asynctrace.ContextExecutor` over a ``ProcessPoolExecutor`` sends a
:class:`ScopeSnapshot` with each call instead, and the worker runs the call
inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry import baggage
from opentelemetry import context as otel_context

from ._carriers import BAGGAGE, current_trace_carrier
from ._carriers import _with_baggage as with_baggage
from ._group_types import Bucket
from ._remote_context import remote_trace_context
from ._scopes import BUCKET, ITERATION, PER_PROMPT, SCOPES, SESSION_ID, TASK_ID, ScopeState

__all__ = ["ScopeSnapshot", "run_in_snapshot", "run_in_snapshot_kw"]

R = TypeVar("R")


def _user_baggage() -> dict[str, str] | None:
    """The caller's OpenTelemetry baggage, as text (as a carrier sends it); ``None`` if none.

    An entry whose ``str()`` raises is left out, as a carrier leaves it out.
    """
    try:
        entries = baggage.get_all()
    except Exception:
        return None
    kept: dict[str, str] = {}
    for key, value in entries.items():
        try:
            kept[str(key)] = value if value.__class__ is str else str(value)
        except Exception:
            continue
    return kept or None


class ScopeSnapshot:
    """Picklable copy of the trace context, baggage and scopes, for process pools.

    The caller's baggage and scopes are restored in the worker whatever the
    worker's ``propagate_scopes`` says (that gate guards a server against its
    callers; a pool's worker is the caller's own), so a forked worker and a
    spawned one, which has its own configuration, see the same.
    """

    __slots__ = (
        "baggage",
        "bucket",
        "carrier",
        "iteration",
        "per_prompt",
        "session_id",
        "task_id",
    )

    def __init__(self) -> None:
        carrier = current_trace_carrier()
        carrier.pop(BAGGAGE, None)  # the scopes and baggage travel here, not in the carrier
        self.carrier = carrier
        self.baggage = _user_baggage()
        bucket = BUCKET.get()
        self.bucket = bucket.value if bucket is not None else None
        self.iteration = ITERATION.get()
        self.per_prompt = PER_PROMPT.get()
        self.task_id = TASK_ID.get()
        self.session_id = SESSION_ID.get()

    def __getstate__(self) -> tuple[Any, ...]:
        return (
            self.carrier,
            self.baggage,
            self.bucket,
            self.iteration,
            self.per_prompt,
            self.task_id,
            self.session_id,
        )

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (
            self.carrier,
            self.baggage,
            self.bucket,
            self.iteration,
            self.per_prompt,
            self.task_id,
            self.session_id,
        ) = state

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Call *fn* in the worker's own context with the snapshot's span, baggage and scopes.

        The worker's context is kept, as a raw pool keeps it: what the pool's
        initializer set there (a ``ContextVar``, ``decimal``'s precision) is
        seen by every call. Only the OpenTelemetry context and the scopes are
        replaced, whole (a forked worker would otherwise keep the span and
        scopes of whoever first submitted to it), and put back afterwards.
        """
        bucket = Bucket(self.bucket) if self.bucket is not None else None
        state = ScopeState(
            bucket, bool(self.per_prompt), self.iteration, self.task_id, self.session_id
        )
        scopes = SCOPES.set(state)
        try:
            # no span but the carrier's, and the caller's baggage only
            ctx = otel_context.Context()
            if self.baggage:
                ctx = with_baggage(self.baggage, ctx)
            empty = otel_context.attach(ctx)
            try:
                with remote_trace_context(self.carrier):
                    return fn(*args, **kwargs)
            finally:
                otel_context.detach(empty)
        finally:
            SCOPES.reset(scopes)


def run_in_snapshot(snapshot: ScopeSnapshot, fn: Callable[..., R], *args: Any) -> R:
    """``snapshot.run(fn, *args)``, as a module-level function a pool pickles by name."""
    return snapshot.run(fn, *args)


def run_in_snapshot_kw(
    snapshot: ScopeSnapshot, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> R:
    """``snapshot.run(fn, *args, **kwargs)``, as a module-level function a pool pickles."""
    return snapshot.run(fn, *args, **kwargs)
