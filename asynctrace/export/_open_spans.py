"""Track spans that have started and not ended, to truncate them at shutdown."""

from __future__ import annotations

import time

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .._errors import report_internal_error
from .._semconv import TRUNCATED

__all__ = ["OpenSpanTracker"]


class OpenSpanTracker(SpanProcessor):
    """Keeps a dict of open spans by span id; each entry is removed when its span ends.

    With *scope*, only spans of the tracer of that instrumentation scope are
    kept: on a provider the user owns, asynctrace truncates its own spans and
    leaves the application's alone.

    At shutdown :meth:`end_open_spans` ends what is left, tagged
    ``asynctrace.truncated=true``, so that processors after it still export
    those spans. It must be the first processor of the provider.

    Example:
        >>> tracker = OpenSpanTracker()
        >>> tracker.end_open_spans()
        0
    """

    def __init__(self, scope: str | None = None) -> None:
        self._open: dict[int, Span] = {}
        self._scope = scope

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Remember *span* until it ends (only spans of *scope*'s tracer, if given)."""
        try:
            if self._scope is not None:
                scope = span.instrumentation_scope
                if scope is None or scope.name != self._scope:
                    return
            self._open[span.context.span_id] = span
        except Exception as exc:
            report_internal_error(("open_spans", "on_start"), exc)

    def on_end(self, span: ReadableSpan) -> None:
        """Forget *span*."""
        try:
            self._open.pop(span.context.span_id, None)
        except Exception as exc:
            report_internal_error(("open_spans", "on_end"), exc)

    def __len__(self) -> int:
        return len(self._open)

    def end_open_spans(self) -> int:
        """End every open span now, tagged truncated; returns how many.

        Later-started spans end first, so children reach the exporters
        before their parents, as they would have.
        """
        spans = sorted(self._open.copy().values(), key=_start_time, reverse=True)
        now = time.time_ns()
        for span in spans:
            try:
                if not span.is_recording():
                    continue  # ended meanwhile, on another thread
                span.set_attribute(TRUNCATED, True)
                span.end(end_time=max(now, span.start_time or now))
            except Exception as exc:  # a span ended concurrently, say
                report_internal_error(("open_spans", "truncate"), exc)
        return len(spans)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered."""
        return True


def _start_time(span: Span) -> int:
    return span.start_time or 0
