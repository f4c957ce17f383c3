"""The ``torch`` profiler backend: ``torch.profiler``, exported as a Chrome trace."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from ._capture_backend import Backend

__all__ = ["TorchBackend"]


class TorchBackend(Backend):
    """``torch.profiler``: operators on CPU, and CUDA kernels where CUDA is present."""

    name = "torch"

    def prepare(self) -> None:
        """Build the ``torch.profiler`` profile: CPU operators, and CUDA kernels if present."""
        torch: Any = importlib.import_module("torch")  # imported already, at configuration
        profiler = torch.profiler
        activities = [profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(profiler.ProfilerActivity.CUDA)
        self._record = profiler.record_function
        self._profile = profiler.profile(
            activities=activities,
            record_shapes=self.settings.record_shapes,
            with_stack=self.settings.with_stack,
        )

    def start(self) -> None:
        """Start the profile, then mark the clock; stopped again if the marker raises."""
        self._profile.start()
        try:
            self.mark()
        except BaseException:
            self._profile.stop()  # a profiler left on would run on for good
            raise

    def stop(self) -> None:
        """Mark the clock, then stop the profile."""
        try:
            self.mark()
        finally:  # the profiler stops whatever the marker did: it would run on for good
            self._profile.stop()

    def abandon(self) -> None:
        """Stop the profile without a marker (its capture is not saved)."""
        self._profile.stop()

    def save(self, path: Path) -> None:
        """Export the profile to *path* as a Chrome trace."""
        self._profile.export_chrome_trace(str(path))

    def _marker(self, name: str) -> None:
        with self._record(name):
            pass
