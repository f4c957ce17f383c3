"""The fast provider: asynctrace's own OpenTelemetry API ``TracerProvider``.

Installed as the global provider, any OpenTelemetry instrumentation records
through it; its spans (:class:`~._span.FastSpan`) are plain slotted objects that
export threads read after they end. Processors are export queues: on
``end()`` a span is appended to each queue and the work (limits, conversion
to the SDK's ``ReadableSpan`` for SDK exporters and processors, encoding)
happens on the queue's thread. Its tracers (:class:`~._provider.FastTracer`)
start the spans.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.util import types

from .._errors import ConfigurationError
from .._forksafe import reinit_at_fork
from ._forget import MAX_OPEN_SPANS, forget_open_spans, warn_forgotten
from ._ids import IDS, IdGenerator
from ._limits import SpanLimits
from ._provider import FastTracer
from ._sampling import Sampling

if TYPE_CHECKING:
    from ._span import FastSpan

__all__ = ["FastTracerProvider", "Scope"]

logger = logging.getLogger("asynctrace")
_time_ns = time.time_ns
_RANDOM = 0x02  # W3C trace-context level 2: the trace id is random (as the SDK sets it)


def _root_flags(generator: Any) -> int:
    """A root span's trace flags but sampled: W3C's random-trace-id flag when *generator*
    says its trace ids are random (``is_trace_id_random()``, as the SDK asks it)."""
    is_random = getattr(generator, "is_trace_id_random", None)
    if is_random is None:
        return _RANDOM
    try:
        return _RANDOM if is_random() else 0
    except Exception as exc:
        raise ConfigurationError(
            f"id_generator: its is_trace_id_random() raised {exc!r}; accepted: an id "
            "generator whose is_trace_id_random() returns a bool"
        ) from exc


class Scope:
    """The instrumentation scope of a tracer (name, version, schema URL, attributes)."""

    __slots__ = ("attributes", "name", "otlp", "schema_url", "sdk", "version")

    def __init__(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> None:
        self.name = name
        self.version = version
        self.schema_url = schema_url
        self.attributes = dict(attributes) if attributes else None
        self.sdk: Any = None  # the SDK's InstrumentationScope, made by the first conversion
        self.otlp: Any = None  # its OTLP protobuf frame, made by the first encoding

    def __repr__(self) -> str:
        return f"Scope({self.name!r}, {self.version!r})"


class FastTracerProvider(trace.TracerProvider):
    """asynctrace's OpenTelemetry API tracer provider, built for cost.

    Spans are compact slotted objects with no locks; ids come from a
    per-process generator (independent of ``random.seed``, reseeded after
    ``fork``); ``end()`` only appends the span to each export queue.
    :func:`asynctrace.configure` builds one (``provider="fast"``, the default)
    and connects the exporters; SDK ``SpanProcessor`` objects can be added
    with :meth:`add_span_processor` (they run on an export thread, see the
    docs).

    Args:
        resource: the resource (an SDK ``Resource`` or anything with
            ``attributes``); exported with every span.
        sampling: the sampling policy (default: always on, parent based).
        limits: span limits (default: OpenTelemetry's).
        id_generator: where ids come from (default: the process's). Root spans
            carry W3C's random-trace-id flag if its ``is_trace_id_random()``
            says so (asked once), as in the SDK.
        max_open_spans: how many started, not yet ended spans it keeps track of
            (to end them, tagged truncated, at shutdown). Past it a tenth
            is forgotten at a time, the oldest hundredth excepted: counted in
            :attr:`forgotten_spans`, said once in a warning, not truncated at
            shutdown, and still exported if they end later. A positive int.

    Example:
        >>> provider = FastTracerProvider()
        >>> with provider.get_tracer("demo").start_as_current_span("work") as span:
        ...     span.set_attribute("items", 3)
    """

    def __init__(
        self,
        resource: Any = None,
        *,
        sampling: Sampling | None = None,
        limits: SpanLimits | None = None,
        id_generator: IdGenerator | None = None,
        max_open_spans: int = MAX_OPEN_SPANS,
    ) -> None:
        if (
            isinstance(max_open_spans, bool)
            or not isinstance(max_open_spans, int)
            or max_open_spans < 1
        ):
            raise ConfigurationError(
                f"max_open_spans: {max_open_spans!r} is not accepted; expected a positive int"
            )
        self.resource = resource
        self.sampling = sampling if sampling is not None else Sampling()
        self.limits = limits if limits is not None else SpanLimits()
        self.id_generator = id_generator if id_generator is not None else IDS
        self._bits: Callable[[int], int] = getattr(self.id_generator, "bits", None) or (
            self._generated_bits
        )
        self._root_flags = _root_flags(self.id_generator)
        self._bound = self.sampling.bound
        self._parent_based = self.sampling.parent_based
        self._open: dict[int, FastSpan] = {}
        self._max_open = max_open_spans
        self.forgotten_spans = 0
        """Open spans forgotten past ``max_open_spans`` (never ended, most likely)."""
        self._warned_forgotten = False
        self._puts: tuple[Callable[[FastSpan], None], ...] = ()
        self._queued: tuple[Any, ...] = ()  # QueuedSpanProcessor objects: appended to inline
        self._queues: list[Any] = []  # what add_queue/add_span_processor connected
        self._wants_owner = False
        self._closed = False
        self._lock = threading.Lock()
        reinit_at_fork(self._lock)  # held by another thread at fork(): made new in the child

    def _generated_bits(self, count: int) -> int:
        """Ids from an SDK-style generator (``generate_trace_id``/``generate_span_id``)."""
        generator: Any = self.id_generator
        return int(generator.generate_trace_id() if count == 128 else generator.generate_span_id())

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> FastTracer:
        """A tracer for the instrumentation scope *instrumenting_module_name*.

        No name (``None`` or empty) is logged and taken as ``""``, and no
        version is ``""``, as the SDK does.
        """
        if not instrumenting_module_name or not isinstance(instrumenting_module_name, str):
            logger.error("get_tracer called with missing module name.")
            instrumenting_module_name = ""
        if instrumenting_library_version is None:
            instrumenting_library_version = ""
        return FastTracer(
            self,
            Scope(
                instrumenting_module_name, instrumenting_library_version, schema_url, attributes
            ),
        )

    # -- export queues -------------------------------------------------------------

    def add_queue(self, queue: Any, *, tracks: bool = False) -> None:
        """Hand every ended span to *queue*, an export queue of asynctrace's.

        *queue* is a ``QueuedSpanProcessor`` (its bounded deque is appended to
        on the ending thread) or any object with ``put(span)`` (which must only
        queue), ``force_flush(timeout_millis)`` and ``shutdown()``. *tracks*
        asks for each span's starting task or thread (``span._owner``), which
        the chrome exporter draws tracks from.
        """
        with self._lock:
            if hasattr(queue, "_queue") and hasattr(queue, "_max_queue_size"):
                self._queued = (*self._queued, queue)
            else:
                self._puts = (*self._puts, queue.put)
            self._queues.append(queue)
            self._wants_owner = self._wants_owner or tracks

    def add_span_processor(self, span_processor: Any) -> None:
        """Run an SDK ``SpanProcessor`` on every ended span, on an export thread.

        Spans reach it as SDK ``ReadableSpan`` objects: ``on_start`` and
        ``on_end`` are both called when the span has ended, on that thread;
        ``on_start`` may change its own copy, which ``on_end`` then receives
        (``export._starting_span.StartingSpan``).
        """
        from ..export._adapters import processor_queue

        self.add_queue(processor_queue(span_processor, self))

    def queues(self) -> list[Any]:
        """The export queues connected so far (a copy).

        Taken without the lock: only appended to, and ``list()`` of a list is one
        step under the interpreter lock, so a flush from a signal handler that
        interrupted :meth:`add_queue` cannot wait on its own thread.
        """
        return list(self._queues)

    def open_spans(self) -> list[FastSpan]:
        """Spans started and not ended yet (a copy)."""
        return list(self._open.copy().values())

    def _forget(self) -> None:
        """Forget open spans past ``max_open_spans`` (:func:`forget_open_spans`).

        Each keeps a claim token, so that ending it later still exports it once.
        """
        taken = forget_open_spans(self._open, self._max_open, _give_token)
        self.forgotten_spans += len(taken)
        if taken and not self._warned_forgotten:
            self._warned_forgotten = True
            warn_forgotten(self._max_open, "the provider's forgotten_spans")

    def end_open_spans(self, attribute: str) -> int:
        """End every open span now with *attribute* = true, latest first; returns how many.

        Each span is claimed first (taken out of the open spans, as ``end()``
        does), so a span its owner ends at the same moment is queued once,
        and the attribute is set before any export thread can see the span.
        """
        spans = sorted(self.open_spans(), key=lambda span: span._start, reverse=True)
        now = _time_ns()
        ended = 0
        for span in spans:
            if self._open.pop(span._span_id, None) is None:
                continue  # its owner ended it meanwhile
            span.set_attribute(attribute, True)
            span.finish(max(now, span._start))
            ended += 1
        return ended

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything ended so far; ``False`` if a queue did not finish in time."""
        deadline = time.monotonic() + timeout_millis / 1000.0
        ok = True
        for queue in list(self._queues):
            left = max(0.0, deadline - time.monotonic())
            ok = bool(queue.force_flush(int(left * 1000))) and ok
        return ok

    def shutdown(self) -> None:
        """Stop recording (new spans are non-recording) and shut every queue down."""
        self._closed = True
        for queue in list(self._queues):
            queue.shutdown()


def _give_token(span: Any) -> None:
    """A span about to be forgotten gets its claim token first (see ``FastSpan.end``)."""
    span._forgotten = [True]
