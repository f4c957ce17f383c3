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
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from . import _stalls
from ._config import PROVIDER_NAMES
from ._errors import ConfigurationError, MissingExtraError
from ._runtime import current_telemetry
from ._state import GATE, GateSnapshot, disable_telemetry, enable_telemetry, restore, snapshot

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import TracerProvider

    from ._runtime import Telemetry

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


def _memory_pipeline(provider: str) -> tuple[Any, InMemorySpanExporter]:
    """A provider of kind *provider* and the in-memory exporter it feeds at once."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        from .export._adapters import LazyMemoryExporter
        from .export._convert import Converter
    except ImportError as exc:
        raise MissingExtraError("sdk", "opentelemetry.sdk") from exc
    from ._fast import IDS, FastTracerProvider, SpanLimits

    if provider == "fast":
        resource = Resource.create({})
        fast = FastTracerProvider(resource)
        memory = LazyMemoryExporter(Converter(resource, fast.limits))
        fast.add_queue(memory)
        return fast, memory
    exporter = InMemorySpanExporter()
    sdk = TracerProvider(
        shutdown_on_exit=False,
        span_limits=SpanLimits().to_sdk(),
        id_generator=IDS,  # type: ignore[arg-type]
    )
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    return sdk, exporter


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
    available as soon as they end. The previous telemetry state is restored on
    exit, even on error, unless the block changed it: telemetry configured
    (or turned off) inside the block stays as it is then, and telemetry that
    was running before and was shut down inside the block is not brought
    back (telemetry is off after the block, as that shutdown left it). The
    OTel global tracer provider is not touched.

    Args:
        span_groups: the span-group spec to enable (default ``"all"``).
        provider: ``"fast"``, ``"sdk"`` or ``None``.
        propagate_scopes: carriers send and restore the scopes (the
            configuration key of the same name).

    Raises:
        ConfigurationError: *provider* (or ``ASYNCTRACE_PROVIDER``) names no provider.

    Example:
        >>> with capture_spans("per_step") as captured:
        ...     pass
        >>> len(captured)
        0
    """
    name = provider if provider is not None else os.environ.get(PROVIDER_ENV, "") or "fast"
    if name.strip().lower() not in PROVIDER_NAMES:
        where = "provider" if provider is not None else PROVIDER_ENV
        raise ConfigurationError(
            f"{where}: {name!r} is not accepted; accepted: {', '.join(PROVIDER_NAMES)}"
        )
    tracer_provider, exporter = _memory_pipeline(name.strip().lower())
    previous = snapshot()
    # The configured telemetry the gate held, if any: shut down inside the block, its
    # provider must not come back (its own shutdown saw our provider on the gate).
    running = current_telemetry()
    owner = running if running is not None and running.provider is previous.provider else None
    enable_telemetry(tracer_provider, span_groups=span_groups, propagate_scopes=propagate_scopes)
    try:
        yield CapturedSpans(exporter, tracer_provider)
    finally:
        _leave(tracer_provider, previous, owner)
        tracer_provider.shutdown()


def _leave(provider: TracerProvider, previous: GateSnapshot, owner: Telemetry | None) -> None:
    """Give the gate back at the end of :func:`capture_spans` (see there)."""
    if GATE.provider is not provider:
        return  # configured, or turned off, inside the block: that is the live state
    if owner is not None and not owner.enabled:
        # What the owner's shutdown skipped while the gate held the capture.
        disable_telemetry()
        _stalls.stop_all()
        _stalls.set_threshold(_stalls.DEFAULT_THRESHOLD_MS)
        return
    restore(previous)


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
