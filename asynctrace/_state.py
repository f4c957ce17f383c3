"""The process-wide gate: which groups are on and which tracer records them."""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.util import types

from . import _group_audit, _groups
from ._cm import otel_contextmanager
from ._config_checks import check_bool
from ._config_fields import span_group_tokens
from ._errors import ConfigurationError
from ._fast._provider import FastTracer
from ._redacting_tracer import redacting_tracer
from ._scopes import SCOPES
from ._span_errors import redacted_block

__all__ = [
    "GATE",
    "disable_telemetry",
    "enable_telemetry",
    "enabled_span_groups",
    "is_span_group_enabled",
    "set_span_groups",
]

INSTRUMENTATION_NAME = "asynctrace"
_LOG = logging.getLogger("asynctrace")


class _Gate:
    """Hot-path state read by every span helper in O(1).

    ``enabled`` is the frozenset of active group names; it is empty whenever
    telemetry is off, so ``if not GATE.enabled`` is the whole disabled path.
    """

    __slots__ = (
        "audit",
        "enabled",
        "loop_stall",
        "propagate_scopes",
        "provider",
        "tokens",
        "tracer",
    )

    def __init__(self) -> None:
        self.enabled: frozenset[str] = frozenset()
        # For a while after the groups are set: called with each name not found enabled
        # (``if GATE.audit is not None: GATE.audit(name)`` on every miss; see _group_audit).
        self.audit: _group_audit.Audit | None = None
        self.loop_stall = False  # "loop_stall" in enabled, kept with it: umbrellas ask it
        self.tracer: trace.Tracer | None = None
        self.provider: trace.TracerProvider | None = None
        self.tokens: tuple[str, ...] = ()
        # Carriers send and restore the scopes (W3C baggage); off unless configured.
        self.propagate_scopes = False

    def __reduce__(self) -> str:
        # By reference: a traced function pickled by value (cloudpickle: Ray, loky,
        # Dask) reads the gate of the process it runs in, not a frozen copy.
        return "GATE"


GATE = _Gate()
_lock = threading.RLock()
_warned_pending: set[str] = set()


@dataclass(frozen=True)
class GateSnapshot:
    """An opaque copy of the gate, for :func:`restore`."""

    enabled: frozenset[str]
    tracer: trace.Tracer | None
    provider: trace.TracerProvider | None
    tokens: tuple[str, ...]
    propagate_scopes: bool = False


def snapshot() -> GateSnapshot:
    """Capture the current gate state."""
    with _lock:
        return GateSnapshot(
            GATE.enabled, GATE.tracer, GATE.provider, GATE.tokens, GATE.propagate_scopes
        )


def restore(state: GateSnapshot) -> None:
    """Put back a state captured by :func:`snapshot`.

    Back to no telemetry (the end of a capture made with telemetry off), the
    names asked for under groups nobody registered are told, as
    :func:`disable_telemetry` tells them; back to a telemetry that is on, they
    are left to its audit and its shutdown.
    """
    with _lock:
        GATE.tracer = state.tracer
        GATE.provider = state.provider
        GATE.tokens = state.tokens
        GATE.enabled = state.enabled
        GATE.propagate_scopes = state.propagate_scopes
        # Groups registered meanwhile may now match the restored spec.
        _recompute()
        off = GATE.tracer is None
    if off:
        _group_audit.report_quietly()


def _recompute() -> None:
    with _lock:
        if GATE.tracer is None:
            GATE.enabled = frozenset()
            GATE.audit = None
            GATE.loop_stall = False
            return
        enabled, pending = _groups.resolve_tokens(GATE.tokens)
        GATE.enabled = enabled
        # for a while, also note spans asked for under groups nobody registered
        GATE.audit = _group_audit.audited(enabled, _end_audit, frozenset(pending))
        GATE.loop_stall = _groups.LOOP_STALL in enabled
    for name in pending:
        if name not in _warned_pending:
            _warned_pending.add(name)
            message = (
                f"asynctrace: span group {name!r} is not registered (yet); it stays pending "
                f"and turns on when a library registers it. {_groups.known_names_message()}"
            )
            try:  # the gate is set: a warnings filter set to "error" must not leave it half done
                warnings.warn(message, stacklevel=4)
            except Exception:
                _LOG.warning(message)


