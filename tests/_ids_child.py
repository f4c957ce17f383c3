"""Run in a child process by the id tests: record spans after ``random.seed(0)``, save their ids.

Usage: python _ids_child.py MODE COUNT OUT

Seeds the global generator with ``random.seed(0)`` before anything else (as
every rank of a training job does), builds a pipeline by MODE, seeds again,
then records COUNT spans as trees of one root and ``CHILDREN`` children, and
writes two files: ``OUT.span`` (every span id, 8 bytes big-endian each) and
``OUT.trace`` (every root's trace id, 16 bytes each). MODE is:

- ``fast``: ``asynctrace.configure`` with the fast provider (the default);
  roots from an OpenTelemetry tracer of the configured provider, children
  from :func:`asynctrace.managed_span` (the two hot paths that draw ids);
- ``sdk``: ``asynctrace.configure(..., provider="sdk")``, the same spans;
- ``sdk-default``: a bare OpenTelemetry SDK ``TracerProvider`` with its own
  default id generator (the baseline that repeats ids under the seed).
"""

from __future__ import annotations

import random

random.seed(0)  # before any import, as the training script's first lines may do

import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

import asynctrace  # noqa: E402
from asynctrace import FastTracerProvider  # noqa: E402
from asynctrace._fast import IDS  # noqa: E402

CHILDREN = 4


def _pipeline(mode: str, output_dir: str) -> tuple[Any, Any]:
    """The tracer to record with, and what to shut down afterwards."""
    if mode == "sdk-default":
        provider = TracerProvider(shutdown_on_exit=False)
        asynctrace.enable_telemetry(provider, span_groups="all")
        return provider.get_tracer("ids"), provider
    config: dict[str, Any] = {
        "enabled": True,
        "span_groups": "all",
        "exporters": [],
        "output_dir": output_dir,
        "provider": mode,  # explicit: ASYNCTRACE_PROVIDER may be set in the environment
    }
    telemetry = asynctrace.configure(config)
    configured: Any = telemetry.provider
    if mode == "fast":
        assert isinstance(configured, FastTracerProvider), configured
    else:
        assert configured.id_generator is IDS, configured.id_generator
    return configured.get_tracer("ids"), telemetry


def main() -> None:
    mode, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with tempfile.TemporaryDirectory() as output_dir:
        tracer, owner = _pipeline(mode, output_dir)
        random.seed(0)  # and again once set up, as a trainer seeds before its loop
        span_ids: list[int] = []
        trace_ids: list[int] = []
        add_span, add_trace = span_ids.append, trace_ids.append
        managed_span = asynctrace.managed_span
        for _ in range(count // (1 + CHILDREN)):
            with tracer.start_as_current_span("root") as root:
                context = root.get_span_context()
                add_span(context.span_id)
                add_trace(context.trace_id)
                for _ in range(CHILDREN):
                    with managed_span("generation", "child") as child:
                        own = child.get_span_context()
                        assert own.trace_id == context.trace_id
                        add_span(own.span_id)
        assert trace.get_current_span() is trace.INVALID_SPAN
        owner.shutdown()
    with open(out + ".span", "wb") as stream:
        stream.write(b"".join(i.to_bytes(8, "big") for i in span_ids))
    with open(out + ".trace", "wb") as stream:
        stream.write(b"".join(i.to_bytes(16, "big") for i in trace_ids))


if __name__ == "__main__":
    main()
