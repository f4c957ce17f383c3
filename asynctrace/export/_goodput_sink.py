"""The live goodput rollup: a sink on its own export queue.

Ended spans reach it like any exporter: the ending thread appends the span
to a bounded queue (:class:`~asynctrace.export._queue.QueuedSpanProcessor`)
and nothing else. On the queue's worker thread, :class:`GoodputSink` reads
each span's fields as the chrome exporter writes them (µs, the same
category) and feeds the core rollup (:mod:`asynctrace._rollup`), the code
``asynctrace goodput`` runs on the files. Each finished step becomes a
:class:`~asynctrace.StepGoodput`: a line of ``goodput-r{rank}.jsonl``, the
metrics, and the callbacks' queue.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._fast._span import SPAN_TYPES
from .._files import AppendFile
from .._goodput import Dispatcher, GoodputStats, StepGoodput
from .._goodput_metrics import GoodputMetrics, MeterSetup, meter_provider_for
from .._goodput_settings import GoodputSettings
from .._jsonl import encode_lines
from .._rollup import Rollup, StepRow, Violation
from .._semconv import GROUP, RL_BUCKET
from .._settings import Settings

__all__ = ["AlongChrome", "GoodputPlan", "GoodputSink", "goodput_filename", "prepare_goodput"]

logger = logging.getLogger("asynctrace")

_CALLBACK_DRAIN_S = 2.0


def goodput_filename(rank: int, role: str | None) -> str:
    """``goodput-r{rank}.jsonl``, or ``goodput-{role}-r{rank}.jsonl`` for other roles.

    Example:
        >>> goodput_filename(1, "driver")
        'goodput-driver-r1.jsonl'
    """
    if role in (None, "worker"):
        return f"goodput-r{rank}.jsonl"
    return f"goodput-{role}-r{rank}.jsonl"


class GoodputPlan:
    """The goodput block checked (extras imported, port free), nothing started."""

    def __init__(self, settings: Settings, goodput: GoodputSettings) -> None:
        self.settings = settings
        self.goodput = goodput
        self.path: Path | None = None
        if goodput.file and settings.output_dir is not None:
            self.path = Path(settings.output_dir) / goodput_filename(settings.rank, settings.role)

    def start(self) -> GoodputSink:
        """Set the meter provider up and make the sink."""
        settings, goodput = self.settings, self.goodput
        try:
            meters = meter_provider_for(
                goodput,
                settings.resource_attributes,
                settings.local_rank,
                settings.otlp_metrics_protocol,
            )
        except Exception as exc:  # the port was taken since prepare(): run without metrics
            logger.warning("asynctrace: goodput metrics are off: %s", exc)
            meters = MeterSetup(None)
        if meters.address is not None:
            logger.info(
                "asynctrace: goodput metrics for Prometheus on http://%s:%d/metrics",
                *meters.address,
            )
        return GoodputSink(
            goodput,
            rank=settings.rank,
            role=settings.role,
            path=self.path,
            meters=meters,
        )


def prepare_goodput(settings: Settings) -> GoodputPlan | None:
    """Check the ``goodput`` block before anything starts (``None``: it is off).

    Raises:
        MissingExtraError: the metrics exporter's extra is not installed.
        ConfigurationError: the Prometheus port is taken.
    """
    goodput: GoodputSettings | None = getattr(settings, "goodput", None)
    if goodput is None:
        return None
    metrics = goodput.metrics
    if not isinstance(metrics, str):
        _check_meter_provider(metrics)
    elif metrics in ("otlp", "console", "prometheus"):
        from .._errors import MissingExtraError

        try:
            import opentelemetry.sdk.metrics
        except ImportError as exc:
            raise MissingExtraError("sdk", "opentelemetry.sdk") from exc
        if metrics == "otlp":
            from .._goodput_metrics import _otlp_metric_exporter

            _otlp_metric_exporter(settings.otlp_metrics_protocol)  # the extra, its settings
        elif metrics == "prometheus":
            try:
                import opentelemetry.exporter.prometheus  # noqa: F401
                import prometheus_client  # noqa: F401
            except ImportError as exc:
                raise MissingExtraError("prometheus", "opentelemetry.exporter.prometheus") from exc
            _check_port(goodput, settings.local_rank)
    plan = GoodputPlan(settings, goodput)
    if plan.path is not None:  # a directory in its place fails here, not after the swap
        from .._files import writable_file

        writable_file(plan.path, "output_dir", "goodput file")
    return plan


def _check_meter_provider(provider: Any) -> None:
    """The program's provider must give the meter, before anything is swapped."""
    from .. import __version__
    from .._errors import ConfigurationError

    try:
        provider.get_meter("asynctrace", __version__)
    except Exception as exc:
        raise ConfigurationError(
            f"goodput.metrics: {provider!r} could not give a meter ({type(exc).__name__}: "
            f"{exc}); accepted: global, none, otlp, console, prometheus, or an OpenTelemetry "
            "MeterProvider object"
        ) from None


