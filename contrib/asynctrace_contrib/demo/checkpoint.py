"""The two-span checkpoint: a blocking staging span and a durable-when finalize span.

Staging (leaf, ``checkpoint`` group → overhead) is what blocks the loop. The
finalize span is opened from a daemon thread as a *detached* child of the
staging span: it ends when the checkpoint is durable, possibly steps later,
keeps the triggering step's ``rl.iteration`` and carries no bucket (it overlaps
later steps). A failed finalization ends the span with ERROR and is re-raised
from the next ``finalize_pending()``; a failure to *open* the span is logged
and the finalization still runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import asynctrace as at

__all__ = ["AsyncCheckpointer"]


class AsyncCheckpointer:
    """Stage synchronously, finalize in the background, surface failures later."""

    def __init__(self, finalize: Callable[[int], None]) -> None:
        self._finalize = finalize
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, step: int, stage: Callable[[int], None]) -> None:
        """Stage the checkpoint of *step* (blocking), then hand off finalization."""
        with at.managed_span("checkpoint", "rl.checkpointing"):
            self.finalize_pending()  # the previous save must be durable first: part of the cost
            stage(step)
            # Captured inside the staging span: the finalize span is its child
            # and inherits the step's iteration scope.
            self._thread = at.ContextThread(
                target=self._run_finalize,
                args=(step,),
                name=f"checkpoint-finalize-{step}",
                daemon=True,
            )
            self._thread.start()

    def _run_finalize(self, step: int) -> None:
        try:
            with at.detached_span(
                "checkpoint", "rl.checkpoint.finalize", attributes={"rl.iteration": step}
            ):
                self._finalize(step)
        except BaseException as exc:  # re-raised from the caller's next call
            self._error = exc

    def finalize_pending(self, timeout: float | None = None) -> None:
        """Wait for the last finalization; re-raise its failure, once."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError("checkpoint finalization still running")
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error
