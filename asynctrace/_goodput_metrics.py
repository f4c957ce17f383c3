"""Goodput as OpenTelemetry metrics: the instruments, and what each finished step records.

Instruments (meter ``asynctrace``), recorded once per finished step:

=====================  =========  ====  =================================================
name                   kind       unit  attributes
=====================  =========  ====  =================================================
``rl.goodput``         gauge      1     none: productive / wall of the last step
``rl.bucket.duration`` counter    s     ``rl.bucket``: productive, overhead, idle,
                                        wasted, unattributed (never negative)
``rl.step.duration``   histogram  s     none: the step's wall time
``<leaf span name>``   histogram  s     none: that leaf's seconds in the step
=====================  =========  ====  =================================================

A leaf's histogram carries the span's name (``rl.policy_update``), so a span
and the metric measuring it have one name. Names one reader would take for
the same series (see :func:`metric_key`: case, ``. _ / -``, a ``_seconds``
ending, past 255 characters) share one histogram; a name meeting a built-in
instrument's gets ``span.`` before it. At most 256 such histograms are made,
values of names past them are counted. ``rl.iteration`` is never an attribute: it grows
without bound, and each value would be a time series of its own.

The gauge and the counter are observable instruments: a step adds its
seconds to running totals (a few float additions on the export thread), and
the SDK reads the totals and the last goodput only when a reader collects
(an export interval, a Prometheus scrape). A synchronous gauge and counter
would run the SDK's measurement path (attribute hashing, locks, exemplar
filters) up to six times a step. What a reader sees is the same: the
cumulative sums of the same additions, and the last step's goodput.

The leaf histograms' names are :mod:`asynctrace._metric_names`'s; the meter
provider is :mod:`asynctrace._meter_setup`'s.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Final

from ._errors import report_internal_error
from ._metric_names import metric_key, span_metric_name
from ._rollup import BUCKETS
from ._step_goodput import StepGoodput

__all__ = ["MAX_SPAN_INSTRUMENTS", "GoodputMetrics"]

logger = logging.getLogger("asynctrace")


MAX_SPAN_INSTRUMENTS: Final = 256
SECONDS_BOUNDARIES: Final = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)
_NAME_CACHE: Final = 4096  # leaf names remembered with their histogram


class _Shared:
    """The observable instruments of one meter provider, reading its latest GoodputMetrics."""

    __slots__ = ("__weakref__", "counter", "gauge", "metrics")

    def __init__(self, metrics: GoodputMetrics) -> None:
        self.metrics = metrics
        self.gauge: Any = None
        self.counter: Any = None

    def observe_goodput(self, options: Any) -> list[Any]:
        return self.metrics._observe_goodput(options)

    def observe_buckets(self, options: Any) -> list[Any]:
        return self.metrics._observe_buckets(options)


# meter provider -> its observable instruments (gone with the provider)
_SHARED: weakref.WeakKeyDictionary[Any, _Shared] = weakref.WeakKeyDictionary()


def _proxy() -> Any:
    """The OpenTelemetry API's global proxy provider (``None`` if this API has none)."""
    try:
        from opentelemetry.metrics import _internal

        return _internal._PROXY_METER_PROVIDER
    except (ImportError, AttributeError):  # pragma: no cover - another API layout
        return None


def _shared_of(meter_provider: Any) -> _Shared | None:
    """The instruments already made on *meter_provider*, else ``None``.

    Instruments made on the API's global proxy before the program set its
    provider live on that provider once it is set (the proxy hands their
    callbacks over): the provider itself, given later (``global`` read
    again), finds them.
    """
    try:
        shared = _SHARED.get(meter_provider)
        if shared is not None:
            return shared
        proxy = _proxy()
        if proxy is None or proxy is meter_provider:
            return None
        if getattr(proxy, "_real_meter_provider", None) is not meter_provider:
            return None
        shared = _SHARED.get(proxy)
    except TypeError:  # a provider that cannot be weakly referenced
        return None
    if shared is not None:
        _keep(meter_provider, shared)
    return shared


def _keep(meter_provider: Any, shared: _Shared) -> None:
    try:
        _SHARED[meter_provider] = shared
    except TypeError:  # a provider that cannot be weakly referenced
        pass


