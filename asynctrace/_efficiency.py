"""Efficiency spans: a wait charged to its category's idle or wasted bucket, never current."""

from __future__ import annotations

from types import TracebackType

from opentelemetry.trace import Span

from ._builtin_groups import EFFICIENCY as EFFICIENCY_GROUP
from ._builtin_groups import PER_PROMPT as PER_PROMPT_GROUP
from ._cm import SyncAndAsync
from ._efficiency_table import lookup as _lookup  # (under the name the span paths read)
from ._errors import report_internal_error
from ._scopes import SCOPES
from ._semconv import RL_EFFICIENCY_CATEGORY
from ._span_context import finish
from ._span_noop import AMBIENT_SPAN, NOOP_CM, NoopSpanCM, mark_refused, take_refused
from ._span_rules import EFFICIENCY, Attributes
from ._span_start import start
from ._state import GATE

__all__ = ["efficiency_span", "gate_open", "start_wait"]


def gate_open() -> bool:
    """Whether an efficiency span starts here: the ``efficiency`` group is on (or
    ``per_prompt``, inside a per-prompt scope)."""
    enabled = GATE.enabled
    if not enabled:
        return False
    return (PER_PROMPT_GROUP if SCOPES.get().per_prompt else EFFICIENCY_GROUP) in enabled


def start_wait(category: str, attributes: Attributes | None) -> Span | None:
    """Start a wait's span of *category* (not made current): ``None`` if not recorded."""
    name, bucket = _lookup(category)
    attrs: dict[str, object] = dict(attributes) if attributes else {}
    attrs[RL_EFFICIENCY_CATEGORY] = category  # the bucket's reason: no caller's copy replaces it
    return start(name, EFFICIENCY_GROUP, EFFICIENCY, attrs, bucket)  # type: ignore[arg-type]


class _WaitSpan(SyncAndAsync[Span]):
    """An efficiency span for a ``with`` block; deliberately not made current.

    Entered once at a time: a ``with`` on an object already entered (nested on
    itself, or from another task) is reported and runs untraced, like a
    second entry of a ``managed_span``, and its exit does not end the span:
    each refused entry is noted in the context it was made in, so the first
    entry's exit, wherever it comes in the order, is the one that ends it.
    Once exited, the object can be entered again.
    """

    __slots__ = ("_attributes", "_category", "_entered", "_refused", "_span")

    def __init__(self, category: str, attributes: Attributes | None) -> None:
        self._category = category
        self._attributes = attributes
        self._span: Span | None = None
        self._entered = False  # the first entry is open
        self._refused = 0  # refused entries whose exits are still to come

    def __enter__(self) -> Span:
        if self._entered:
            return self._refuse()
        self._entered = True
        try:
            self._span = start_wait(self._category, self._attributes)
        except Exception as exc:  # attributes that are not a mapping, say: never raised
            report_internal_error(("efficiency_span",), exc)
            self._span = None
        return self._span if self._span is not None else AMBIENT_SPAN

    def _refuse(self) -> Span:
        """A second ``with`` while entered: the disabled span; its exit will do nothing."""
        report_internal_error(
            ("reenter", "efficiency"),
            RuntimeError("this efficiency_span() was entered already; make a new one"),
            self._category,
        )
        self._refused += 1  # counted after the report, which raises in strict mode
        mark_refused(self)
        return AMBIENT_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._refused and take_refused(self):  # the exit of a refused entry
            self._refused -= 1
            return
        self._entered = False
        span, self._span = self._span, None
        if span is not None:
            finish(span, exc_type, exc)


def efficiency_span(
    category: str, *, attributes: Attributes | None = None
) -> _WaitSpan | NoopSpanCM:
    """Wrap a *wait* (not work) in a span charged to its category's bucket.

    The span is named ``rl.<category with / replaced by .>`` and carries
    ``rl.efficiency.category``. Its bucket comes from the category table
    (``idle/*`` → idle, ``wasted/*`` → wasted, overrides via
    :func:`set_efficiency_bucket`) and ignores :class:`bucket_scope`. It is not
    made current: a wait encloses no work. Gated on the ``efficiency`` group.

    Example:
        >>> with efficiency_span("idle/refit_bubble"):
        ...     pass  # waiting for weights
    """
    if not gate_open():
        return NOOP_CM
    try:
        _lookup(category)
    except Exception as exc:  # never raise on the span path
        report_internal_error(("efficiency_span",), exc)  # one key: categories vary
        return NOOP_CM
    return _WaitSpan(category, attributes)
