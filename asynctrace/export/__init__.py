"""Exporters and span processors of asynctrace (they need the ``sdk`` extra).

:func:`asynctrace.configure` imports this package lazily, only when telemetry
is enabled; ``import asynctrace`` never does.

Example:
    >>> from asynctrace.export import read_chrome_trace
    >>> trace = read_chrome_trace("traces-r0.jsonl")  # doctest: +SKIP
"""

from __future__ import annotations

from ._queue import ExporterSink, ExportStats, QueuedSpanProcessor
from .chrome import ChromeTrace, ChromeTraceProcessor, read_chrome_trace

__all__ = [
    "ChromeTrace",
    "ChromeTraceProcessor",
    "ExportStats",
    "ExporterSink",
    "QueuedSpanProcessor",
    "read_chrome_trace",
]
