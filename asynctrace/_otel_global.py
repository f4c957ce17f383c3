"""OpenTelemetry's global tracer provider, taken only when nobody else has.

OpenTelemetry lets the global provider be set once per process. So that
third-party instrumentations (``trace.get_tracer(...)``) join asynctrace's
pipeline *and* follow a later reconfiguration, the global is set once to a
switching provider whose tracers forward each call to the provider of the
current :func:`asynctrace.configure` (or to a no-op tracer when telemetry is
off). If the application already installed its own global provider,
asynctrace leaves it alone.

An application that sets its own global provider *after* asynctrace took the
slot cannot: OpenTelemetry keeps the first and only logs "Overriding of
current TracerProvider is not allowed". asynctrace notices the refused call
at OpenTelemetry's once-guard of the global (which it replaces, once it has
set the global, by one that refuses alike and says so), whatever the level of
OpenTelemetry's loggers, and explains, once, on its own logger what it means
(the program's provider is not the global, now or after asynctrace's
shutdown) and what to do. Should that guard not be found (another
OpenTelemetry), it watches for OpenTelemetry's record on its logger instead.

A tracer's ``start_as_current_span`` picks the provider when its block is
entered, not when it is called: ``@tracer.start_as_current_span("x")``
decorates a function once, at import, and each call of that function enters
the block anew, so it follows a reconfiguration made between the two.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.util.types import Attributes

from ._cm import otel_contextmanager
from ._forksafe import reinit_at_fork
from ._redacting_tracer import redacting_tracer

try:  # the guard of set_tracer_provider (private: another release may lack it)
    from opentelemetry.util._once import Once
except ImportError:  # pragma: no cover - then the log record alone tells of a late setter
    Once = None  # type: ignore[assignment,misc]

__all__ = ["SwitchingTracerProvider", "claim", "release"]


class SwitchingTracerProvider(trace.TracerProvider):
    """A global provider that forwards to whichever provider asynctrace runs now.

    Attributes not defined here (``add_span_processor``, ``resource``...) are
    looked up on the current provider. ``shutdown`` shuts asynctrace's
    telemetry down, as ``Telemetry.shutdown()`` does, so a program's exit hook
    that shuts the global provider down ends it cleanly (flushed, the groups
    off), not behind asynctrace's back.
    """

    def __init__(self) -> None:
        self._target: trace.TracerProvider | None = None
        self._shutdown: Callable[[], object] | None = None
        self._generation = 0

    @property
    def target(self) -> trace.TracerProvider | None:
        """The provider calls are forwarded to (``None``: telemetry off)."""
        return self._target

    def retarget(
        self,
        provider: trace.TracerProvider | None,
        shutdown: Callable[[], object] | None = None,
    ) -> None:
        """Forward to *provider* from now on; *shutdown* ends the telemetry that runs it."""
        self._target = provider
        self._shutdown = shutdown if provider is not None else None
        self._generation += 1

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the current provider (``True`` when telemetry is off)."""
        flush = getattr(self._target, "force_flush", None)
        return bool(flush(timeout_millis)) if callable(flush) else True

    def shutdown(self) -> None:
        """Shut the running telemetry down (nothing when telemetry is off)."""
        shutdown = self._shutdown
        if shutdown is not None:
            shutdown()

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
        # (generation, its tracer): one object, so two threads that both find it
        # stale never leave an old tracer under a new generation.
        self._tracer: tuple[int, trace.Tracer] = (-1, trace.NoOpTracer())

    def _current(self) -> trace.Tracer:
        owner = self._owner
        generation = owner._generation
        seen, tracer = self._tracer
        if generation != seen:
            target = owner.target
            if target is None:
                tracer = trace.NoOpTracer()
            else:
                name, version, schema_url, attributes = self._args
                if attributes is None:
                    tracer = target.get_tracer(name, version, schema_url)
                else:
                    tracer = target.get_tracer(name, version, schema_url, attributes)
                # An SDK provider's spans redact URLs and exceptions as the fast one's do.
                tracer = redacting_tracer(tracer)
            self._tracer = (generation, tracer)
        return tracer

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

