"""Track spans that have started and not ended, to truncate them at shutdown."""

from __future__ import annotations

import logging
import time

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .._errors import report_internal_error
from .._fast._forget import MAX_OPEN_SPANS, forget_open_spans, warn_forgotten
from .._forksafe import call_in_child
from .._sdk_stamps import stamp_started
from .._semconv import TRUNCATED
from .._span_redacting import redact_started
from .._state import INSTRUMENTATION_NAME

__all__ = ["OpenSpanTracker"]

logger = logging.getLogger("asynctrace")


class OpenSpanTracker(SpanProcessor):
    """Keeps a dict of open spans by span id; each entry is removed when its span ends.

    With *scope*, only spans of the tracer of that instrumentation scope are
    kept: on a provider the user owns, asynctrace truncates its own spans and
    leaves the application's alone.

    At shutdown :meth:`end_open_spans` ends what is left, tagged
    ``asynctrace.truncated=true``, so that processors after it still export
    those spans. It must be the first processor of the provider.

    It keeps at most *max_open_spans*: past it, a tenth of the bound is
    forgotten at a time, the oldest hundredth excepted (counted in
    :attr:`forgotten`, said once in a warning); they are not truncated at
    shutdown, and are exported as usual if they end.

    Example:
        >>> tracker = OpenSpanTracker()
        >>> tracker.end_open_spans()
        0
    """

    def __init__(self, scope: str | None = None, max_open_spans: int = MAX_OPEN_SPANS) -> None:
        self._open: dict[int, Span] = {}
        self._scope = scope
        self._max_open = max(1, max_open_spans)
        self.forgotten = 0
        """Open spans forgotten past ``max_open_spans``."""
        self._warned = False
        call_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        """A forked child forgets the parent's open spans.

        They are the parent's to end, and one may have been inside ``end()``
        on another thread at the fork: its span lock would be held forever
        in the child, and truncating it there would hang.
        """
        self._open = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Remember *span* until it ends (only spans of *scope*'s tracer, if given)."""
        try:
            if self._scope is not None:
                scope = span.instrumentation_scope
                if scope is None or scope.name != self._scope:
                    return
            stamp_started(span)  # the scope stamps, on spans started straight from a tracer
            if self._scope is None:  # asynctrace's own provider: every tracer's spans redact
                scope = span.instrumentation_scope  # (asynctrace's: attributes redacted)
                redact_started(span, scope is None or scope.name != INSTRUMENTATION_NAME)
            opened = self._open
            opened[span.context.span_id] = span
            if len(opened) > self._max_open:
                self._forget()
        except Exception as exc:
            report_internal_error(("open_spans", "on_start"), exc)

    def _forget(self) -> None:
        """Forget open spans past the bound (see ``forget_open_spans``)."""
        forgotten = len(forget_open_spans(self._open, self._max_open))
        self.forgotten += forgotten
        if forgotten and not self._warned:
            self._warned = True
            warn_forgotten(self._max_open, "the tracker's forgotten")

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
                _quiet(span)
            except Exception as exc:  # a span ended concurrently, say
                report_internal_error(("open_spans", "truncate"), exc)
        return len(spans)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered."""
        return True


_LATE_CALLS = (
    "add_event",
    "add_link",
    "end",
    "record_exception",
    "set_attribute",
    "set_attributes",
    "set_status",
    "update_name",
)


def _ignore(*args: object, **kwargs: object) -> None:
    """What a truncated span does when its program ends it (or sets things on it) later."""


def _quiet(span: Span) -> None:
    """Make the program's later calls on a span asynctrace truncated silent no-ops.

    The program still holds the span and will end it (and perhaps record an
    exception or set a status on it) when its block exits; the SDK would log
    "Calling end() on an ended span" for each, one line per truncated span.
    The shutdown has already said, in one line, how many spans it truncated.
    """
    for name in _LATE_CALLS:
        try:
            setattr(span, name, _ignore)
        except (AttributeError, TypeError):  # a span type without an instance dict
            return


def _start_time(span: Span) -> int:
    return span.start_time or 0
