"""Test helpers: capture finished spans through a real pipeline, on either provider.

Example:
    >>> from asynctrace import managed_span
    >>> from asynctrace.testing import capture_spans
    >>> with capture_spans("all") as captured:
    ...     with managed_span("reward", "score"):
    ...         pass
    >>> [s.name for s in captured.spans]
    ['score']
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _stalls
from ._config_fields import PROVIDER_NAMES
from ._errors import ConfigurationError, MissingExtraError
from ._forksafe import reinit_at_fork
from ._running import current_telemetry
from ._semconv import TRUNCATED
from ._state import GATE, GateSnapshot, disable_telemetry, enable_telemetry, restore, snapshot

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import TracerProvider

    from ._telemetry import Telemetry

__all__ = ["CapturedSpans", "capture_spans", "span_tree"]


class CapturedSpans:
    """The spans finished inside :func:`capture_spans`, in end order."""

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider) -> None:
        self.exporter = exporter
        self.provider = provider

    @property
    def spans(self) -> list[ReadableSpan]:
        """Finished spans, in the order they ended.

        Example:
            >>> with capture_spans() as captured:
            ...     pass
            >>> captured.spans
            []
        """
        return list(self.exporter.get_finished_spans())

    def clear(self) -> None:
        """Forget the spans captured so far.

        Example:
            >>> with capture_spans() as captured:
            ...     captured.clear()
        """
        self.exporter.clear()

    def by_name(self, name: str) -> list[ReadableSpan]:
        """Finished spans called *name*, in end order.

        Example:
            >>> with capture_spans() as captured:
            ...     captured.by_name("rl.step")
            []
        """
        return [span for span in self.exporter.get_finished_spans() if span.name == name]

    def names(self) -> list[str]:
        """Names of the finished spans, in end order.

        Example:
            >>> with capture_spans() as captured:
            ...     captured.names()
            []
        """
        return [span.name for span in self.exporter.get_finished_spans()]

    def __iter__(self) -> Iterator[ReadableSpan]:
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self.exporter.get_finished_spans())

    def __getitem__(self, index: int) -> ReadableSpan:
        return self.spans[index]


PROVIDER_ENV = "ASYNCTRACE_PROVIDER"


def _memory_pipeline(provider: str) -> tuple[Any, InMemorySpanExporter, Callable[[], int]]:
    """A provider of kind *provider*, the in-memory exporter it feeds at once, and what
    ends the spans still open (tagged truncated) when the capture exits.

    Either kind records every span whatever the environment says: a capture is
    not configured by ``OTEL_TRACES_SAMPLER`` or ``OTEL_SDK_DISABLED`` (the
    SDK provider would read them), as it is not by the ``ASYNCTRACE_*`` keys.
    """
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider, sampling
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError as exc:
        raise MissingExtraError("sdk", "opentelemetry.sdk") from exc
    # asynctrace's own modules: a failure to import them is not a missing extra
    from ._fast import IDS, FastTracerProvider, SpanLimits
    from .export._convert import Converter
    from .export._lazy_memory import LazyMemoryExporter
    from .export._open_spans import OpenSpanTracker

    if provider == "fast":
        resource = Resource.create({})
        fast = FastTracerProvider(resource)
        memory = LazyMemoryExporter(Converter(resource, fast.limits))
        fast.add_queue(memory)
        return fast, memory, lambda: fast.end_open_spans(TRUNCATED)
    exporter = InMemorySpanExporter()
    sdk = TracerProvider(
        shutdown_on_exit=False,
        sampler=sampling.ParentBased(sampling.ALWAYS_ON),  # the default, whatever OTEL_* say
        span_limits=SpanLimits().to_sdk(),
        id_generator=IDS,  # type: ignore[arg-type]
    )
    sdk._disabled = False  # read from OTEL_SDK_DISABLED: a capture records regardless
    tracker = OpenSpanTracker()  # first: the spans it truncates reach the exporter
    sdk.add_span_processor(tracker)
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    return sdk, exporter, tracker.end_open_spans


def _provider_name(provider: object) -> str:
    """The provider *provider* (else ``ASYNCTRACE_PROVIDER``, else ``"fast"``) names,
    as :func:`asynctrace.configure` reads them: a blank variable is unset.

    Raises:
        ConfigurationError: it names no provider.
    """
    where, value = "provider", provider
    if provider is None:
        where, value = PROVIDER_ENV, os.environ.get(PROVIDER_ENV, "")
        if not value.strip():
            return "fast"
    name = value.strip().lower() if isinstance(value, str) else None
    if name is None or name not in PROVIDER_NAMES:
        raise ConfigurationError(
            f"{where}: {value!r} is not accepted; accepted: {', '.join(PROVIDER_NAMES)} "
            "(a capture builds its own provider: pass none of your own)"
        )
    return name


@contextlib.contextmanager
def capture_spans(
    span_groups: str = "all", *, provider: str | None = None, propagate_scopes: bool = False
) -> Iterator[CapturedSpans]:
    """Turn telemetry on for *span_groups* with an in-memory pipeline.

    The spans are recorded by *provider*: ``"fast"`` (asynctrace's own
    provider), ``"sdk"`` (an OpenTelemetry SDK ``TracerProvider`` with a
    ``SimpleSpanProcessor``), or, when ``None``, the ``ASYNCTRACE_PROVIDER``
    variable, else ``"fast"`` (what :func:`asynctrace.configure` uses). Either
    way the spans are SDK ``ReadableSpan`` objects in an in-memory exporter,
    available as soon as they end. The provider records every span: it reads
    neither ``OTEL_TRACES_SAMPLER`` nor ``OTEL_SDK_DISABLED``. Spans still open
    when the block exits are ended then, tagged ``asynctrace.truncated=true``,
    and captured (as a shutdown of :func:`asynctrace.configure` ends them);
    their owners' later ``end()`` does nothing. The previous telemetry state is restored on
    exit, even on error, unless the block changed it: telemetry configured
    (or turned off) inside the block stays as it is then, and telemetry that
    was running before and was shut down inside the block is not brought
    back (telemetry is off after the block, as that shutdown left it).
    Captures that overlap without nesting (two tasks, two threads) may exit in
    any order: the one entered last holds the gate while both are open, and
    once all have exited the state from before the first is back. They are
    not isolated: the gate is process-wide, so while both are open the one
    entered last records the spans of every task and thread, the other none.
    Tests in parallel threads share one capture (and tell their spans apart
    by name or attribute) or run one after another. The OTel global tracer
    provider is not touched.

    Args:
        span_groups: the span-group spec to enable (default ``"all"``).
        provider: ``"fast"``, ``"sdk"`` or ``None``.
        propagate_scopes: carriers send and restore the scopes (the
            configuration key of the same name).

    Raises:
        ConfigurationError: *provider* (or ``ASYNCTRACE_PROVIDER``, unless blank)
            names no provider.

    Example:
        >>> with capture_spans("per_step") as captured:
        ...     pass
        >>> len(captured)
        0
    """
    tracer_provider, exporter, end_open_spans = _memory_pipeline(_provider_name(provider))
    with _lock:
        previous = snapshot()
        # The configured telemetry the gate held, if any: shut down inside the block, its
        # provider must not come back (its own shutdown saw our provider on the gate).
        running = current_telemetry()
        owner = running if running is not None and running.provider is previous.provider else None
        try:
            enable_telemetry(
                tracer_provider, span_groups=span_groups, propagate_scopes=propagate_scopes
            )
        except BaseException:
            tracer_provider.shutdown()
            raise
        _captures[id(tracer_provider)] = _Capture(tracer_provider, previous, owner)
    try:
        yield CapturedSpans(exporter, tracer_provider)
    finally:
        with _lock:
            if GATE.provider is tracer_provider:  # a stall in progress ends with the capture
                _stalls.record_open(GATE.tracer)
            _leave(tracer_provider)
        try:  # as a shutdown of configure()'s does: into the capture, tagged truncated
            end_open_spans()
        finally:
            tracer_provider.shutdown()


@dataclass
class _Capture:
    """A capture's provider, the gate it replaced and the telemetry that gate ran."""

    provider: TracerProvider
    previous: GateSnapshot
    owner: Telemetry | None
    live: bool = True