def _end_audit(audit: _group_audit.Audit) -> None:
    """The time of *audit* is over: off the gate, and the report (off the span call
    that closed the window when it runs on an asyncio loop; see ``report_later``)."""
    with _lock:
        if GATE.audit is audit:
            GATE.audit = None
    _group_audit.report_later()


_groups.add_registry_listener(_recompute)


def enable_telemetry(
    tracer_provider: trace.TracerProvider,
    *,
    span_groups: str = "default",
    propagate_scopes: bool = False,
) -> None:
    """Record spans of the groups in *span_groups* through *tracer_provider*.

    The low-level switch that :func:`asynctrace.configure` builds on. It does
    not touch OpenTelemetry's global tracer provider. Names that are not
    registered yet are kept pending (with one warning) and turn on when they
    are registered. An empty *span_groups* (``""``, as a spec built from an
    empty list is) installs the provider with every group off, as
    ``set_span_groups("")`` leaves it. With *propagate_scopes*, carriers also send the
    iteration, per-prompt, task and session scopes as W3C ``baggage`` and
    restore the ones they receive (the ``propagate_scopes`` key of the
    configuration).

    Raises:
        ConfigurationError: *span_groups* is malformed, or the provider is not
            a ``TracerProvider``. Nothing changes in that case.

    Example:
        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> enable_telemetry(TracerProvider(), span_groups="per_step")  # doctest: +SKIP
    """
    # The checks configure() makes of its span_groups and propagate_scopes keys.
    tokens = tuple(span_group_tokens("span_groups", span_groups, empty_means_off=True))
    if not isinstance(tracer_provider, trace.TracerProvider):
        raise ConfigurationError(
            f"tracer_provider: expected an opentelemetry TracerProvider, got {tracer_provider!r}"
        )
    propagate_scopes = check_bool("propagate_scopes", propagate_scopes)
    tracer = tracer_provider.get_tracer(INSTRUMENTATION_NAME, _version())
    with _lock:
        GATE.provider = tracer_provider
        GATE.tracer = tracer
        GATE.tokens = tokens
        GATE.propagate_scopes = propagate_scopes
        _recompute()


def disable_telemetry() -> None:
    """Turn every span group off; span helpers become no-ops again.

    Example:
        >>> disable_telemetry()
        >>> enabled_span_groups()
        frozenset()
    """
    with _lock:
        GATE.enabled = frozenset()
        GATE.audit = None
        GATE.loop_stall = False
        GATE.tracer = None
        GATE.provider = None
        GATE.tokens = ()
        GATE.propagate_scopes = False
    # Names asked for and not registered, and not told yet (a report left to a loop that
    # stopped before running it, a window still open): told now, as a shutdown tells them.
    _group_audit.report_quietly()


def set_span_groups(spec: str) -> frozenset[str]:
    """Change which groups are enabled, keeping the installed provider.

    Takes effect on the next call of every helper and decorated function.
    Returns the enabled set (empty while telemetry is off). An empty *spec*
    (``""``) turns every group off and keeps the provider.

    Example:
        >>> set_span_groups("per_step,per_prompt")  # doctest: +SKIP
    """
    tokens = tuple(span_group_tokens("spec", spec, empty_means_off=True))
    with _lock:
        GATE.tokens = tokens
        _recompute()
        return GATE.enabled


def is_span_group_enabled(group: str) -> bool:
    """Whether spans of *group* opened here and now are recorded.

    Inside a :class:`per_prompt_scope` (or a ``dispatch_scope``) every span is
    gated on ``per_prompt`` instead of its own group, and so is this answer.
    A *group* that no set can hold (a list, say) is reported once on the
    ``asynctrace`` logger and is not enabled.

    Example:
        >>> is_span_group_enabled("job")
        False
    """
    enabled = GATE.enabled
    try:  # free unless it raises
        # The span helpers' gate: off, the scope is not read (an empty set holds nothing).
        if (_groups.PER_PROMPT if enabled and SCOPES.get().per_prompt else group) in enabled:
            return True
    except Exception as exc:
        from ._span_rules import bad_group  # _span_rules imports this module

        bad_group(group, exc)
        return False
    audit = GATE.audit
    if audit is not None:
        audit(group)
    return False


