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

import logging
import threading
import time
from collections.abc import Callable, Iterable
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
from .._own_threads import leaving_signals
from .._semconv import TRUNCATED
from .._settings import Settings
from .._state import INSTRUMENTATION_NAME
from ._adapters import ConvertingSink, LazyMemoryExporter, set_processor_limits
from ._checks import unique_name
from ._convert import Converter
from ._open_spans import OpenSpanTracker
from ._otlp import otlp_exporter, sends_encoded
from ._otlp_wire import WireEncoder
from ._queue import QueuedSpanProcessor
from ._retry import RetryingSpanProcessor
from ._sinks import ExporterSink
from ._stats import ExportStats

__all__ = ["Pipeline", "Plan", "build", "prepare"]

logger = logging.getLogger("asynctrace")

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
        added: tuple[Any, ...] = (),
    ) -> None:
        self.provider = provider
        self.end_open_spans = end_open_spans
        self.queued = queued
        self.memory = memory
        self.chrome_path = chrome_path
        self.owns_provider = owns_provider
        self._added = added  # the processors asynctrace added to an SDK provider

    def flush(self, timeout_s: float) -> bool:
        """Export everything ended so far, waiting at most *timeout_s* in total.

        The user's span processors added to the provider are flushed too: on
        the fast provider each has an export queue, flushed like asynctrace's
        own (its ``force_flush`` runs on that queue's thread); on an SDK
        provider, their ``force_flush`` runs on a helper thread that is
        waited for until the deadline, since an SDK processor's flush may not
        honour its timeout. Called on an export queue's own thread (an
        exporter that flushes from ``export``), that queue is not waited for.
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
            ok = _flush_sdk_provider(provider, deadline, self._added) and ok
        return ok

    def shutdown(self, timeout_s: float) -> tuple[bool, int]:
        """End open spans (truncated), drain and stop every exporter within *timeout_s*.

        Returns ``(finished in time, number of truncated spans)``. An SDK
        provider's own ``shutdown`` (its processors', the user's included) runs
        on a helper thread that is waited for until the deadline: an SDK
        ``BatchSpanProcessor`` with a stuck exporter would hold it for 30 s.
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
            if not self.owns_provider:  # the user's, left running: only the memory exporter stops
                _remove(self.provider, self._added)
                if self.memory is not None:
                    self.memory.shutdown()
            elif isinstance(self.provider, FastTracerProvider):  # its queues are closing already
                self.provider.shutdown()
            elif not _shutdown_sdk_provider(self.provider, deadline, self._added):
                ok = False  # the tracker, the memory exporter or a user's processor is stuck
        except Exception as exc:  # a user's span processor raised in its shutdown()
            report_internal_error(("shutdown", "provider"), exc)
            ok = False
        return ok, truncated

    def keep_open(self, exporters: Iterable[Any]) -> None:
        """Leave these exporter objects running when this pipeline shuts down.

        The next configuration lists them again and exports to them: at
        shutdown they are flushed instead of shut down. Called before
        :meth:`shutdown`.
        """
        keep = {id(exporter) for exporter in exporters}
        if not keep:
            return
        for processor in self.queued:
            sink = processor._sink
            if isinstance(sink, ExporterSink) and id(sink.exporter) in keep:
                processor._sink = _KeptOpen(sink)

    def stats(self) -> list[ExportStats]:
        """Counters of every queued exporter, the user's span processors on the fast
        provider included, and of the memory exporter once a span failed to convert."""
        queues = list(self.queued)
        if isinstance(self.provider, FastTracerProvider):
            queues += [q for q in self.provider.queues() if isinstance(q, QueuedSpanProcessor)]
        stats = [processor.stats() for processor in dict.fromkeys(queues)]
        if isinstance(self.memory, LazyMemoryExporter) and self.memory.failed:
            stats.append(self.memory.stats())
        return stats


class _KeptOpen:
    """An exporter's sink whose ``shutdown`` flushes it and leaves it running."""

    def __init__(self, sink: ExporterSink) -> None:
        self._inner = sink

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """The wrapped sink's export."""
        return self._inner.export(batch)

    def flush(self) -> bool:
        """The wrapped sink's flush."""
        return self._inner.flush()

    def shutdown(self) -> None:
        """Flush only: the exporter goes on serving the next configuration."""
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:  # lost, any_batch_size: the wrapped sink's
        return getattr(self._inner, name)


def _processors_of(provider: Any) -> tuple[Any, ...] | None:
    """The span processors of an SDK provider, in order; ``None`` if they cannot be read.

    The SDK keeps them in a tuple, ``_active_span_processor._span_processors``,
    replaced whole under ``_active_span_processor._lock`` (every version since 1.0).
    """
    processors = getattr(
        getattr(provider, "_active_span_processor", None), "_span_processors", None
    )
    return processors if isinstance(processors, tuple) else None


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def _add_first(provider: Any, processors: list[Any]) -> None:
    """Put *processors* before those *provider* has already (the user's).

    The SDK's multi-processor calls its processors in turn and does not catch:
    one that raises in ``on_start`` or ``on_end`` stops the ones after it. Where
    the processors cannot be reached, they are added the public way, after.
    """
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    if _processors_of(provider) is not None and isinstance(lock, _LOCK_TYPES):
        with lock:  # add_span_processor replaces the tuple under this lock too
            multi._span_processors = (*processors, *multi._span_processors)  # type: ignore[union-attr]
        return
    for processor in processors:
        provider.add_span_processor(processor)


