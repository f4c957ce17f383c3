"""The live goodput rollup: a sink on its own export queue.

Ended spans reach it like any exporter: the ending thread appends the span
to a bounded queue (:class:`~asynctrace.export._queue.QueuedSpanProcessor`)
and nothing else. On the queue's worker thread, :class:`GoodputSink` reads
each span's fields as the chrome exporter writes them (µs, the same
category) and feeds the core rollup (:mod:`asynctrace._rollup`), the code
``asynctrace goodput`` runs on the files. Each finished step becomes a
:class:`~asynctrace.StepGoodput`: a line of ``goodput-r{rank}.jsonl``, the
metrics, and the callbacks' queue.

Those records are :mod:`asynctrace.export._goodput_records`'s, the goodput
block's checks :mod:`asynctrace.export._goodput_plan`'s, and the rollup riding
on the chrome writer's thread :mod:`asynctrace.export._along_chrome`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._fast._span import SPAN_TYPES
from .._goodput_settings import GoodputSettings
from .._goodput_stats import GoodputStats
from .._jsonl import encode_lines
from .._meter_setup import MeterSetup
from .._rollup import Rollup, Violation
from .._semconv import GROUP, RL_BUCKET
from ._goodput_records import GoodputRecords

__all__ = ["GoodputSink"]

logger = logging.getLogger("asynctrace")

_CALLBACK_DRAIN_S = 2.0


class GoodputSink(GoodputRecords):
    """The rollup, its records' file and metrics, on the export thread.

    Example:
        >>> sink = GoodputSink(GoodputSettings(metrics="none"), path=None)
        >>> sink.export([])
        (0, 0)
        >>> sink.shutdown()
    """

    def __init__(
        self,
        settings: GoodputSettings,
        *,
        rank: int = 0,
        role: str | None = None,
        path: Path | None = None,
        meters: MeterSetup | None = None,
    ) -> None:
        self.rollup = Rollup(
            step_name=re.compile(settings.step_name) if settings.step_name else None,
            window=settings.window,
            grace_us=settings.grace_s * 1e6,
            on_step=self._on_step,
            keep=False,
            max_pending=settings.max_pending,
            on_violation=self._on_violation,
        )
        self._violation_kinds: set[str] = set()  # kinds logged once already
        super().__init__(
            rank=rank, role=role, path=path, meters=meters, callback_queue=settings.callback_queue
        )
        self.failed = 0  # spans that could not be rolled up
        self._awaited_at_finish: int | None = None
        # Whether a span (by its id) is open in this process (set by the pipeline): a
        # remote parent still open here (an in-process server's client) will arrive.
        self.is_open: Callable[[int], bool] = _never
        self._noted = 0  # spans of no duration, no finite times or no integer rl.iteration
        self._noted_kinds: set[str] = set()

    # -- Sink API ---------------------------------------------------------------

    def export(self, batch: list[Any]) -> tuple[int, int]:
        """Feed *batch* to the rollup; finished steps go out as they finish."""
        rollup = self.rollup
        account = rollup._account  # add_span's body, without its call
        is_open = self.is_open
        span_types = SPAN_TYPES
        failed = 0
        for item in batch:
            try:
                cls = item.__class__
                if cls in span_types:
                    start = item._start // 1000
                    end = item._end // 1000
                    if not end >= start:
                        if not end < start:  # NaN or infinite (// 1000 of inf is NaN)
                            rollup._without_ids += 1  # as the file's line: dur null
                            continue
                        end = start
                    attrs = item._attributes  # its stamps are never cut (as in the file)
                    cat = attrs.get(GROUP) or attrs.get(RL_BUCKET) or item._tracer.scope.name
                    high = item._trace_id << 64
                    parent = item._parent_id
                    account(
                        item._name,
                        item._span_id | high,
                        parent | high if parent else None,
                        start,
                        end,
                        attrs,
                        cat,
                        0,
                        item._parent_remote and not is_open(parent),
                    )
                else:
                    self._sdk_span(item)
            except Exception as exc:
                failed += 1
                self._warn("a span could not be rolled up; it is skipped", exc)
        if failed:
            self.failed += failed
        if rollup.void_steps + rollup.without_ids + rollup.bad_iterations != self._noted:
            self._note()
        if self._due:
            try:
                self._emit()
            except Exception as exc:  # the spans are rolled up: only records can be lost here
                self._warn("a batch's records could not be sent out", exc)
        return len(batch) - failed, failed

    def flush(self) -> bool:
        """Lines are written batch by batch, and made durable here (``False`` if the disk
        refused); a step still within its grace stays open."""
        if self._file is None:
            return True
        error = self._file.sync()
        if error is not None:
            self._warn("the goodput file could not be made durable", error)
        return error is None

    def shutdown(self) -> None:
        """Finish every step, write the last lines, stop the callbacks and metrics."""
        awaited = self.rollup.awaited()  # finish() settles them
        try:
            self.rollup.finish()
        except Exception as exc:
            self._warn("the rollup could not finish", exc)
        self._awaited_at_finish = awaited
        self._note()
        dropped = self.rollup.dropped_stubs
        if dropped:  # counted as they go, told once: only the rollup's end knows the total
            logger.warning(
                "asynctrace: goodput: %d stamped span%s of given-up waits %s dropped, past "
                "goodput.max_pending of them waiting for their parent: no step among them "
                "is reported (counted in Telemetry.goodput.dropped_stubs)",
                dropped,
                "s" if dropped != 1 else "",
                "were" if dropped != 1 else "was",
            )
        self._emit()
        self.dispatcher.close(_CALLBACK_DRAIN_S)
        stats = self.stats()
        end = {"kind": "end", "time": time.time(), "rank": self._rank, "role": self._role}
        end |= {"goodput": dataclasses.asdict(stats), "exporters": self._exporters()}
        self._lines.append(encode_lines((end,))[0])
        self._write()
        if self._file is not None:
            self._file.close()
        try:
            self._meters.shutdown(2.0)
        except Exception as exc:
            self._warn("the metrics could not be shut down", exc)

    # -- what the rollup counts ------------------------------------------------

    def _note(self) -> None:
        """Log the first span of each kind that the rollup counts but cannot use."""
        rollup, kinds = self.rollup, self._noted_kinds
        self._noted = rollup.void_steps + rollup.without_ids + rollup.bad_iterations
        if rollup.void_steps and "void" not in kinds:
            kinds.add("void")
            self._log_note(rollup.void_note(), "no_duration_steps")
        if rollup.without_ids and "times" not in kinds:
            kinds.add("times")
            self._log_note(
                "a span whose start or end time is not a finite number was skipped",
                "without_times",
            )
        if rollup.bad_iterations and "iteration" not in kinds:
            kinds.add("iteration")
            self._log_note(rollup.bad_iteration_note(), "bad_iterations")

    def _log_note(self, message: str, field: str) -> None:
        logger.warning(
            "asynctrace: goodput: %s (further ones are counted in Telemetry.goodput.%s, "
            "not logged)",
            message,
            field,
        )

    def _on_violation(self, violation: Violation) -> None:
        """Log the first violation of each kind; the rest are counted in the stats."""
        if violation.kind in self._violation_kinds:
            return
        self._violation_kinds.add(violation.kind)
        logger.warning(
            "asynctrace: goodput: [%s] %s (further %s violations are counted in "
            "Telemetry.goodput.violations, not logged)",
            violation.kind,
            violation.message,
            violation.kind,
        )

    def stats(self) -> GoodputStats:
        """The counters (any thread)."""
        dispatcher = self.dispatcher
        rollup = self.rollup
        delivered, dropped = dispatcher.counts()
        return GoodputStats(
            steps=self.steps,
            violations=rollup.violation_count,
            delivered=delivered,
            dropped=dropped,
            callback_errors=dispatcher.errors,
            evicted=rollup.evicted,
            awaited_parents=(
                rollup.awaited() if self._awaited_at_finish is None else self._awaited_at_finish
            ),
            evicted_leaves=rollup.evicted_leaves,
            abandoned=rollup.abandoned,
            abandoned_leaves=rollup.abandoned_leaves,
            dropped_stubs=rollup.dropped_stubs,
            failed=self.failed,
            lost_records=self.lost_records,
            no_duration_steps=rollup.void_steps,
            no_duration_leaves=rollup.void_leaves,
            without_times=rollup.without_ids,
            bad_iterations=rollup.bad_iterations,
            untracked_leaves=self.metrics.untracked if self.metrics is not None else 0,
        )

    # -- SDK spans --------------------------------------------------------------

    def _sdk_span(self, span: Any) -> None:
        """An SDK ``ReadableSpan`` (the ``sdk`` provider, or the program's own)."""
        ctx = span.context
        parent = span.parent
        attrs: Mapping[str, Any] = span.attributes or {}
        scope = span.instrumentation_scope
        start = span.start_time // 1000
        dur = span.end_time // 1000 - start
        end = start + (dur if dur > 0 or dur != dur else 0)  # NaN: add_span skips it
        category = (attrs.get(GROUP) or attrs.get(RL_BUCKET)) if attrs else None
        cat = category if category.__class__ is str else (scope.name if scope else "span")
        self.rollup.add_span(
            span.name,
            ctx.trace_id,
            ctx.span_id,
            parent.span_id if parent is not None else 0,
            start,
            end,
            attrs,
            cat,
            0,
            parent is not None and parent.is_remote and not self.is_open(parent.span_id),
        )


def _never(_span_id: int) -> bool:
    return False