def is_telemetry_enabled() -> bool:
    """Whether asynctrace's telemetry is on in this process, whichever way it was turned on.

    True from :func:`~asynctrace.configure`, :func:`enable_telemetry` (even with
    every group off) or :func:`asynctrace.testing.capture_spans` until
    :func:`disable_telemetry` or the telemetry's shutdown; unlike
    :func:`~asynctrace.current_telemetry`, which answers only for
    :func:`~asynctrace.configure`. A layer that would otherwise configure
    telemetry of its own asks this first.

    Example:
        >>> is_telemetry_enabled()
        False
    """
    return GATE.provider is not None


def enabled_span_groups() -> frozenset[str]:
    """The set of enabled group names (empty when telemetry is off).

    Example:
        >>> enabled_span_groups()
        frozenset()
    """
    return GATE.enabled


def get_tracer() -> trace.Tracer:
    """The OpenTelemetry API tracer asynctrace records through.

    It binds late, as OpenTelemetry's proxy tracer does: each span it starts
    goes to the tracer of the telemetry running when the span starts, so a
    tracer taken at import time, or under a configuration since replaced,
    records into the one running now. While telemetry is off its spans are
    OpenTelemetry's invalid span (non-recording, the current context left as
    it is). Integrations use it for spans whose kind or shape the helpers do
    not cover. On either provider, an exception escaping its
    ``start_as_current_span`` is recorded redacted, as asynctrace's own spans
    record it.

    Example:
        >>> get_tracer().start_span("unconfigured").is_recording()
        False
    """
    return _LATE_TRACER


def _current_tracer() -> tuple[trace.Tracer | None, bool]:
    """The tracer :func:`get_tracer`'s spans go to now: the gate's (an SDK one wrapped
    to record exceptions redacted), or ``None`` while telemetry is off; and whether it
    is asynctrace's own (its spans are made current by :func:`redacted_block`)."""
    tracer = GATE.tracer
    handed = _handed
    if handed[0] is tracer:
        return handed[1], handed[2]
    return _hand(tracer)


def _hand(tracer: trace.Tracer | None) -> tuple[trace.Tracer | None, bool]:
    """What :func:`get_tracer`'s spans go to while the gate holds *tracer* (remembered)."""
    global _handed
    handed: tuple[trace.Tracer | None, trace.Tracer | None, bool]
    if tracer is None or isinstance(tracer, FastTracer):
        handed = (tracer, tracer, tracer is not None)
    else:  # the SDK provider's is wrapped; another provider's tracer is handed as it is
        wrapped = redacting_tracer(tracer)
        handed = (tracer, wrapped, wrapped is not tracer)
    _handed = handed
    return handed[1], handed[2]


class _LateTracer(trace.Tracer):
    """:func:`get_tracer`'s tracer: every span goes to the gate's tracer of the moment."""

    __slots__ = ()

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        """Start a span with the tracer running now (not made current)."""
        tracer = _current_tracer()[0]
        if tracer is None:
            return trace.INVALID_SPAN
        return tracer.start_span(
            name, context, kind, attributes, links, start_time, record_exception,
            set_status_on_exception,
        )  # fmt: skip

    @otel_contextmanager
    def start_as_current_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        """Start a span with the tracer running now, current for the block (also a
        decorator: the tracer is looked up at each call)."""
        tracer, own = _current_tracer()
        if tracer is None:  # as OpenTelemetry's no-op tracer: nothing made current
            yield trace.INVALID_SPAN
            return
        if not own:  # another provider's tracer: made current its own way
            with tracer.start_as_current_span(
                name, context, kind, attributes, links, start_time, record_exception,
                set_status_on_exception, end_on_exit,
            ) as span:  # fmt: skip
                yield span
            return
        span = tracer.start_span(
            name, context, kind, attributes, links, start_time, record_exception,
            set_status_on_exception,
        )  # fmt: skip
        yield from redacted_block(span, end_on_exit, record_exception, set_status_on_exception)


_LATE_TRACER = _LateTracer()
# The gate's tracer last seen by _current_tracer, what get_tracer()'s spans go to while
# it is there, and whether that is asynctrace's own (replaced whole: read without a lock).
_handed: tuple[trace.Tracer | None, trace.Tracer | None, bool] = (None, None, False)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("asynctrace")
    except Exception:
        return "0"
