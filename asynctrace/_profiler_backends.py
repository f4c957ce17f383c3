"""The profilers a step can be captured with, behind one small interface.

``python``: viztracer (function calls and asyncio tasks, as Chrome trace
events). ``torch``: ``torch.profiler`` (CPU, and CUDA where present), exported
as a Chrome trace. Each is an extra; a missing one is reported when the
configuration is read.

Clocks. A backend's events are on its own timeline. While the capture runs,
:meth:`Backend.mark` records a named marker event and the wall clock (epoch
microseconds, the spans' clock) just before and after it; after saving,
:func:`finish_capture` finds the markers in the file. Each gives an offset
(the middle of its wall-clock interval minus the marker's timestamp) and an
error bound (half that interval); the capture's offset is their mean, and its
error the largest half-interval plus half the spread between the offsets.
Both are written into the file under ``otherData.asynctrace``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import MissingExtraError

if TYPE_CHECKING:
    from ._profiling import ProfilerSettings

__all__ = ["BACKENDS", "Backend", "check_backend", "finish_capture"]

logger = logging.getLogger("asynctrace")

MARK_PREFIX = "asynctrace.clock."
_EXTRAS = {"python": ("profile", "viztracer"), "torch": ("torch", "torch")}


def check_backend(name: str) -> None:
    """Raise :class:`MissingExtraError` if backend *name*'s package is not installed."""
    extra, module = _EXTRAS[name]
    try:
        spec = importlib.util.find_spec(module)
    except ValueError:  # in sys.modules without a spec: a stand-in, not the package
        spec = None
    if spec is None:
        raise MissingExtraError(extra, module)


class Backend:
    """One capture: started and stopped on the span's thread, saved on another."""

    name = ""

    def __init__(self, settings: ProfilerSettings) -> None:
        self.settings = settings
        self.path = Path()
        self.marks: list[tuple[str, int, int]] = []  # (marker name, epoch ns before, after)

    def prepare(self) -> None:
        """Import and build what :meth:`start` needs (slow: done ahead, on another thread)."""
        raise NotImplementedError

    def start(self) -> None:
        """Begin capturing, then mark the clock."""
        raise NotImplementedError

    def stop(self) -> None:
        """Mark the clock, then stop capturing."""
        raise NotImplementedError

    def save(self) -> None:
        """Write the capture to :attr:`path` (the saving thread)."""
        raise NotImplementedError

    def mark(self) -> None:
        """Record a marker event, with the wall clock around it."""
        name = f"{MARK_PREFIX}{len(self.marks)}"
        before = time.time_ns()
        self._marker(name)
        self.marks.append((name, before, time.time_ns()))

    def _marker(self, name: str) -> None:
        raise NotImplementedError


class PythonBackend(Backend):
    """viztracer: every Python call, and asyncio tasks as tracks of their own."""

    name = "python"

    def prepare(self) -> None:
        viztracer: Any = importlib.import_module("viztracer")
        self._tracer = viztracer.VizTracer(  # allocates its event buffer: about 0.1 s
            verbose=0, log_async=True, register_global=False, output_file=str(self.path)
        )

    def start(self) -> None:
        self._tracer.start()
        self.mark()

    def stop(self) -> None:
        try:
            self.mark()
        finally:  # the tracer stops whatever the marker did: it would trace on for good
            self._tracer.stop()

    def save(self) -> None:
        self._tracer.save(str(self.path), verbose=0)

    def _marker(self, name: str) -> None:
        self._tracer.add_instant(name)


class TorchBackend(Backend):
    """``torch.profiler``: operators on CPU, and CUDA kernels where CUDA is present."""

    name = "torch"

    def prepare(self) -> None:
        torch: Any = importlib.import_module("torch")  # seconds, the first time
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
        self._profile.start()
        self.mark()

    def stop(self) -> None:
        try:
            self.mark()
        finally:  # the profiler stops whatever the marker did: it would run on for good
            self._profile.stop()

    def save(self) -> None:
        self._profile.export_chrome_trace(str(self.path))

    def _marker(self, name: str) -> None:
        with self._record(name):
            pass


BACKENDS: dict[str, type[Backend]] = {"python": PythonBackend, "torch": TorchBackend}


def _decode(data: bytes) -> Any:
    try:
        msgspec: Any = importlib.import_module("msgspec")  # the sdk extra: four times faster
    except ImportError:
        return json.loads(data)
    return msgspec.json.decode(data)


def _encode(document: Any) -> bytes:
    try:
        msgspec: Any = importlib.import_module("msgspec")
    except ImportError:
        return json.dumps(document, separators=(",", ":")).encode("utf-8")
    return msgspec.json.encode(document)  # type: ignore[no-any-return]


def clock_alignment(events: list[Any], marks: list[tuple[str, int, int]]) -> tuple[float, float]:
    """``(offset, error)`` in microseconds: epoch time = backend ``ts`` + offset, within error.

    Raises:
        ValueError: no marker was found among *events*.

    Example:
        >>> clock_alignment([{"name": "m", "ts": 10.0}], [("m", 1_000_000, 1_002_000)])
        (991.0, 1.0)
    """
    stamps = {
        e["name"]: float(e["ts"])
        for e in events
        if isinstance(e, dict) and isinstance(e.get("name"), str) and "ts" in e
    }
    offsets: list[float] = []
    halves: list[float] = []
    for name, before, after in marks:
        if name in stamps:
            offsets.append((before + after) / 2000 - stamps[name])
            halves.append((after - before) / 2000)
    if not offsets:
        raise ValueError("no clock marker in the capture")
    offset = sum(offsets) / len(offsets)
    error = max(halves) + (max(offsets) - min(offsets)) / 2
    return offset, error


def finish_capture(backend: Backend, about: dict[str, Any]) -> None:
    """Save *backend*'s capture, then write its clock alignment into it (a daemon thread)."""
    try:
        backend.save()
        document = _decode(backend.path.read_bytes())
        if isinstance(document, list):
            document = {"traceEvents": document}
        offset, error = clock_alignment(document.get("traceEvents", []), backend.marks)
        other = document.setdefault("otherData", {})
        other["asynctrace"] = {
            **about,
            "backend": backend.name,
            "clock_offset_us": offset,
            "clock_error_us": error,
        }
        temporary = backend.path.with_name(f".{backend.path.name}.tmp")
        temporary.write_bytes(_encode(document))
        temporary.replace(backend.path)
    except Exception:
        logger.warning("asynctrace: saving the profile %s failed", backend.path, exc_info=True)
