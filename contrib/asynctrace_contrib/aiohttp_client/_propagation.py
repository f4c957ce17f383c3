"""The caller's context on a request: W3C headers, baggage, OpenTelemetry's suppression key."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY as _SUPPRESS_HTTP
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS

import asynctrace

__all__ = ["HANDLED", "get_current", "inject", "suppressed"]

logger = logging.getLogger("asynctrace")


def inject(headers: Any, carrier: dict[str, str]) -> None:
    """Set *carrier*'s headers on a request: a header the caller set is kept, ``baggage``
    gains the scope members, and ``tracestate`` goes only with our own ``traceparent``."""
    own_parent = "traceparent" in headers  # a caller's own traceparent wins
    for key, value in carrier.items():
        if key == "baggage" and key in headers:
            _add_scope_baggage(headers, value)
        elif key == "tracestate" and own_parent:
            continue  # vendor data of our trace: it goes with our traceparent only (W3C)
        else:
            headers.setdefault(key, value)


def _add_scope_baggage(headers: Any, value: str) -> None:
    """Add asynctrace's scope members to the ``baggage`` headers the caller set.

    All of the caller's headers are kept, combined into one; the rules are
    :func:`asynctrace.merge_baggage`'s. Only requests whose caller set
    ``baggage`` come here.
    """
    try:
        values = headers.getall("baggage") if hasattr(headers, "getall") else [headers["baggage"]]
        merged = asynctrace.merge_baggage(values, value)
        if merged is not None:  # else the caller's headers go as they were set
            headers["baggage"] = merged
    except Exception:  # an odd headers object: the caller's headers stay as they are
        logger.debug("asynctrace: could not add the scopes to baggage", exc_info=True)


def _context_reader() -> Callable[[], Any]:
    """The current OpenTelemetry context's reader: its ContextVar's ``get`` when the runtime
    is OpenTelemetry's ContextVar one (not a subclass: one ``OTEL_PYTHON_CONTEXT`` names
    may keep its context elsewhere), two frames less per request than ``get_current()``."""
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    get = getattr(getattr(runtime, "_current_context", None), "get", None)
    if type(runtime) is ContextVarsRuntimeContext and callable(get):
        return get  # type: ignore[no-any-return]
    return otel_context.get_current


get_current = _context_reader()


class _Handled:
    """The value of OpenTelemetry's suppression key while a trace config of ours handles a
    request: true, so the trace configs after ours stand aside; known to us, so a request
    made meanwhile (by a client middleware of the same request) is still ours to handle."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return True


HANDLED = _Handled()


def suppressed() -> bool:
    """Whether an outer layer asked HTTP instrumentations to stand aside (OpenTelemetry's key)."""
    current = get_current()
    http = current.get(_SUPPRESS_HTTP)
    return bool((http and http is not HANDLED) or current.get(_SUPPRESS))
