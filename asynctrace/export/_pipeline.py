"""Build the pipeline (provider, export queues, exporters) from validated settings.

Two steps, so that :func:`asynctrace.configure` can fail before it changes
anything: :func:`prepare` imports extras, constructs exporters and checks the
output directory (nothing runs yet); :func:`build` starts the worker threads,
opens files and returns a :class:`Pipeline`.

The provider is asynctrace's fast provider (``provider="fast"``, the
default), a new SDK ``TracerProvider`` (``"sdk"``), or the user's own SDK
provider, to which asynctrace adds its processors (and which it never shuts
down: it is the user's). On an SDK provider asynctrace's processors come
before the user's: the SDK calls them in turn and stops at the first that
raises, so a user's processor that raises cannot keep a span from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .._fast import IDS, FastTracerProvider
from .._output_dir import writable_dir, writable_file
from .._resolved_settings import Settings
from .._semconv import TRUNCATED
from .._state import INSTRUMENTATION_NAME
from ._adapters import ConvertingSink, set_processor_limits
from ._checks import unique_name
from ._convert import Converter
from ._lazy_memory import LazyMemoryExporter
from ._open_spans import OpenSpanTracker
from ._otlp import otlp_exporter, sends_encoded
from ._otlp_wire import WireEncoder
from ._pipeline_queues import queue_limits, start_queues
from ._running_pipeline import Pipeline
from ._sdk_processors import add_first
from ._sinks import ExporterSink

__all__ = ["Plan", "build", "prepare"]


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
            taken = {"chrome", "goodput", *(name for name, _ in plan.exporters)}
            plan.exporters.append((unique_name(type(exporter).__name__, taken), exporter))
    if settings.output_dir is not None:
        directory = writable_dir(settings.output_dir)
        if "chrome" in settings.exporters:
            from . import chrome  # noqa: F401  # fails here, before anything changes, without msgspec

            plan.chrome_path = writable_file(
                directory / settings.chrome_filename, "output_dir", "trace file"
            )
    if settings.goodput is not None:
        from ._goodput_plan import prepare_goodput

        plan.goodput = prepare_goodput(settings)
    return plan


def build(plan: Plan) -> Pipeline:
    """Start the pipeline described by *plan*."""
    settings = plan.settings
    if settings.provider == "fast":
        return _build_fast(plan)
    return _build_sdk(plan)


def _build_fast(plan: Plan) -> Pipeline:
    settings = plan.settings
    resource = Resource.create(dict(settings.resource_attributes))
    limits = settings.span_limits
    provider = FastTracerProvider(resource, sampling=settings.sampling, limits=limits)
    set_processor_limits(provider, queue_limits(settings))  # for the user's processors added later
    converter = Converter(resource, limits)
    encoder = WireEncoder(resource, limits)
    queued = start_queues(
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
        # Its resource is its spans': the chrome file says the same where they overlap, and
        # adds the run's own attributes (run id, rank) the provider does not have.
        chrome_resource = {**settings.resource_attributes, **provider.resource.attributes}
    tracker = OpenSpanTracker(None if own else INSTRUMENTATION_NAME)
    queued = start_queues(
        plan, chrome_resource, ExporterSink, is_open=lambda span_id: span_id in tracker._open
    )
    # The tracker first (truncated spans reach every processor), and all of them
    # before the user's processors, which may raise.
    added: list[Any] = [tracker, *queued]
    memory = None
    if plan.memory:
        memory = InMemorySpanExporter()
        added.append(SimpleSpanProcessor(memory))
    add_first(provider, added)
    return Pipeline(
        provider,
        tracker.end_open_spans,
        queued,
        memory,
        plan.chrome_path,
        owns_provider=own,
        added=tuple(added),
    )
