"""Process-pool worker functions (importable, so they pickle)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace

_exporter = InMemorySpanExporter()


def init() -> None:
    """Pool initializer: telemetry on, spans kept in memory."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    asynctrace.enable_telemetry(provider, span_groups="all")


def traced_work(x: int, *, name: str = "pool.work") -> dict[str, Any]:
    """Open a span in the worker and report what the worker saw."""
    _exporter.clear()
    with asynctrace.managed_span("data_processing", name):
        pass
    (span,) = _exporter.get_finished_spans()
    return {
        "x": x,
        "trace_id": span.context.trace_id,
        "parent_id": span.parent.span_id if span.parent else None,
        "iteration": asynctrace.current_iteration(),
        "bucket": str(asynctrace.current_bucket()),
        "per_prompt": asynctrace.in_per_prompt_scope(),
        "span_bucket": dict(span.attributes or {}).get("rl.bucket"),
    }


def what_is_current(x: int) -> dict[str, Any]:
    """The span and scopes current in the worker when the call runs (no span of its own)."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return {
        "x": x,
        "trace_id": context.trace_id,
        "iteration": asynctrace.current_iteration(),
        "task_id": asynctrace.current_task_id(),
    }
