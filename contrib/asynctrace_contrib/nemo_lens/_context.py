"""Trace context in and out of a carrier, and OpenTelemetry's global tracer and meter."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

import asynctrace

__all__ = ["extract_context", "get_meter", "get_tracer", "inject_context"]


def inject_context(carrier: MutableMapping[str, str]) -> None:
    """Put the current trace context into *carrier* (``traceparent``, ``tracestate``).

    Example:
        >>> carrier = {}
        >>> inject_context(carrier)
        >>> carrier
        {}
    """
    carrier.update(asynctrace.current_trace_carrier())


def extract_context(carrier: Mapping[str, str]) -> otel_context.Context:
    """The OpenTelemetry ``Context`` carried by *carrier* (empty when it has none).

    Read by :func:`asynctrace.remote_trace_context`, as every asynctrace
    carrier is: the span context and, with ``propagate_scopes`` on, the
    sender's OpenTelemetry baggage (lens's W3C Trace Context + Baggage). Like
    lens's, the context is built from an empty one, not the current one.
    asynctrace's own scopes (iteration, per-prompt, task, session) live
    outside the OpenTelemetry context: to have them too, run the block under
    ``with asynctrace.remote_trace_context(carrier):`` instead of attaching
    this context.

    Example:
        >>> from opentelemetry import trace
        >>> ctx = extract_context({})
        >>> trace.get_current_span(ctx).get_span_context().is_valid
        False
    """
    token = otel_context.attach(otel_context.Context())
    try:
        with asynctrace.remote_trace_context(carrier):
            return otel_context.get_current()
    finally:
        otel_context.detach(token)


def get_tracer(name: str = "nemo.lens") -> trace.Tracer:
    """OpenTelemetry's global tracer (asynctrace's pipeline once configured).

    Example:
        >>> get_tracer() is not None
        True
    """
    return trace.get_tracer(name)


def get_meter(name: str = "nemo.lens") -> metrics.Meter:
    """OpenTelemetry's global meter.

    Example:
        >>> get_meter() is not None
        True
    """
    return metrics.get_meter(name)
