"""Where the live rollup's finished steps go: the records' file, the metrics, the callbacks.

Each finished step becomes a :class:`~asynctrace.StepGoodput`: its line of
``goodput-r{rank}.jsonl`` is encoded at once and its histogram values are
queued; both go out together at the end of the batch. The rollup that finishes
the steps is :mod:`asynctrace.export._goodput_sink`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from .._files import AppendFile
from .._goodput import Dispatcher
from .._goodput_metrics import GoodputMetrics
from .._jsonl import encode_lines
from .._meter_setup import MeterSetup
from .._rollup import StepRow, Violation
from .._step_goodput import StepGoodput

__all__ = ["GoodputRecords"]

logger = logging.getLogger("asynctrace")


class GoodputRecords:
    """A finished step's line, metrics and callbacks, sent out batch by batch (export thread)."""

    def __init__(
        self,
        *,
        rank: int,
        role: str | None,
        path: Path | None,
        meters: MeterSetup | None,
        callback_queue: int,
    ) -> None:
        self._rank = rank
        self._role = role
        self._meters = meters if meters is not None else MeterSetup(None)
        self.metrics: GoodputMetrics | None = None
        if self._meters.provider is not None:
            try:
                self.metrics = GoodputMetrics(self._meters.provider)
            except Exception as exc:  # after the swap: run without metrics, not without telemetry
                logger.warning("asynctrace: goodput metrics are off: %r", exc)
        self.dispatcher = Dispatcher(callback_queue)
        self._file = AppendFile(path) if path is not None else None
        self.path = path
        self._lines: list[bytes] = []  # the batch's, written at its end
        self._stamp: tuple[float, dict[str, list[int]]] | None = None  # the batch's time, counts
        self._due = False  # a step finished in this batch: lines and histograms to send out
        self.steps = 0
        # The queue reads it as spans lost with a deleted file: records are not spans,
        # so lines that could not be written are counted in lost_records instead.
        self.lost = 0
        self.lost_records = 0  # lines of the records' file that could not be written
        # (name, exported, dropped, failed) of every export queue (set by the pipeline)
        self.export_counts: Callable[[], list[tuple[str, int, int, int]]] | None = None
        self._warned = False

    def _on_step(self, row: StepRow, violations: list[Violation]) -> None:
        record = StepGoodput.from_row(row, rank=self._rank, role=self._role, violations=violations)
        self.steps += 1
        self._due = True
        if self._file is not None:
            stamp = self._stamp
            if stamp is None:  # the batch's first step: one time, one read of the counters
                stamp = self._stamp = (time.time(), self._exporters())
            line = record.to_dict()
            line["time"], line["exporters"] = stamp
            # Encoded now, kept as bytes: a dict held until the batch's end would be
            # the garbage collector's work (see GoodputMetrics.queue).
            data, skipped = encode_lines((line,))
            if skipped:  # not expected: a record holds numbers and span names
                self._warn("a goodput line could not be encoded", ValueError("left out"))
            else:
                self._lines.append(data)
        if self.metrics is not None:
            try:
                self.metrics.queue(record)
            except Exception as exc:
                self._warn("recording goodput metrics failed", exc)
        self.dispatcher.put(record)

    def _emit(self) -> None:
        """The end of a batch: its lines written, its histogram values recorded in a row."""
        self._due = False
        self._stamp = None
        self._write()
        if self.metrics is not None:
            try:
                self.metrics.commit()
            except Exception as exc:
                self._warn("recording goodput metrics failed", exc)

    def _exporters(self) -> dict[str, list[int]]:
        """``{name: [exported, dropped, failed]}`` of every export queue but this one."""
        counts = self.export_counts
        if counts is None:
            return {}
        try:
            return {name: [e, d, f] for name, e, d, f in counts() if name != "goodput"}
        except Exception:
            return {}

    def _write(self) -> None:
        lines, self._lines = self._lines, []
        if self._file is None or not lines:
            return
        if self._file.moved():
            try:
                self._file.reopen()
            except OSError as exc:
                self.lost_records += len(lines)
                self._warn(f"opening {self.path} again failed", exc)
                return
        written, error = 0, None
        try:
            written, error = self._file.write(b"".join(lines), len(lines))
        except Exception as exc:  # not an OSError (those come back): the lines are lost
            self.lost_records += len(lines)
            self._warn(f"writing {self.path} failed", exc)
            return
        if written < len(lines):
            self.lost_records += len(lines) - max(written, 0)
        if error is not None:
            self._warn(f"writing {self.path} failed", error)

    def _warn(self, message: str, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "asynctrace: goodput: %s (further errors are counted, not logged)",
                message,
                exc_info=exc,
            )
