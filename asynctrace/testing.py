"""Test helpers: capture finished spans through a real OpenTelemetry SDK pipeline.

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
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ._errors import MissingExtraError
from ._state import enable_telemetry, restore, snapshot

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

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


def _sdk() -> tuple[type[TracerProvider], type[InMemorySpanExporter], type[object]]:
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError as exc:
        raise MissingExtraError("sdk", "opentelemetry.sdk") from exc
    return TracerProvider, InMemorySpanExporter, SimpleSpanProcessor


@contextlib.contextmanager
def capture_spans(span_groups: str = "all") -> Iterator[CapturedSpans]:
    """Turn telemetry on for *span_groups* with an in-memory SDK pipeline.

    Installs a fresh SDK ``TracerProvider`` with a ``SimpleSpanProcessor`` and
    an ``InMemorySpanExporter``, so spans are available as soon as they end.
    The previous telemetry state is restored on exit, even on error. The OTel
    global tracer provider is not touched.

    Args:
        span_groups: the span-group spec to enable (default ``"all"``).

    Example:
        >>> with capture_spans("per_step") as captured:
        ...     pass
        >>> len(captured)
        0
    """
    provider_cls, exporter_cls, processor_cls = _sdk()
    exporter = exporter_cls()
    provider = provider_cls()
    provider.add_span_processor(processor_cls(exporter))  # type: ignore[call-arg, arg-type]
    previous = snapshot()
    enable_telemetry(provider, span_groups=span_groups)
    try:
        yield CapturedSpans(exporter, provider)
    finally:
        restore(previous)
        provider.shutdown()


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