def _remove(provider: Any, processors: tuple[Any, ...]) -> None:
    """Take *processors* off *provider* again (the user's, which keeps running).

    Left on it, they would run, stopped, for every later span, and pile up
    over reconfigurations. Where the processors cannot be reached (they were
    added the public way), they stay.
    """
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    if not processors or _processors_of(provider) is None or not isinstance(lock, _LOCK_TYPES):
        return
    ours = {id(processor) for processor in processors}
    with lock:  # add_span_processor replaces the tuple under this lock too
        multi._span_processors = tuple(  # type: ignore[union-attr]
            p
            for p in multi._span_processors  # type: ignore[union-attr]
            if id(p) not in ours
        )


def _run_within(run: Callable[[], None], name: str, timeout_s: float) -> None:
    """*run* on a daemon helper thread, waited for at most *timeout_s*.

    Where no thread can be started (Python 3.12 refuses one in an ``atexit``
    hook, where shutdown runs), *run* runs here, unbounded: better late than
    never run.
    """
    helper = threading.Thread(target=leaving_signals(run), name=name, daemon=True)
    try:
        helper.start()
    except RuntimeError:
        run()
        return
    helper.join(min(max(0.0, timeout_s), _MAX_WAIT_S))


def _flush_sdk_provider(provider: Any, deadline: float, skip: tuple[Any, ...] = ()) -> bool:
    """The provider's flush on a helper thread, waited for until *deadline*.

    The processors in *skip* (asynctrace's, flushed already) are left out
    when the provider's processors can be read: flushed from this helper,
    an exporter that flushes from its own ``export`` would wait for itself.
    """
    left = max(0.0, deadline - time.monotonic())
    processors = _processors_of(provider)
    skipped = {id(processor) for processor in skip}
    result: list[bool] = []

    def run() -> None:
        try:
            if processors is None:
                result.append(bool(provider.force_flush(int(left * 1000))))
                return
            ok = True
            for processor in processors:
                if id(processor) in skipped:
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ok = False
                    break
                ok = processor.force_flush(int(remaining * 1000)) is not False and ok
            result.append(ok)
        except Exception as exc:
            report_internal_error(("flush", "provider"), exc)
            result.append(False)

    _run_within(run, "asynctrace-flush", left)
    return bool(result) and result[0]


def _shutdown_sdk_provider(provider: Any, deadline: float, added: tuple[Any, ...]) -> bool:
    """``provider.shutdown()`` on a helper thread, waited for until *deadline*.

    ``False`` when it did not finish: the helper (a daemon thread) is
    abandoned with the processors still shutting down, which are named in one
    warning. What ``shutdown`` raised is raised here.
    """
    outcome: list[Exception | None] = []
    ours = {id(processor) for processor in added}
    processors = _processors_of(provider)
    others = [p for p in processors or () if id(p) not in ours]

    def run() -> None:
        try:
            provider.shutdown()
        except Exception as exc:  # a user's span processor raised in its shutdown()
            outcome.append(exc)
        else:
            outcome.append(None)

    if processors is not None and not others:  # asynctrace's own, stopped already: quick
        run()
    else:  # a user's processor answers within a moment even when the budget is spent
        _run_within(run, "asynctrace-shutdown", max(deadline - time.monotonic(), 0.05))
    if not outcome:
        logger.warning(
            "asynctrace: the tracer provider's shutdown did not finish within the shutdown "
            "timeout; abandoned with its span processors still shutting down (%s)",
            ", ".join(type(p).__name__ for p in others) or "unknown",
        )
        return False
    if outcome[0] is not None:
        raise outcome[0]
    return True


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
                from ._along_chrome import AlongChrome

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
    set_processor_limits(provider, _limits(settings))  # for the user's processors added later
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
        # Its resource is its spans': the chrome file says the same where they overlap, and
        # adds the run's own attributes (run id, rank) the provider does not have.
        chrome_resource = {**settings.resource_attributes, **provider.resource.attributes}
    tracker = OpenSpanTracker(None if own else INSTRUMENTATION_NAME)
    queued = _start_queues(
        plan, chrome_resource, ExporterSink, is_open=lambda span_id: span_id in tracker._open
    )
    # The tracker first (truncated spans reach every processor), and all of them
    # before the user's processors, which may raise.
    added: list[Any] = [tracker, *queued]
    memory = None
    if plan.memory:
        memory = InMemorySpanExporter()
        added.append(SimpleSpanProcessor(memory))
    _add_first(provider, added)
    return Pipeline(
        provider,
        tracker.end_open_spans,
        queued,
        memory,
        plan.chrome_path,
        owns_provider=own,
        added=tuple(added),
    )
