"""Exporters and span processors of asynctrace (they need the ``sdk`` extra).

:func:`asynctrace.configure` imports this package lazily, only when telemetry
is enabled; ``import asynctrace`` never does.

Example:
    >>> from asynctrace.export import read_chrome_trace
    >>> trace = read_chrome_trace("traces-r0.jsonl")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._queue import QueuedSpanProcessor
from ._sinks import ExporterSink
from ._stats import ExportStats

if TYPE_CHECKING:
    from .chrome import ChromeTrace, ChromeTraceProcessor, read_chrome_trace

_CHROME = frozenset({"ChromeTrace", "ChromeTraceProcessor", "read_chrome_trace"})

__all__ = [
    "ChromeTrace",
    "ChromeTraceProcessor",
    "ExportStats",
    "ExporterSink",
    "QueuedSpanProcessor",
    "read_chrome_trace",
]


def __getattr__(name: str) -> Any:
    """The chrome names, imported on first use: they need msgspec (the sdk extra)."""
    if name in _CHROME:
        from . import chrome

        return getattr(chrome, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
