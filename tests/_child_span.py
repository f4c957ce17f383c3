"""Run in a child process: open a span under the parent's env carrier, print its ids.

Used by the subprocess tests as ``python _child_span.py`` with TRACEPARENT set.
"""

from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace


def main() -> None:
    """Export one span in this process and print its ids as JSON."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    asynctrace.enable_telemetry(provider, span_groups="all")
    with asynctrace.extract_env(), asynctrace.managed_span("reward", "subprocess.child"):
        pass
    (span,) = exporter.get_finished_spans()
    print(
        json.dumps(
            {
                "name": span.name,
                "trace_id": span.context.trace_id,
                "span_id": span.context.span_id,
                "parent_id": span.parent.span_id if span.parent else None,
            }
        )
    )


if __name__ == "__main__":
    main()
