"""Who is whose parent among captured spans, by name."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from asynctrace.testing import CapturedSpans


def parent_name(captured: CapturedSpans, span: ReadableSpan) -> str | None:
    """The name of *span*'s parent among the captured spans (None: a root, or not captured)."""
    names = {s.context.span_id: s.name for s in captured.spans}
    return None if span.parent is None else names.get(span.parent.span_id)


def parents(captured: CapturedSpans) -> dict[str, str | None]:
    """Each span's name -> its parent's name (None for a root)."""
    ids = {s.context.span_id: s.name for s in captured.spans}
    return {s.name: ids.get(s.parent.span_id) if s.parent else None for s in captured.spans}
