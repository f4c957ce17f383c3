"""OpenTelemetry's aiohttp instrumentation as ours sees it: its wrapper, config and switch."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["has_otel_config", "is_otel_init", "otel_aiohttp_active"]

_OTEL_AIOHTTP = "opentelemetry.instrumentation.aiohttp_client"


def is_otel_init(method: Any) -> bool:
    """Whether *method* is OpenTelemetry's aiohttp ``ClientSession.__init__`` wrapper."""
    wrapper = getattr(method, "_self_wrapper", None)  # wrapt's, as OpenTelemetry wraps
    return getattr(wrapper, "__module__", None) == _OTEL_AIOHTTP


def has_otel_config(configs: Iterable[Any]) -> bool:
    """Whether *configs* holds the trace config OpenTelemetry's instrumentor added."""
    return any(hasattr(c, "_is_instrumented_by_opentelemetry") for c in configs)


def otel_aiohttp_active() -> bool:
    """Whether OpenTelemetry's aiohttp instrumentation adds its trace config to new sessions."""
    module = sys.modules.get(_OTEL_AIOHTTP)
    if module is None:
        return False
    try:
        return bool(module.AioHttpClientInstrumentor().is_instrumented_by_opentelemetry)
    except Exception:
        return False
