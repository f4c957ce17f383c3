"""The finished span an SDK processor's ``on_start`` changed, on the fast provider."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from asynctrace._fast import FastTracerProvider


def span_after_on_start(on_start: Callable[[Any], None]) -> ReadableSpan:
    """Start and end one span on a fresh fast provider whose processor runs *on_start* on
    it; the span that processor's ``on_end`` gets."""
    seen: list[ReadableSpan] = []

    class Processor(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            on_start(span)

        def on_end(self, span: ReadableSpan) -> None:
            seen.append(span)

    provider = FastTracerProvider(Resource.create({"service.name": "t"}))
    provider.add_span_processor(Processor())
    provider.get_tracer("t").start_span("work").end()
    assert provider.force_flush(5000)
    provider.shutdown()
    (span,) = seen
    return span
