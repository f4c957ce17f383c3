"""An export queue's counters (:class:`ExportStats`) and the shutdown's summary of them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ExportStats", "summarize"]

logger = logging.getLogger("asynctrace")


@dataclass(frozen=True)
class ExportStats:
    """Counters of one exporter's queue.

    Attributes:
        name: the exporter (``"chrome"``, ``"otlp"``, or a class name).
        exported: spans handed to the exporter without error.
        dropped: spans never handed to it (queue full, or ended after shutdown).
        failed: spans the exporter raised on or reported ``FAILURE`` for, or
            that could not be written (a full disk).
        queued: spans waiting right now.
        in_flight: spans handed to the exporter that it has not returned from
            yet (a stuck exporter holds them). Abandoned at shutdown, these and
            the queued ones are counted as dropped, not here; in-flight spans
            whose stuck export returns after all move to exported or failed.
        lost: spans written to a file that was then deleted or replaced (the
            chrome exporter opens it again at its next write).
        retried: spans sent again after a failed attempt (OTLP; a span sent
            three times counts twice).
        buffered: spans held for retry right now, after a failed attempt (OTLP).
        shortened: spans written with their largest values cut, since their line
            would have been longer than the readers read (chrome; 64 MiB).

    Example:
        >>> ExportStats("chrome", exported=10, dropped=0, failed=0, queued=2).dropped
        0
    """

    name: str
    exported: int
    dropped: int
    failed: int
    queued: int
    in_flight: int = 0
    lost: int = 0
    retried: int = 0
    buffered: int = 0
    shortened: int = 0


def summarize(stats: Sequence[ExportStats]) -> None:
    """Log one line per exporter that dropped or failed spans."""
    for item in stats:
        if item.dropped or item.failed:
            logger.warning(
                "asynctrace: exporter %r dropped %d spans and failed to export %d (%d exported)",
                item.name,
                item.dropped,
                item.failed,
                item.exported,
            )