# Captures by id of their provider: the live ones, and those that exited while a
# capture entered after them was still live (whose snapshot holds their provider).
_captures: dict[int, _Capture] = {}
_lock = threading.Lock()
reinit_at_fork(_lock)


def _leave(provider: TracerProvider) -> None:
    """Give the gate back at the end of :func:`capture_spans` (see there); under ``_lock``.

    Captures that overlap without nesting (two tasks or threads) exit in any
    order. The first to exit leaves the gate to the other (it holds it); the
    last one's snapshot then names the first one's provider, shut down by now,
    so the chain of exited captures is followed back to the state before the
    first of them.
    """
    capture = _captures[id(provider)]
    capture.live = False
    if GATE.provider is provider:
        while True:
            earlier = _captures.get(id(capture.previous.provider))
            if (
                earlier is None
                or earlier.live
                or earlier.provider is not capture.previous.provider
            ):
                break
            capture = earlier
        _give_back(capture)
    # Keep an exited capture only while a live one's chain can still reach it.
    needed: set[int] = set()
    for entry in _captures.values():
        if entry.live:
            key = id(entry.previous.provider)
            while key in _captures and key not in needed:
                needed.add(key)
                key = id(_captures[key].previous.provider)
    for key in [k for k, entry in _captures.items() if not entry.live and k not in needed]:
        del _captures[key]


def _give_back(capture: _Capture) -> None:
    """Restore the gate *capture* replaced, or off if its telemetry was shut down since."""
    owner = capture.owner
    if owner is not None and not owner.enabled:
        # What the owner's shutdown skipped while the gate held the capture.
        disable_telemetry()
        _stalls.stop_all()
        _stalls.set_threshold(_stalls.DEFAULT_THRESHOLD_MS)
        return
    restore(capture.previous)


def span_tree(spans: Sequence[ReadableSpan]) -> dict[int | None, list[ReadableSpan]]:
    """Group *spans* by parent span id (``None`` for roots).

    Example:
        >>> span_tree([])
        {}
    """
    tree: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        tree.setdefault(parent, []).append(span)
    return tree
