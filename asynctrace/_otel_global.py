"""OpenTelemetry's global tracer provider, taken only when nobody else has.

OpenTelemetry lets the global provider be set once per process. So that
third-party instrumentations (``trace.get_tracer(...)``) join asynctrace's
pipeline *and* follow a later reconfiguration, the global is set once to a
switching provider whose tracers forward each call to the provider of the
current :func:`asynctrace.configure` (or to a no-op tracer when telemetry is
off). If the application already installed its own global provider,
asynctrace leaves it alone.

A tracer's ``start_as_current_span`` picks the provider when its block is
entered, not when it is called: ``@tracer.start_as_current_span("x")``
decorates a function once, at import, and each call of that function enters
the block anew, so it follows a reconfiguration made between the two.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.util.types import Attributes

from ._cm import otel_contextmanager
from ._forksafe import reinit_at_fork

__all__ = ["SwitchingTracerProvider", "claim", "release"]


class SwitchingTracerProvider(trace.TracerProvider):
    """A global provider that forwards to whichever provider asynctrace runs now.

    Attributes not defined here (``add_span_processor``, ``force_flush``,
    ``resource``...) are looked up on the current provider.
    """

    def __init__(self) -> None:
        self._target: trace.TracerProvider | None = None
        self._generation = 0

    @property
    def target(self) -> trace.TracerProvider | None:
        """The provider calls are forwarded to (``None``: telemetry off)."""
        return self._target

    def retarget(self, provider: trace.TracerProvider | None) -> None:
        """Forward to *provider* from now on."""
        self._target = provider
        self._generation += 1

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes | None = None,
    ) -> trace.Tracer:
        """A tracer that follows reconfiguration."""
        return _SwitchingTracer(
            self, instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )

    def __getattr__(self, name: str) -> Any:
        target = self.__dict__.get("_target")
        if target is None:
            raise AttributeError(name)
        return getattr(target, name)


class _SwitchingTracer(trace.Tracer):
    def __init__(
        self,
        owner: SwitchingTracerProvider,
        name: str,
        version: str | None,
        schema_url: str | None,
        attributes: Attributes | None,
    ) -> None:
        self._owner = owner
        self._args = (name, version, schema_url, attributes)
        self._seen = -1
        self._tracer: trace.Tracer = trace.NoOpTracer()

    def _current(self) -> trace.Tracer:
        owner = self._owner
        generation = owner._generation
        if generation != self._seen:
            target = owner.target
            if target is None:
                self._tracer = trace.NoOpTracer()
            else:
                name, version, schema_url, attributes = self._args
                if attributes is None:
                    self._tracer = target.get_tracer(name, version, schema_url)
                else:
                    self._tracer = target.get_tracer(name, version, schema_url, attributes)
            self._seen = generation
        return self._tracer

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._current().start_span(*args, **kwargs)

    @otel_contextmanager
    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Iterator[trace.Span]:
        # The current provider's, chosen at entry: as a decorator, at each call.
        with self._current().start_as_current_span(*args, **kwargs) as span:
            yield span


_SWITCH = SwitchingTracerProvider()
_lock = threading.Lock()
reinit_at_fork(_lock)  # a lock held at fork() is made new in the child


def claim(provider: trace.TracerProvider) -> bool:
    """Route the global provider to *provider* if asynctrace may own the global.

    True when the global was still OpenTelemetry's default proxy (it is then
    set, once, to the switching provider) or is already the switching provider.
    """
    with _lock:
        current = trace.get_tracer_provider()
        if current is not _SWITCH:
            if not isinstance(current, trace.ProxyTracerProvider):
                return False  # the application installed its own
            trace.set_tracer_provider(_SWITCH)
            if trace.get_tracer_provider() is not _SWITCH:
                return False  # lost a race with another setter
        _SWITCH.retarget(provider)
        return True


def release(provider: trace.TracerProvider) -> None:
    """Stop forwarding to *provider* (if it is the current target)."""
    with _lock:
        if _SWITCH.target is provider:
            _SWITCH.retarget(None)
