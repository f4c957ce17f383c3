"""The demo's two-part checkpoint for the benchmark's other tracers (benchmark only).

The anchor (``_demo_areal.py``) and the floor (``_demo_floor.py``) run the
demo's work (``asynctrace_contrib.demo``) with another tracer; the job itself
is the demo's own (``_job.drive``). What they share besides lives here:
:class:`TwoPartCheckpointer`, which stages a checkpoint on the loop and
finalizes it in a thread started in the staging span's context; each tracer
gives only the span around each part (:meth:`TwoPartCheckpointer.scope`).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from asynctrace_contrib.demo._job import cpu

__all__ = ["TwoPartCheckpointer"]


class TwoPartCheckpointer:
    """Stage on the caller's thread (8 ms of CPU), finalize in a thread of its own."""

    def __init__(self, finalize: Callable[[int], None]) -> None:
        self._finalize = finalize
        self._thread: threading.Thread | None = None

    def scope(self, name: str, step: int) -> AbstractContextManager[Any]:
        """The span around one part of the checkpoint of *step*."""
        raise NotImplementedError

    def save(self, step: int) -> None:
        """Stage the checkpoint of *step*, then hand its finalization to a thread."""
        with self.scope("rl.checkpointing", step):
            self.finalize_pending()
            cpu(8)
            # In the staging span's context, as the demo's ContextThread starts it.
            context = contextvars.copy_context()
            self._thread = threading.Thread(
                target=context.run, args=(self._run, step), daemon=True
            )
            self._thread.start()

    def _run(self, step: int) -> None:
        with self.scope("rl.checkpoint.finalize", step):
            self._finalize(step)

    def finalize_pending(self, timeout: float | None = None) -> None:
        """Wait for the last finalization."""
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