class GoodputMetrics:
    """The instruments, made once; :meth:`record` adds one step (export thread)."""

    def __init__(self, meter_provider: Any) -> None:
        from . import __version__

        meter = meter_provider.get_meter("asynctrace", __version__)
        self._meter = meter
        self._goodput: float | None = None  # the last step's that had one
        # bucket -> seconds of every finished step (a bucket is reported once it has some)
        self._totals = dict.fromkeys((*BUCKETS, "unattributed"), 0.0)
        self._fields = tuple((bucket, f"{bucket}_s") for bucket in self._totals)
        # A meter provider keeps an observable instrument's first callbacks: made again
        # (a configure() again on the program's provider), it would read the first
        # telemetry's numbers for ever. So the instruments are made once per provider
        # and read the latest GoodputMetrics on it, whose totals go on from the last.
        shared = _shared_of(meter_provider)
        if shared is None:
            shared = _Shared(self)
            shared.gauge = meter.create_observable_gauge(
                "rl.goodput",
                callbacks=[shared.observe_goodput],
                unit="1",
                description="productive seconds / wall seconds of a step",
            )
            shared.counter = meter.create_observable_counter(
                "rl.bucket.duration",
                callbacks=[shared.observe_buckets],
                unit="s",
                description="seconds of finished steps by goodput bucket (rl.bucket)",
            )
            _keep(meter_provider, shared)
        else:
            self._totals = shared.metrics._totals  # a counter never goes back
            self._goodput = shared.metrics._goodput
            shared.metrics = self
        self.goodput = shared.gauge
        self.buckets = shared.counter
        self.step = meter.create_histogram(
            "rl.step.duration",
            unit="s",
            description="wall time of a training step",
            explicit_bucket_boundaries_advisory=SECONDS_BOUNDARIES,
        )
        self._bucket_attrs = {b: {"rl.bucket": b} for b in (*BUCKETS, "unattributed")}
        self._spans: dict[str, Any] = {}  # leaf name -> its histogram (up to _NAME_CACHE)
        self._families: dict[str, Any] = {}  # metric_key -> the histogram of those names
        self.untracked = 0  # leaf values not recorded: their name came past the limit
        self._walls: list[float] = []  # queued values of the step histogram
        self._leaf: list[Any] = []  # queued leaf values: name, seconds, name, seconds, ...

    def record(self, record: StepGoodput) -> None:
        """Record one finished step."""
        self.queue(record)
        self.commit()

    def queue(self, record: StepGoodput) -> None:
        """Count one finished step; its histogram values wait for :meth:`commit`.

        The observable instruments read the counts when a reader collects.
        The sink commits once per batch: the histograms' records in a row keep
        the metrics SDK's code and data in the cache (with 10 spans a step,
        metrics added 27-33 µs to a step recorded as it finished, 20-24 µs
        recorded a batch at a time). Only numbers and names wait, no record:
        an object that lives through a batch is work for the garbage
        collector.
        """
        if record.goodput is not None:
            self._goodput = record.goodput
        totals = self._totals
        for bucket, field in self._fields:
            seconds = getattr(record, field)
            if seconds > 0:
                totals[bucket] += seconds
        self._walls.append(record.wall_s)
        leaf = self._leaf
        for name, seconds in record.spans.items():
            leaf.append(name)
            leaf.append(seconds)

    def commit(self) -> None:
        """Record the queued histogram values (the thread that queues them).

        A value that cannot be recorded is reported once and skipped; the
        batch's other values are still recorded.
        """
        walls, self._walls = self._walls, []
        leaf, self._leaf = self._leaf, []
        record = self.step.record
        for seconds in walls:
            try:
                record(seconds)
            except Exception as exc:
                report_internal_error(("goodput metrics", "rl.step.duration"), exc)
        spans = self._spans
        for i in range(0, len(leaf), 2):
            name = leaf[i]
            try:
                histogram = spans.get(name)
                if histogram is None:
                    histogram = self._span_histogram(name)
                    if histogram is None:
                        continue
                histogram.record(leaf[i + 1])
            except Exception as exc:
                report_internal_error(("goodput metrics", "span histogram"), exc)

    def _observe_goodput(self, _options: Any) -> list[Any]:
        """The gauge's reading (on the reader's thread): the last step's goodput."""
        from opentelemetry.metrics import Observation

        goodput = self._goodput
        return [] if goodput is None else [Observation(goodput)]

    def _observe_buckets(self, _options: Any) -> list[Any]:
        """The counter's reading (on the reader's thread): each bucket's total so far."""
        from opentelemetry.metrics import Observation

        attrs = self._bucket_attrs
        return [
            Observation(seconds, attrs[bucket])
            for bucket, seconds in list(self._totals.items())
            if seconds > 0
        ]

    def _span_histogram(self, name: str) -> Any:
        """The histogram of leaf *name*: shared by the names of its :func:`metric_key`."""
        instrument = span_metric_name(name)
        key = metric_key(instrument)
        histogram = self._families.get(key)
        if histogram is None:
            if len(self._families) >= MAX_SPAN_INSTRUMENTS:
                self.untracked += 1
                if self.untracked == 1:
                    logger.warning(
                        "asynctrace: more than %d leaf span names; %r and later new names get "
                        "no duration histogram",
                        MAX_SPAN_INSTRUMENTS,
                        name,
                    )
                return None
            histogram = self._families[key] = self._meter.create_histogram(
                instrument,
                unit="s",
                description=f"seconds of {instrument} spans in a step",
                explicit_bucket_boundaries_advisory=SECONDS_BOUNDARIES,
            )
        if len(self._spans) < _NAME_CACHE:
            self._spans[name] = histogram
        return histogram
