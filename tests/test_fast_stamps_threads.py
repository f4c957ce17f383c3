"""Threads setting many attributes on one fast span at once never evict asynctrace's stamps.

Past ``max_attributes``, ``set_attributes`` moves the keys it keeps to the end
of the span's dict; a thread copying the dict at that moment used to miss a
stamp being moved and evict it as an attribute it did not keep.
"""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from asynctrace._fast import FastTracerProvider
from asynctrace._fast._limits import SpanLimits


@pytest.mark.usefixtures("switching")
@pytest.mark.parametrize("size", [3, 25])
def test_stamps_survive_threads_setting_attributes_past_the_limit(size: int) -> None:
    """4 threads x 200 ``set_attributes`` of *size* keys on each of 30 spans with
    max_attributes=20: every span keeps ``rl.bucket`` and ``rl.iteration``, and none
    holds more than 20 attributes."""
    provider = FastTracerProvider(limits=SpanLimits(max_attributes=20))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("threads")
    for _ in range(30):
        span = tracer.start_span("s", attributes={"rl.bucket": "productive", "rl.iteration": 7})

        def write(thread: int, span: object = span) -> None:
            for i in range(200):
                span.set_attributes({f"t{thread}-{i}-{j}": j for j in range(size)})  # type: ignore[attr-defined]

        threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        span.end()
    assert provider.force_flush()
    spans = exporter.get_finished_spans()
    assert len(spans) == 30
    assert [s.attributes["rl.bucket"] for s in spans] == ["productive"] * 30
    assert [s.attributes["rl.iteration"] for s in spans] == [7] * 30
    assert max(len(s.attributes) for s in spans) <= 20
    provider.shutdown()
