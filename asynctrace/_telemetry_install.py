"""How a telemetry handle installs itself: all of it, or (on any error) nothing.

In order: the SIGTERM handler (the one part that can fail for want of
resources), the span-group gate and loop-stall threshold, OpenTelemetry's
global provider, the profiler, the session tracer, the exit hook.
"""

from __future__ import annotations

import atexit
import logging
import threading

from . import _otel_global, _session_tracer, _stalls
from ._errors import ConfigurationError
from ._profiling import install_profiler
from ._sigterm import SigtermHandler
from ._state import GATE, enable_telemetry
from ._telemetry_shutdown import TelemetryShutdown

__all__ = ["TelemetryInstall"]

logger = logging.getLogger("asynctrace")


class TelemetryInstall(TelemetryShutdown):
    """How a :class:`~asynctrace.Telemetry` installs its hooks, the gate and its pipeline.

    A base of :class:`asynctrace._telemetry.Telemetry`, whose ``__init__``
    makes every attribute declared here (and says what each is).
    """

    _owns_global: bool

    def _install(self) -> None:
        """Install everything, or (on any error) nothing: what was installed is undone.

        The SIGTERM handler comes first, as the one part that can fail for
        want of resources (descriptors, a thread); its shutdown, should the
        signal come meanwhile, waits on ``_lock`` until the rest is in place.

        Raises:
            ConfigurationError: the SIGTERM handler could not be set up.
        """
        try:
            with self._lock:
                if self.settings.handle_sigterm:
                    self._install_sigterm()
                self._install_the_rest()
        except BaseException:
            self.shutdown()  # the pipeline's threads, the hooks, the gate: all undone
            raise

    def _install_the_rest(self) -> None:
        pipeline = self._pipeline
        if pipeline is not None:
            _stalls.set_threshold(self.settings.loop_stall_threshold_ms)
            enable_telemetry(
                pipeline.provider,
                span_groups=self.settings.span_groups,
                propagate_scopes=self.settings.propagate_scopes,
            )
            if GATE.loop_stall:  # loops watched under the configuration before: still watched
                _stalls.rearm()
            self._owns_global = _otel_global.claim(pipeline.provider, self._shutdown_global)
            if self._profiler is not None:
                install_profiler(self._profiler)
        if self._sessions is not None:
            _session_tracer.install(self._sessions)
        atexit.register(self._at_exit)
        self._atexit_registered = True

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            logger.warning(
                "asynctrace: handle_sigterm needs configure() on the main thread; "
                "SIGTERM is not handled"
            )
            return
        try:
            self._sigterm = SigtermHandler(self.shutdown)
        except (OSError, RuntimeError) as exc:  # no descriptor or no thread to spare
            raise ConfigurationError(
                f"handle_sigterm: True: the SIGTERM handler could not be set up "
                f"({type(exc).__name__}: {exc}); telemetry is off; accepted: false, or true "
                "when the process can open a pipe and start a thread"
            ) from exc
