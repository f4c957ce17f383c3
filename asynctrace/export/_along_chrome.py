"""The chrome writer's sink with the live goodput rollup after it, on the writer's thread."""

from __future__ import annotations

from typing import Any

from .._fast._span import SPAN_TYPES
from ._goodput_sink import GoodputSink

__all__ = ["AlongChrome"]


class AlongChrome:
    """The chrome writer's sink with the rollup after it: one queue, one thread, both.

    With the fast provider, the chrome queue holds the very span objects the
    rollup reads, so the rollup rides on the writer's thread: each batch is
    written, then its spans are rolled up. The ending thread then queues a
    span once, not once more for goodput, and no second worker thread takes
    the interpreter lock from it. What the chrome writer reports is what the
    queue counts; the rollup failing never touches the trace file.

    Example:
        >>> from asynctrace._goodput_settings import GoodputSettings
        >>> class Writer:
        ...     def export(self, batch): return len(batch), 0
        ...     def flush(self): pass
        ...     def shutdown(self): pass
        >>> tee = AlongChrome(Writer(), GoodputSink(GoodputSettings(metrics="none"), path=None))
        >>> tee.export([])
        (0, 0)
        >>> tee.shutdown()
    """

    def __init__(self, writer: Any, goodput: GoodputSink) -> None:
        self.writer = writer
        self.goodput = goodput
        # The rollup takes batches of any size; the writer decides.
        self.any_batch_size = getattr(writer, "any_batch_size", False) is True

    @property
    def lost(self) -> int:
        """The writer's: spans written to a trace file that was then deleted or replaced."""
        lost: int = getattr(self.writer, "lost", 0)
        return lost

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Write *batch*, then roll its spans up (queue control items are the writer's)."""
        result: tuple[int, int] = self.writer.export(batch)
        span_types = SPAN_TYPES
        spans = [item for item in batch if item.__class__ in span_types]
        try:  # counts the spans it skips in its stats, and raises only before it reads one
            self.goodput.export(spans)
        except Exception as exc:
            self.goodput.failed += len(spans)
            self.goodput._warn("a batch could not be rolled up; it is skipped", exc)
        return result

    def flush(self) -> bool:
        """Flush the writer, then the rollup; ``False`` if either could not."""
        try:
            written = self.writer.flush() is not False
        finally:
            rolled = self.goodput.flush() is not False
        return written and rolled

    def shutdown(self) -> None:
        """Close the trace file, then finish every step and write the last records."""
        try:
            self.writer.shutdown()
        finally:
            self.goodput.shutdown()
