"""Run in a child process: open spans inside extract_env(), print their attributes.

Usage: ``python _scopes_child.py on|off`` (whether this process propagates scopes),
with TRACEPARENT/TRACESTATE/BAGGAGE set by the parent's inject_env().
"""

from __future__ import annotations

import json
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace


def main() -> None:
    """Export the spans of this process and print what they carry as JSON."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    asynctrace.enable_telemetry(
        provider, span_groups="per_step", propagate_scopes=sys.argv[1] == "on"
    )
    with asynctrace.extract_env(), asynctrace.managed_span("reward", "child.score"):
        per_prompt = asynctrace.in_per_prompt_scope()
    print(
        json.dumps(
            {
                "per_prompt": per_prompt,
                "spans": [
                    {"name": s.name, "trace_id": s.context.trace_id, **dict(s.attributes or {})}
                    for s in exporter.get_finished_spans()
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
