"""A profiler's spare backend: built ahead on a thread, handed to the next capture."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ._capture_backend import Backend
from ._own_threads import leaving_signals
from ._profiler_backends import BACKENDS
from ._profiling import warn_once
from ._viztracer_tracers import TracersBusy

if TYPE_CHECKING:
    from ._profiler_settings import ProfilerSettings

__all__ = ["FORK_WAIT_S", "SpareBackends"]

FORK_WAIT_S = 2.0  # longest a fork waits for a tracer being built (about 0.1 s)


class SpareBackends:
    """How a profiler keeps one backend ready for its next capture.

    The base of :class:`asynctrace._profiler.Profiler`, which makes every
    attribute declared here (and says what each is).
    """

    settings: ProfilerSettings
    _closed: threading.Event
    _spare: Backend | None
    _preparing: threading.Thread | None
    _spare_lock: threading.Lock

    def _prepare_spare(self) -> None:
        """Build the next capture's backend on a thread, so a step does not wait for it.

        One builder at a time, and none while a spare waits: two would hold two tracers
        where the next step needs one, and once the process may build no more, a step
        could find none free.
        """
        building = self._preparing
        if self._spare is not None or (building is not None and building.is_alive()):
            return

        def build() -> None:
            backend = BACKENDS[self.settings.backend](self.settings)
            try:
                backend.prepare()
            except TracersBusy:  # the step builds or reuses one when it starts, if it can
                return
            except Exception as exc:
                warn_once(f"the {self.settings.backend} profiler could not be prepared", exc)
                return
            with self._spare_lock:
                kept = self._spare is None
                if kept:
                    self._spare = backend
            if not kept:  # one waits already: this one goes back, idle
                backend.discard()
            if self._closed.is_set():  # shut down meanwhile: reused by a later profiler
                self._discard_spare()

        thread = threading.Thread(
            target=leaving_signals(build), name="asynctrace-profile-prepare", daemon=True
        )
        self._preparing = thread
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to be had: the step builds one as it starts
            self._preparing = None
            warn_once(f"the {self.settings.backend} profiler could not be prepared", exc)

    def _take_spare(self) -> Backend | None:
        with self._spare_lock:
            spare, self._spare = self._spare, None
        return spare

    def _build_now(self) -> Backend:
        """A backend for a step that found no spare: built here, or, when every tracer
        is held and the builder on its thread holds one, the builder's (waited for).

        Raises:
            TracersBusy: no tracer is free and none is being handed over.
        """
        backend = BACKENDS[self.settings.backend](self.settings)
        try:
            backend.prepare()
        except TracersBusy:
            building = self._preparing
            if building is None or building is threading.current_thread():
                raise
            building.join(FORK_WAIT_S)  # taking a free tracer: microseconds, not a build
            spare = self._take_spare()
            if spare is None:
                raise
            return spare
        return backend

    def _discard_spare(self) -> None:
        spare = self._take_spare()
        if spare is not None:
            try:
                spare.discard()
            except Exception as exc:
                warn_once(f"the {self.settings.backend} profiler could not be given back", exc)
