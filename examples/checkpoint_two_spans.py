"""The two-span checkpoint recipe (see docs/boundaries.md); the code lives in the demo package.

Run ``python examples/checkpoint_two_spans.py`` to see the two spans.
"""

from __future__ import annotations

import threading

from asynctrace_contrib.demo.checkpoint import AsyncCheckpointer

import asynctrace as at

__all__ = ["AsyncCheckpointer"]

if __name__ == "__main__":
    telemetry = at.configure({"enabled": True, "span_groups": "all", "exporters": ["memory"]})
    durable = threading.Event()
    checkpointer = AsyncCheckpointer(finalize=lambda step: durable.wait(0.1))
    with at.iteration_scope(7), at.umbrella_span("step", "rl.step"):
        checkpointer.save(7, stage=lambda step: None)
    checkpointer.finalize_pending()
    assert telemetry.memory_exporter is not None
    for span in telemetry.memory_exporter.get_finished_spans():
        print(span.name, dict(span.attributes or {}))
    telemetry.shutdown()
