"""The counters of the live goodput rollup (:attr:`asynctrace.Telemetry.goodput`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GoodputStats"]


@dataclass(frozen=True)
class GoodputStats:
    """Counters of the live goodput rollup (:attr:`asynctrace.Telemetry.goodput`).

    Attributes:
        steps: step records made.
        violations: accounting violations found (over-wall, nested-bucket,
            late-bucket, unknown-bucket).
        delivered: records handed to the callbacks.
        dropped: records the callbacks did not finish: their queue was full,
            or, at shutdown, still queued or in a callback still running
            past the 2 s the shutdown waits (that one counts as delivered
            once the callback returns).
        callback_errors: calls of a callback that raised.
        evicted: waits for a parent span given up (``goodput.max_pending``).
        awaited_parents: parent spans that arrived spans wait for right now
            (the open steps and their open subtrees); at shutdown, those
            still awaited when the rollup finished.
        evicted_leaves: bucketed spans of the evicted waits (counted in no step).
        abandoned: waits still open at shutdown: their parent never arrived.
        abandoned_leaves: bucketed spans of those waits (counted in no step).
        dropped_stubs: stamped spans (``rl.iteration``, perhaps steps) of given-up
            waits dropped: past ``goodput.max_pending`` of them waited for their
            parent, so no step among them is reported (logged once at shutdown).
        failed: spans that could not be rolled up (skipped; the first is logged).
        lost_records: lines of ``goodput-r{rank}.jsonl`` that could not be written.
        no_duration_steps: spans that would be steps but have no positive
            duration, so are not (the first is logged).
        no_duration_leaves: bucketed spans under those (counted in no step).
        without_times: spans skipped: a start or end time that is not a finite
            number (the first is logged).
        bad_iterations: spans whose ``rl.iteration`` is not a 64-bit integer
            (ignored, so such a span is no step by it; the first is logged).
        untracked_leaves: leaf durations not recorded in a histogram: their
            name came past the 256 leaf-name instruments (the first is logged).

    Example:
        >>> GoodputStats(steps=3).dropped
        0
    """

    steps: int = 0
    violations: int = 0
    delivered: int = 0
    dropped: int = 0
    callback_errors: int = 0
    evicted: int = 0
    awaited_parents: int = 0
    evicted_leaves: int = 0
    abandoned: int = 0
    abandoned_leaves: int = 0
    dropped_stubs: int = 0
    failed: int = 0
    lost_records: int = 0
    no_duration_steps: int = 0
    no_duration_leaves: int = 0
    without_times: int = 0
    bad_iterations: int = 0
    untracked_leaves: int = 0
