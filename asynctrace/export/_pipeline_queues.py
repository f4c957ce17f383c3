"""The pipeline's export queues: chrome's, one per exporter, and the live goodput rollup's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._resolved_settings import Settings
from ._queue import QueuedSpanProcessor
from ._retry import RetryingSpanProcessor

if TYPE_CHECKING:
    from ._pipeline import Plan

__all__ = ["queue_limits", "start_queues"]


def queue_limits(settings: Settings) -> dict[str, Any]:
    """The queue limits of *settings*, as every export queue takes them."""
    return {
        "max_queue_size": settings.max_queue_size,
        "max_export_batch_size": settings.max_export_batch_size,
        "schedule_delay_millis": settings.schedule_delay_millis,
    }


def start_queues(
    plan: Plan,
    resource_attributes: Any,
    sink: Callable[[Any], Any],
    convert: Callable[[Any], Callable[[Any], Any] | None] = lambda exporter: None,
    *,
    along_chrome: bool = False,
    is_open: Callable[[int], bool] | None = None,
) -> list[QueuedSpanProcessor]:
    """The chrome processor and one queue per exporter (*sink* wraps each exporter).

    OTLP gets a queue that holds failed batches and retries them;
    ``convert(exporter)`` says what turns its queued spans into what the
    exporter takes (``None``: it takes them as they are). The live goodput
    rollup has a queue of its own, or, with *along_chrome* (the fast
    provider, whose chrome queue holds the spans the rollup reads) and the
    chrome exporter on, runs on the chrome writer's thread after each batch.
    """
    settings = plan.settings
    limits = queue_limits(settings)
    queued: list[QueuedSpanProcessor] = []
    try:
        if plan.chrome_path is not None:
            from .chrome import ChromeTraceProcessor

            queued.append(
                ChromeTraceProcessor(
                    plan.chrome_path,
                    resource_attributes=resource_attributes,
                    max_attribute_length=settings.span_limits.max_attribute_length,
                    max_event_attributes=settings.span_limits.max_event_attributes,
                    max_event_attribute_length=settings.span_limits.max_event_attribute_length,
                    **limits,
                )
            )
        for name, exporter in plan.exporters:
            if name == "otlp":
                queued.append(
                    RetryingSpanProcessor(
                        exporter,
                        name=name,
                        convert=convert(exporter),
                        buffer_spans=settings.retry_buffer_spans,
                        buffer_bytes=settings.retry_buffer_bytes,
                        **limits,
                    )
                )
                continue
            queued.append(QueuedSpanProcessor(sink(exporter), name=name, **limits))
        if plan.goodput is not None:  # the live rollup, fed the spans chrome is fed
            goodput = plan.goodput.start()
            goodput.export_counts = lambda: [(q.name, *q.counts()) for q in queued]
            if is_open is not None:
                goodput.is_open = is_open
            chrome = queued[0] if plan.chrome_path is not None else None
            if chrome is not None and along_chrome:
                from ._along_chrome import AlongChrome

                chrome._sink = AlongChrome(chrome._sink, goodput)
            else:
                queued.append(QueuedSpanProcessor(goodput, name="goodput", **limits))
    except BaseException:
        for processor in queued:
            processor.shutdown_within(1.0)
        raise
    return queued