logger = logging.getLogger("asynctrace")
_OVERRIDE_MESSAGE = "Overriding of current TracerProvider is not allowed"


_LATE_SETTER_WARNING = (
    "asynctrace: opentelemetry.trace.set_tracer_provider() was called after "
    "asynctrace.configure() took OpenTelemetry's global tracer provider, which "
    "can be set once per process: the new provider is not the global, and spans "
    "of trace.get_tracer(...) go to asynctrace's pipeline while it runs and "
    "nowhere after its shutdown(). Set the program's provider before the first "
    "configure() (asynctrace then leaves the global alone), or pass its exporter "
    "in asynctrace's exporters"
)
_warned = False
_warned_lock = threading.Lock()
reinit_at_fork(_warned_lock)


def _warn_late_setter() -> None:
    """Explain a refused ``set_tracer_provider`` on asynctrace's logger (once a process)."""
    global _warned
    if trace.get_tracer_provider() is not _SWITCH:
        return
    with _warned_lock:
        if _warned:
            return
        _warned = True
    logger.warning(_LATE_SETTER_WARNING)


class _RefusingOnce(Once or object):  # type: ignore[misc]
    """OpenTelemetry's once-guard of the global provider, done, that tells of a late setter.

    It refuses every ``set_tracer_provider`` as the done guard it replaces
    would (OpenTelemetry then logs its own refusal), and has asynctrace
    explain the refusal first, whatever the level of OpenTelemetry's loggers.
    """

    def __init__(self) -> None:
        super().__init__()
        self._done = True

    def do_once(self, func: Callable[[], None]) -> bool:
        if not self._done:  # reset by the program (`_done = False`, as test fixtures do)
            return bool(super().do_once(func))
        try:
            _warn_late_setter()
        except Exception:  # pragma: no cover - a logging handler's failure stays there
            pass
        return False


class _LateSetterWarning(logging.Filter):
    """Explains OpenTelemetry's refusal of a late ``set_tracer_provider`` from its log record.

    Installed on the ``opentelemetry.trace`` logger only when OpenTelemetry's
    once-guard is not the one :class:`_RefusingOnce` replaces; it lets every
    record through. It sees nothing when that logger's level drops warnings.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _OVERRIDE_MESSAGE:
            _warn_late_setter()
        return True


_late_setter = _LateSetterWarning()


def _watch_late_setters() -> None:
    """After asynctrace set the global: notice a later ``set_tracer_provider``."""
    guard = getattr(trace, "_TRACER_PROVIDER_SET_ONCE", None)
    if guard.__class__ is _RefusingOnce:
        return
    if Once is not None and guard.__class__ is Once and getattr(guard, "_done", None) is True:
        trace._TRACER_PROVIDER_SET_ONCE = _RefusingOnce()
    else:
        logging.getLogger(trace.__name__).addFilter(_late_setter)


def claim(provider: trace.TracerProvider, shutdown: Callable[[], object] | None = None) -> bool:
    """Route the global provider to *provider* if asynctrace may own the global.

    True when the global was still OpenTelemetry's default proxy (it is then
    set, once, to the switching provider) or is already the switching provider.
    *shutdown* is what the global provider's ``shutdown()`` calls meanwhile.
    """
    with _lock:
        current = trace.get_tracer_provider()
        if current is not _SWITCH:
            if not isinstance(current, trace.ProxyTracerProvider):
                return False  # the application installed its own
            trace.set_tracer_provider(_SWITCH)
            if trace.get_tracer_provider() is not _SWITCH:
                return False  # lost a race with another setter
            _watch_late_setters()
        _SWITCH.retarget(provider, shutdown)
        return True


def release(provider: trace.TracerProvider) -> None:
    """Stop forwarding to *provider* (if it is the current target)."""
    with _lock:
        if _SWITCH.target is provider:
            _SWITCH.retarget(None)
