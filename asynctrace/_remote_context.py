"""A received carrier made the parent of what runs next: :class:`remote_trace_context`.

Its scopes (``baggage``, with ``propagate_scopes`` on) are entered too; a
carrier that cannot be read leaves the caller's context as it is, counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import Token
from types import TracebackType

from opentelemetry import context as otel_context
from opentelemetry import trace

from ._baggage_in import ScopeValues
from ._baggage_in import decode as decode_baggage
from ._carrier_read import parse_traceparent, parse_tracestate, read_carrier
from ._carrier_stats import _count as count_refusal
from ._carriers import _with_baggage
from ._cm import SyncAndAsync
from ._errors import report_internal_error
from ._scopes import SCOPES, ScopeState, leave_all
from ._span_context import _CONTEXT_VAR, _SPAN_KEY
from ._state import GATE

__all__ = ["context_from_carrier", "remote_trace_context"]


class _Remote:
    """What one carrier holds: a span context, the caller's baggage, the scope values."""

    __slots__ = ("baggage", "scopes", "span_context")

    def __init__(self, carrier: object, *, scopes: bool) -> None:
        self.span_context: trace.SpanContext | None = None
        self.baggage: dict[str, str] | None = None
        self.scopes: ScopeValues | None = None
        found = read_carrier(carrier)
        if found is None:
            return
        parents, states, bags = found
        if len(parents) == 1:  # two traceparent headers are invalid: a new trace
            span_context = parse_traceparent(parents[0])
            if span_context is None:
                count_refusal("traceparent_invalid")
            elif states:
                state = parse_tracestate(states)
                if state is not None:
                    span_context = trace.SpanContext(
                        span_context.trace_id,
                        span_context.span_id,
                        True,
                        span_context.trace_flags,
                        state,
                    )
                elif _not_empty(states):
                    count_refusal("tracestate_dropped")
            self.span_context = span_context
        elif parents:
            count_refusal("traceparent_invalid")
        # W3C: tracestate goes with a valid traceparent only (with none, it is not looked at)
        if parents and states and self.span_context is None and _not_empty(states):
            count_refusal("tracestate_dropped")
        if bags and scopes:
            user, values = decode_baggage(bags)
            self.baggage = user or None
            self.scopes = values or None


def _not_empty(states: list[str]) -> bool:
    """Whether *states* hold a member: anything but blanks and commas."""
    return any(value.strip(" \t,") for value in states)


def context_from_carrier(carrier: object) -> otel_context.Context | None:
    """The OTel context a carrier describes, or ``None`` if it is not valid W3C."""
    try:
        remote = _Remote(carrier, scopes=False)
    except Exception:  # a hostile mapping: treat as no carrier
        return None
    if remote.span_context is None:
        return None
    # Keep the caller's other context values (baggage, ...): only the span changes.
    return trace.set_span_in_context(
        trace.NonRecordingSpan(remote.span_context), otel_context.get_current()
    )


class remote_trace_context(SyncAndAsync["remote_trace_context"]):
    """Run a block under the span context of a W3C *carrier*.

    Attaches on enter and detaches on exit (``with`` and ``async with``). An
    empty, ``None`` or malformed carrier makes it a no-op: it never raises.
    With ``propagate_scopes`` on, the scopes the carrier's ``baggage`` brings
    (iteration, per-prompt, task and session) are entered for the block too,
    and the sender's own baggage entries are put in the OpenTelemetry context.

    Example:
        >>> with remote_trace_context({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}):
        ...     pass
    """

    __slots__ = ("_open", "_remote", "_scope_state", "_scope_token", "_token")

    def __init__(self, carrier: Mapping[str, str] | None) -> None:
        self._remote: _Remote | None = None
        self._token: object | None = None
        self._scope_token: Token[ScopeState] | None = None
        self._scope_state: ScopeState | None = None
        self._open = False
        try:
            if not carrier:
                return
            self._remote = _Remote(carrier, scopes=GATE.propagate_scopes)
        except Exception:  # a hostile mapping, or a truth value that raises: no carrier
            count_refusal("carrier_not_read")
            self._remote = None

    @property
    def valid(self) -> bool:
        """Whether the carrier held a valid W3C span context."""
        remote = self._remote
        return remote is not None and remote.span_context is not None

    def __enter__(self) -> remote_trace_context:
        if self._open:  # its one token would be overwritten: the first entry's context leaks
            raise RuntimeError("remote_trace_context is already entered; make one per block")
        self._open = True
        remote = self._remote
        if remote is None:
            return self
        try:
            var = _CONTEXT_VAR
            if var is not None and remote.span_context is not None and not remote.baggage:
                # set_span_in_context and attach without their layers (as _spans.attach)
                values = var.get().copy()
                values[_SPAN_KEY] = trace.NonRecordingSpan(remote.span_context)
                self._token = var.set(otel_context.Context(values))
            elif remote.span_context is not None or remote.baggage:
                ctx = otel_context.get_current()
                if remote.span_context is not None:
                    ctx = trace.set_span_in_context(
                        trace.NonRecordingSpan(remote.span_context), ctx
                    )
                if remote.baggage:
                    ctx = _with_baggage(remote.baggage, ctx)
                self._token = otel_context.attach(ctx)
            if remote.scopes is not None:
                state = self._scope_state = remote.scopes.applied_to(SCOPES.get())
                self._scope_token = SCOPES.set(state)
        except Exception as exc:
            report_internal_error(("remote_trace_context",), exc)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        scope_token, self._scope_token = self._scope_token, None
        if scope_token is not None and self._scope_state is not None:
            leave_all(scope_token, self._scope_state)
        token, self._token = self._token, None
        if token is not None:
            var = _CONTEXT_VAR
            if var is None:  # OpenTelemetry's runtime context is not its ContextVar one
                otel_context.detach(token)  # type: ignore[arg-type]
                return
            try:
                var.reset(token)  # type: ignore[arg-type]
            except Exception:  # a token of another context, or used already: OpenTelemetry's
                otel_context.detach(token)  # type: ignore[arg-type]  # detach logs it
