"""asynctrace's own OpenTelemetry API tracer provider (``provider="fast"``).

It needs only ``opentelemetry-api``; the exporters that read its spans live
in :mod:`asynctrace.export`.
"""

from __future__ import annotations

from ._ids import IDS, IdGenerator
from ._limits import SpanLimits, limits_from
from ._provider import FastTracer
from ._sampling import Sampling, sampling_from
from ._span import FastSpan
from ._span_events import SpanEvent
from ._tracer_provider import FastTracerProvider, Scope

__all__ = [
    "IDS",
    "FastSpan",
    "FastTracer",
    "FastTracerProvider",
    "IdGenerator",
    "Sampling",
    "Scope",
    "SpanEvent",
    "SpanLimits",
    "limits_from",
    "sampling_from",
]
