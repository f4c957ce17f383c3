"""Scope stamps on SDK spans: put on as a span starts, and kept whole past its limits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

from ._errors import report_internal_error
from ._scopes import SCOPES

__all__ = ["restore_stamps", "stamp_started"]


def stamp_started(span: Any) -> None:
    """Put the current scope stamps on an SDK *span* that has just started (for a span
    processor's ``on_start``): a key the span started with keeps its value, the stamps
    come after its attributes (past its count limit the SDK evicts the oldest: the
    span's own stamp keys are kept, as stamps) and no length limit cuts them. Outside
    scopes, and on a span stamped already (asynctrace's own), a ContextVar read and a
    look-up. Never raises.
    """
    try:
        scopes = SCOPES.get()
        stamps = scopes._stamps
        if stamps is None:
            stamps = scopes.stamps
        if not stamps:
            return
        stored = span._attributes
        missing = {key: value for key, value in stamps.items() if key not in stored}
        if missing:
            maxlen = getattr(stored, "maxlen", None)
            if maxlen is not None and len(stored) + len(missing) > maxlen:
                _stamp_past_the_limit(span, stored, missing)
            else:
                span.set_attributes(missing)
            limits = getattr(span, "_limits", None)
            if getattr(limits, "max_span_attribute_length", None) is not None:
                restore_stamps(span, missing)
    except Exception as exc:
        report_internal_error(("stamp_started", type(span).__name__), exc)


def _stamp_past_the_limit(span: Any, stored: Any, missing: dict[str, Any]) -> None:
    """Add the *missing* stamps to an SDK *span* whose attributes are full: the span's
    own stamp keys (:data:`~._fast._evict.STAMP_KEYS`) count as stamps, kept with their
    own values, and the oldest other attributes are evicted first."""
    own = {key: stored[key] for key in sorted(_stamp_keys().intersection(stored))}
    span.set_attributes(own)  # the newest end: an existing key evicts nothing
    span.set_attributes(missing)
    lost = {key: value for key, value in own.items() if key not in stored}
    if lost:  # more stamps than the limit: the span's own kept, the newest scope stamps go
        span.set_attributes(lost)
        if isinstance(getattr(stored, "dropped", None), int):
            stored.dropped -= len(lost)  # each was counted once when evicted, once again now


_STAMP_KEYS: frozenset[str] | None = None


def _stamp_keys() -> frozenset[str]:
    """The fast provider's ``STAMP_KEYS``, imported at first use (as in :mod:`._span_errors`,
    which that package imports)."""
    global _STAMP_KEYS
    if _STAMP_KEYS is None:
        from ._fast._evict import STAMP_KEYS

        _STAMP_KEYS = STAMP_KEYS
    return _STAMP_KEYS


def restore_stamps(span: trace.Span, attrs: Mapping[str, Any]) -> None:
    """Put the stamps a length limit cut on an SDK *span* back whole, from *attrs* (the
    values it was given)."""
    stored = getattr(getattr(span, "_attributes", None), "_dict", None)
    if isinstance(stored, dict):
        for key in _stamp_keys().intersection(stored):
            value = attrs.get(key)
            if value.__class__ is str:
                stored[key] = value
