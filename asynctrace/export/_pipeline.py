"""Build the pipeline (provider, export queues, exporters) from validated settings.

Two steps, so that :func:`asynctrace.configure` can fail before it changes
anything: :func:`prepare` imports extras, constructs exporters and checks the
output directory (nothing runs yet); :func:`build` starts the worker threads,
opens files and returns a :class:`Pipeline`.

The provider is asynctrace's fast provider (``provider="fast"``, the
default), a new SDK ``TracerProvider`` (``"sdk"``), or the user's own SDK
provider, to which asynctrace adds its processors (and which it never shuts
down: it is the user's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .._errors import report_internal_error
from .._fast import IDS, FastTracerProvider
from .._files import writable_dir, writable_file
from .._semconv import TRUNCATED
from .._settings import Settings
from .._state import INSTRUMENTATION_NAME
from ._adapters import ConvertingSink, LazyMemoryExporter
from ._convert import Converter
from ._open_spans import OpenSpanTracker
from ._otlp import otlp_exporter, sends_encoded
from ._otlp_wire import WireEncoder
from ._queue import ExporterSink, ExportStats, QueuedSpanProcessor
from ._retry import RetryingSpanProcessor

__all__ = ["Pipeline", "Plan", "build", "prepare"]

_MAX_WAIT_S = threading.TIMEOUT_MAX / 2


@dataclass
class Plan:
    """Everything checked and constructed, nothing started."""

    settings: Settings
    exporters: list[tuple[str, Any]] = field(default_factory=list)
    memory: bool = False
    chrome_path: Path | None = None
    goodput: Any = None  # a GoodputPlan: the live goodput rollup's queue


def prepare(settings: Settings) -> Plan:
    """Import extras, construct exporters, create and check the output directory.

    Raises:
        ConfigurationError: an exporter rejected its configuration, or the
            output directory cannot be created or written.
        MissingExtraError: ``otlp`` was asked for without its extra (``otlp``,
            or ``otlp-grpc`` for the ``grpc`` protocol).
    """
    plan = Plan(settings)
    for exporter in settings.exporters:
        if exporter == "otlp":
            plan.exporters.append(("otlp", otlp_exporter(settings.otlp_protocol)))
        elif exporter == "console":
            plan.exporters.append(("console", ConsoleSpanExporter()))
        elif exporter == "memory":
            plan.memory = True
        elif not isinstance(exporter, str):
            plan.exporters.append((type(exporter).__name__, exporter))
    if settings.output_dir is not None:
        directory = writable_dir(settings.output_dir)
        if "chrome" in settings.exporters:
            from . import chrome  # noqa: F401  # fails here, before anything changes, without msgspec

            plan.chrome_path = writable_file(
                directory / settings.chrome_filename, "output_dir", "trace file"
            )
    if settings.goodput is not None:
        from ._goodput_sink import prepare_goodput

        plan.goodput = prepare_goodput(settings)
    return plan


class Pipeline:
    """A running provider and its export queues."""

    def __init__(
        self,
        provider: trace.TracerProvider,
        end_open_spans: Callable[[], int],
        queued: list[QueuedSpanProcessor],
        memory: InMemorySpanExporter | None,
        chrome_path: Path | None,
        *,
        owns_provider: bool = True,
    ) -> None:
        self.provider = provider
        self.end_open_spans = end_open_spans
        self.queued = queued
        self.memory = memory
        self.chrome_path = chrome_path
        self.owns_provider = owns_provider

    def flush(self, timeout_s: float) -> bool:
        """Export everything ended so far, waiting at most *timeout_s* in total.

        The user's span processors added to the provider are flushed too: on
        the fast provider each has an export queue, flushed like asynctrace's
        own (its ``force_flush`` runs on that queue's thread); on an SDK
        provider, ``provider.force_flush`` runs on a helper thread that is
        waited for until the deadline, since an SDK processor's flush may not
        honour its timeout.
        """
        deadline = time.monotonic() + min(max(0.0, timeout_s), _MAX_WAIT_S)
        queues = list(self.queued)
        provider = self.provider
        if isinstance(provider, FastTracerProvider):
            for queue in provider.queues():
                if isinstance(queue, QueuedSpanProcessor) and queue not in queues:
                    queues.append(queue)
        waits = [processor.request_flush() for processor in queues]
        ok = True
        for done in waits:
            left = min(max(0.0, deadline - time.monotonic()), _MAX_WAIT_S)
            if done is not None and not done.wait(left):
                ok = False
        for processor in queues:  # anything dropped or failed since the last flush: False
            if processor.lost_since_last_check():
                ok = False
        if not isinstance(provider, FastTracerProvider):
            ok = _flush_sdk_provider(provider, deadline) and ok
        return ok

    def shutdown(self, timeout_s: float) -> tuple[bool, int]:
        """End open spans (truncated), drain and stop every exporter within *timeout_s*.

        Returns ``(finished in time, number of truncated spans)``.
        """
        deadline = time.monotonic() + min(max(0.0, timeout_s), _MAX_WAIT_S)
        truncated = self.end_open_spans()
        queues = list(self.queued)
        if isinstance(self.provider, FastTracerProvider):  # the user's processors' queues too
            queues += [q for q in self.provider.queues() if isinstance(q, QueuedSpanProcessor)]
            queues = list(dict.fromkeys(queues))
        for processor in queues:
            processor.begin_shutdown()
        ok = True
        for processor in queues:
            if not processor.wait_shutdown(deadline - time.monotonic()):
                ok = False
        try:
            if self.owns_provider:  # the tracker, the memory exporter, and any user processor
                self.provider.shutdown()  # type: ignore[attr-defined]
            elif self.memory is not None:
                self.memory.shutdown()
        except Exception as exc:  # a user's span processor raised in its shutdown()
            report_internal_error(("shutdown", "provider"), exc)
            ok = False
        return ok, truncated

    def stats(self) -> list[ExportStats]:
        """Counters of every queued exporter."""
        return [processor.stats() for processor in self.queued]


def _flush_sdk_provider(provider: Any, deadline: float) -> bool:
    """``provider.force_flush`` on a helper thread, waited for until *deadline*."""
    left = max(0.0, deadline - time.monotonic())
    result: list[bool] = []

    def run() -> None:
        try:
            result.append(bool(provider.force_flush(int(left * 1000))))
        except Exception as exc:
            report_internal_error(("flush", "provider"), exc)
            result.append(False)

    helper = threading.Thread(target=run, name="asynctrace-flush", daemon=True)
    helper.start()
    helper.join(left)
    return bool(result) and result[0]


def build(plan: Plan) -> Pipeline:
    """Start the pipeline described by *plan*."""
    settings = plan.settings
    if settings.provider == "fast":
        return _build_fast(plan)
    return _build_sdk(plan)


def _limits(settings: Settings) -> dict[str, Any]:
    return {
        "max_queue_size": settings.max_queue_size,
        "max_export_batch_size": settings.max_export_batch_size,
        "schedule_delay_millis": settings.schedule_delay_millis,
    }


def _start_queues(
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
    limits = _limits(settings)
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
                from ._goodput_sink import AlongChrome

                chrome._sink = AlongChrome(chrome._sink, goodput)
            else:
                queued.append(QueuedSpanProcessor(goodput, name="goodput", **limits))
    except BaseException:
        for processor in queued:
            processor.shutdown_within(1.0)
        raise
    return queued


def _build_fast(plan: Plan) -> Pipeline:
    settings = plan.settings
    resource = Resource.create(dict(settings.resource_attributes))
    limits = settings.span_limits
    provider = FastTracerProvider(resource, sampling=settings.sampling, limits=limits)
    converter = Converter(resource, limits)
    encoder = WireEncoder(resource, limits)
    queued = _start_queues(
        plan,
        resource.attributes,
        lambda exporter: ConvertingSink(exporter, converter),
        lambda exporter: encoder.encode if sends_encoded(exporter) else converter.readable,
        along_chrome=True,
        is_open=lambda span_id: span_id in provider._open,
    )
    for processor in queued:
        provider.add_queue(processor, tracks=processor.name == "chrome")
    memory = None
    if plan.memory:
        memory = LazyMemoryExporter(converter)
        provider.add_queue(memory)
    return Pipeline(
        provider, lambda: provider.end_open_spans(TRUNCATED), queued, memory, plan.chrome_path
    )


def _build_sdk(plan: Plan) -> Pipeline:
    settings = plan.settings
    own = settings.provider == "sdk"
    provider: TracerProvider
    if own:
        provider = TracerProvider(
            resource=Resource.create(dict(settings.resource_attributes)),
            shutdown_on_exit=False,
            sampler=settings.sampling.to_sdk(),
            span_limits=settings.span_limits.to_sdk(),
            id_generator=IDS,  # type: ignore[arg-type]  # the SDK's interface, not its class
        )
        chrome_resource: Any = provider.resource.attributes
    else:
        provider = settings.provider  # the user's, checked by the configuration
        chrome_resource = {**provider.resource.attributes, **settings.resource_attributes}
    tracker = OpenSpanTracker(None if own else INSTRUMENTATION_NAME)
    provider.add_span_processor(tracker)  # first: truncated spans reach every processor
    queued = _start_queues(
        plan, chrome_resource, ExporterSink, is_open=lambda span_id: span_id in tracker._open
    )
    for processor in queued:
        provider.add_span_processor(processor)
    memory = None
    if plan.memory:
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
    return Pipeline(
        provider, tracker.end_open_spans, queued, memory, plan.chrome_path, owns_provider=own
    )