def _check_port(goodput: GoodputSettings, local_rank: int | None) -> None:
    """The endpoint's host must resolve to an address of this machine, its port be free.

    The host resolves as the endpoint's server resolves it. With port 0 (any
    free port), or the very address and port of this process's own endpoint
    (it is stopped before the new one starts), only the host is tried. An
    address that shares the port with this process's own endpoint without
    being its address (a wildcard on either side) is refused: that endpoint
    would be stopped before the new one found out whether it can listen.

    Raises:
        ConfigurationError: naming ``goodput.prometheus_host`` or ``goodput.prometheus_port``.
    """
    from .._errors import ConfigurationError
    from .._goodput_metrics import endpoint, listen_error, prometheus_port, serving

    port = prometheus_port(goodput, local_rank)  # ConfigurationError past 65535
    host = goodput.prometheus_host
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise listen_error(host, port, exc, "LOCAL_RANK") from None
    family, kind, proto, _, address = infos[0]
    same, overlapped = serving(str(address[0]), port) if port else (False, None)
    if overlapped is not None:
        raise ConfigurationError(
            f"goodput.prometheus_host: {host!r} ({endpoint(str(address[0]), port)}) shares "
            f"the port with this process's running endpoint: this process already serves "
            f"goodput metrics on {endpoint(overlapped, port)}; accepted: that host "
            f"({overlapped}) to take the endpoint over, another port, or an address that "
            "does not overlap it"
        )
    tried = 0 if not port or same else port
    try:
        with socket.socket(family, kind, proto) as probe:
            # As the endpoint's server does: a port whose last connections linger
            # (TIME_WAIT) can be listened on; one that is listened on cannot.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((address[0], tried, *address[2:]))
    except OSError as exc:
        raise listen_error(host, port, exc, "LOCAL_RANK") from None


class AlongChrome:
    """The chrome writer's sink with the rollup after it: one queue, one thread, both.

    With the fast provider, the chrome queue holds the very span objects the
    rollup reads, so the rollup rides on the writer's thread: each batch is
    written, then its spans are rolled up. The ending thread then queues a
    span once, not once more for goodput, and no second worker thread takes
    the interpreter lock from it. What the chrome writer reports is what the
    queue counts; the rollup failing never touches the trace file.

    Example:
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


class GoodputSink:
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
        self._rank = rank
        self._role = role
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
        self._meters = meters if meters is not None else MeterSetup(None)
        self.metrics: GoodputMetrics | None = None
        if self._meters.provider is not None:
            try:
                self.metrics = GoodputMetrics(self._meters.provider)
            except Exception as exc:  # after the swap: run without metrics, not without telemetry
                logger.warning("asynctrace: goodput metrics are off: %r", exc)
        self.dispatcher = Dispatcher(settings.callback_queue)
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
        self.failed = 0  # spans that could not be rolled up
        self._awaited_at_finish: int | None = None
        # (name, exported, dropped, failed) of every export queue (set by the pipeline)
        self.export_counts: Callable[[], list[tuple[str, int, int, int]]] | None = None
        # Whether a span (by its id) is open in this process (set by the pipeline): a
        # remote parent still open here (an in-process server's client) will arrive.
        self.is_open: Callable[[int], bool] = _never
        self._warned = False
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

    # -- records ----------------------------------------------------------------

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

    def _warn(self, message: str, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "asynctrace: goodput: %s (further errors are counted, not logged)",
                message,
                exc_info=exc,
            )


def _never(_span_id: int) -> bool:
    return False
