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

Threads. Before Python 3.12, viztracer records a thread once Python's profile
hook is set on it: the span's thread at :meth:`Backend.start`, and threads
started while the capture runs (``threading.setprofile`` is set only between
start and stop, so threads started at other times run without it). Python
sets a profile hook on the current thread or on threads yet to start only:
threads already running when a capture starts are not recorded. From 3.12,
viztracer traces through ``sys.monitoring``, which covers every thread.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import MissingExtraError
from ._forksafe import reinit_at_fork

if TYPE_CHECKING:
    from ._profiler_settings import ProfilerSettings

__all__ = [
    "BACKENDS",
    "THREAD_HOOK",
    "Backend",
    "TracersBusy",
    "check_backend",
    "finish_capture",
    "import_backend",
    "tracers_built",
]

logger = logging.getLogger("asynctrace")

MARK_PREFIX = "asynctrace.clock."
_EXTRAS = {"python": ("profile", "viztracer"), "torch": ("torch", "torch")}
# Held while the threads' profile hook (threading.setprofile) is read and set: a
# tracer built on one thread must not undo the hook a capture set on another.
_HOOKS = threading.Lock()
reinit_at_fork(_HOOKS)
_warned: set[str] = set()
# Before 3.12 viztracer records a thread through its profile hook; from 3.12 through
# sys.monitoring, every thread, with no hook (as its own enable_thread_tracing).
_THREAD_HOOK = THREAD_HOOK = sys.version_info < (3, 12)
# viztracer's tracers. Each one built takes a thread-local storage key viztracer never
# gives back (a process has about 1024; a build past them exits the process), and freeing
# one calls threading.setprofile(None), which takes a running capture's hook away (the
# threads it starts go unrecorded). So every tracer is held in _TRACERS until freed under
# _HOOKS (_take), with that call skipped; one saved, or never started, waits in _IDLE for
# a later capture. A capture that put events on a task's track (asyncio, trio) may leave
# that task as a thread's current one in its tracer: viztracer forgets it only when the
# task's frame returns while tracing, never if the task has finished. Such a tracer is
# reused only once _BUDGET tracers were built; until then it is freed, as before reuse.
_TRACERS: list[Any] = []
_IDLE: list[Any] = []
_TASKS: set[int] = set()  # id() of the tracers that may keep a task (or a parent's thread)
_BUDGET = 256
_BUILT = [0]  # tracers built in this process
_SEEN: dict[int, frozenset[int]] = {}  # id(tracer) -> threads its earlier captures named


def _inherited() -> None:
    # a forked child's tracers keep the parent's threads (the forking one's id among them)
    _TASKS.update(id(tracer) for tracer in _TRACERS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_inherited)


class TracersBusy(RuntimeError):
    """No tracer is free, and the process may build no more."""


def check_backend(name: str) -> None:
    """Raise :class:`MissingExtraError` if backend *name*'s package is not installed."""
    extra, module = _EXTRAS[name]
    try:
        spec = importlib.util.find_spec(module)
    except ValueError:  # in sys.modules without a spec: a stand-in, not the package
        spec = None
    if spec is None:
        raise MissingExtraError(extra, module)


def import_backend(name: str) -> None:
    """Import backend *name*'s package on the calling thread.

    Done where the profiler is configured, not on a background thread: a
    process forked while another thread imports inherits the import lock
    held, and its own import of the package waits for good.
    """
    importlib.import_module(_EXTRAS[name][1])


class Backend:
    """One capture: started and stopped on the span's thread, saved on another."""

    name = ""

    def __init__(self, settings: ProfilerSettings) -> None:
        self.settings = settings
        self.path = Path()
        self.marks: list[tuple[str, int, int]] = []  # (marker name, epoch ns before, after)
        self.about: dict[str, Any] = {}  # the profiled span's ids, pid, rank: otherData
        self.thread = 0  # the ident of the thread that started the capture

    def prepare(self) -> None:
        """Build what :meth:`start` needs (slow: done ahead, on another thread)."""
        raise NotImplementedError

    def start(self) -> None:
        """Begin capturing, then mark the clock; stopped again if the marker raises."""
        raise NotImplementedError

    def stop(self) -> None:
        """Mark the clock, then stop capturing."""
        raise NotImplementedError

    def abandon(self) -> None:
        """Stop capturing without a marker: the capture is not saved (a forked child's)."""
        raise NotImplementedError

    def release(self) -> None:
        """On the span's thread, once another thread stopped the capture: drop its hook."""

    def discard(self) -> None:
        """Give back what :meth:`prepare` built, never started (a spare not needed)."""

    def save(self, path: Path) -> None:
        """Write the capture to *path*, a temporary file beside :attr:`path` (the saving
        thread)."""
        raise NotImplementedError

    def mark(self) -> None:
        """Record a marker event, with the wall clock around it."""
        name = f"{MARK_PREFIX}{len(self.marks)}"
        before = time.time_ns()
        self._marker(name)
        self.marks.append((name, before, time.time_ns()))

    def _marker(self, name: str) -> None:
        raise NotImplementedError


def _free(doomed: list[Any]) -> None:
    """Free the tracers in *doomed* that nothing else holds (called holding _HOOKS).

    Their deallocation's threading.setprofile(None) is skipped on this thread, and the
    hook put back if it changed all the same. One held elsewhere stays in _TRACERS.
    """
    hook, setprofile, freeing = threading.getprofile(), threading.setprofile, threading.get_ident()

    def others_only(func: Any) -> None:
        if threading.get_ident() != freeing:
            setprofile(func)

    threading.setprofile = others_only
    try:
        for tracer in doomed:
            if tracer in _IDLE:
                _IDLE.remove(tracer)
            # held by _TRACERS, doomed, this loop and getrefcount's argument only
            if sys.getrefcount(tracer) <= 4:
                _TRACERS.remove(tracer)
                _SEEN.pop(id(tracer), None)
                _TASKS.discard(id(tracer))
        del tracer
        doomed.clear()  # frees the ones removed
    finally:
        threading.setprofile = setprofile
        if threading.getprofile() is not hook:
            setprofile(hook)


def _take(entries: int) -> Any:
    """A free tracer of *entries* entries, or ``None`` (called holding _HOOKS).

    A tracer nothing else holds (a spare dropped, a capture abandoned) becomes free. One
    of another size, or keeping a task while more may be built, is freed.
    """
    for tracer in _TRACERS:
        # held by the list, this loop and getrefcount's argument only: unused
        if tracer not in _IDLE and sys.getrefcount(tracer) <= 3 and not tracer.enable:
            tracer.clear()
            _IDLE.append(tracer)
    may_build = _BUILT[0] < _BUDGET
    sized = [t for t in _IDLE if t.tracer_entries == entries]
    found = next((t for t in sized if id(t) not in _TASKS), None)
    if found is None and not may_build:
        found = next(iter(sized), None)
    doomed = [
        t
        for t in _IDLE
        if t is not found and (t.tracer_entries != entries or (may_build and id(t) in _TASKS))
    ]
    del sized  # its references would keep them
    if doomed:
        _free(doomed)
    if found is not None:
        _IDLE.remove(found)
    return found


def tracers_built() -> int:
    """How many viztracer tracers this process has built."""
    return _BUILT[0]


class PythonBackend(Backend):
    """viztracer: every Python call, and asyncio tasks as tracks of their own."""

    name = "python"
    _tracer: Any = None
    stale: frozenset[int] = frozenset()  # threads named by the tracer's earlier captures

    def prepare(self) -> None:
        viztracer: Any = importlib.import_module("viztracer")
        with _HOOKS:
            self._previous_hook = threading.getprofile()
            tracer = _take(self.settings.entries)
            if tracer is not None:
                self._tracer = tracer
                self.stale = _SEEN.get(id(tracer), frozenset())
                return
            if _BUILT[0] >= _BUDGET:
                raise TracersBusy(
                    f"{_BUILT[0]} viztracer tracers were built in this process (each keeps "
                    "a thread-local storage key for good), none of them is free"
                )
            previous, mine = self._previous_hook, sys.getprofile()
            # Its constructor hooks every thread started from then on, captured or not
            # (each of their calls pays for it), by calling threading.setprofile: that
            # call is skipped for this thread, so no thread started meanwhile elsewhere
            # is hooked either. Only a running capture sets the hook (start()).
            setprofile, builder = threading.setprofile, threading.get_ident()

            def others_only(func: Any) -> None:
                if threading.get_ident() != builder:
                    setprofile(func)

            threading.setprofile = others_only
            try:
                tracer = viztracer.VizTracer(  # allocates its event buffer: about 0.1 s
                    tracer_entries=self.settings.entries,
                    verbose=0,
                    log_async=True,
                    register_global=False,
                    output_file=str(self.path),
                    file_info=False,  # the source of every traced file: a script's secrets
                )
                _BUILT[0] += 1
                # its plugin manager points back at it (no plugins here): a cycle the
                # cyclic GC would free at any moment, on any thread
                tracer._plugin_manager._tracer = None
                _TRACERS.append(tracer)
                self._tracer = tracer
            finally:
                threading.setprofile = setprofile
                if threading.getprofile() is not previous:  # set some other way
                    threading.setprofile(previous)
        if mine is None and sys.getprofile() is self._tracer:  # and this thread, idle
            sys.setprofile(None)

    def start(self) -> None:
        if _THREAD_HOOK:  # threads started meanwhile are recorded too
            with _HOOKS:
                self._previous_hook = threading.getprofile()
                threading.setprofile(self._tracer.threadtracefunc)
        _TASKS.add(id(self._tracer))  # until its saved capture shows no task
        try:
            self._tracer.start()
            self.mark()
        except BaseException:
            self.abandon()  # a tracer left on would trace everything after, for good
            raise

    def stop(self) -> None:
        try:
            self.mark()
        finally:  # the tracer stops whatever the marker did: it would trace on for good
            self.abandon()

    def abandon(self) -> None:
        try:
            self._tracer.stop()
        finally:
            with _HOOKS:
                if threading.getprofile() == self._tracer.threadtracefunc:
                    threading.setprofile(self._previous_hook)

    def release(self) -> None:
        if sys.getprofile() is self._tracer:  # stopped on another thread: still hooked here
            sys.setprofile(None)

    def discard(self) -> None:
        """Give back a tracer never started (a spare not needed): idle for a later capture."""
        tracer, self._tracer = self._tracer, None
        if tracer is not None and not tracer.enable:
            with _HOOKS:
                if tracer in _TRACERS and tracer not in _IDLE:
                    _IDLE.append(tracer)

    def save(self, path: Path) -> None:
        tracer = self._tracer
        try:
            tracer.save(str(path), file_info=False, verbose=0)
            events = tracer.data.get("traceEvents", [])
            threads = {e.get("tid") for e in events if e.get("name") == "thread_name"}
            _SEEN[id(tracer)] = self.stale | frozenset(t for t in threads if isinstance(t, int))
            if not _on_tasks(events):
                _TASKS.discard(id(tracer))
        finally:  # reused by a later capture: its buffer and parsed events emptied
            tracer.data = {}
            tracer.clear()
            with _HOOKS:
                if tracer in _TRACERS and tracer not in _IDLE:
                    _IDLE.append(tracer)

    def _marker(self, name: str) -> None:
        self._tracer.add_instant(name)


class TorchBackend(Backend):
    """``torch.profiler``: operators on CPU, and CUDA kernels where CUDA is present."""

    name = "torch"

    def prepare(self) -> None:
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
        self._profile.start()
        try:
            self.mark()
        except BaseException:
            self._profile.stop()  # a profiler left on would run on for good
            raise

    def stop(self) -> None:
        try:
            self.mark()
        finally:  # the profiler stops whatever the marker did: it would run on for good
            self._profile.stop()

    def abandon(self) -> None:
        self._profile.stop()

    def save(self, path: Path) -> None:
        self._profile.export_chrome_trace(str(path))

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


def _on_tasks(events: list[Any]) -> bool:
    """Whether any of viztracer's *events* is on a task's track, not a thread's.

    The threads' names come first, the tasks' after the events.
    """
    threads: set[Any] = set()
    for event in events:
        if event.get("ph") != "M":
            if event.get("tid") not in threads:
                return True
        elif event.get("name") == "thread_name":
            threads.add(event.get("tid"))
    return False


def _without_stale_threads(events: list[Any], stale: frozenset[int]) -> list[Any]:
    """*events* without the names of threads a reused tracer saw in earlier captures only
    (viztracer keeps a tracer's thread names for its life)."""
    active = {e.get("tid") for e in events if isinstance(e, dict) and e.get("ph") != "M"}
    return [
        e
        for e in events
        if not (
            isinstance(e, dict)
            and e.get("ph") == "M"
            and e.get("name") == "thread_name"
            and e.get("tid") in stale
            and e.get("tid") not in active
        )
    ]


def finish_capture(backend: Backend, about: dict[str, Any]) -> bool:
    """Save *backend*'s capture, then write its clock alignment into it (a daemon thread);
    ``False`` if it could not be saved.

    Both writes go to temporary files beside the capture's, which replaces it
    whole only at the end: a write that fails (a full disk) leaves the claimed
    file's empty trace, which ``convert`` reports as not saved, and no half-written
    capture. A capture whose buffer filled up (viztracer's is circular: the oldest
    events, the step's start among them, were overwritten) says so with
    ``overflow: true`` under ``otherData.asynctrace``, and is warned about once.
    """
    raw = backend.path.with_name(f".{backend.path.name}.raw.json")  # viztracer: .json
    temporary = backend.path.with_name(f".{backend.path.name}.tmp")
    try:
        backend.save(raw)
        document = _decode(raw.read_bytes())
        if isinstance(document, list):
            document = {"traceEvents": document}
        stale: frozenset[int] = getattr(backend, "stale", frozenset())
        if stale and isinstance(document.get("traceEvents"), list):
            document["traceEvents"] = _without_stale_threads(document["traceEvents"], stale)
        offset, error = clock_alignment(document.get("traceEvents", []), backend.marks)
        metadata = document.get("viztracer_metadata")
        overflow = isinstance(metadata, dict) and metadata.get("overflow") is True
        other = document.setdefault("otherData", {})
        other["asynctrace"] = {
            **about,
            "backend": backend.name,
            "clock_offset_us": offset,
            "clock_error_us": error,
            "overflow": overflow,
        }
        if overflow and "overflow" not in _warned:
            _warned.add("overflow")
            logger.warning(
                "asynctrace: the profile %s filled its buffer of %d entries: its earliest "
                "events are lost (the step's start among them); raise profiler.entries to "
                "keep a whole step",
                backend.path.name,
                backend.settings.entries,
            )
        temporary.write_bytes(_encode(document))
        temporary.replace(backend.path)
    except Exception:
        logger.warning("asynctrace: saving the profile %s failed", backend.path, exc_info=True)
        temporary.unlink(missing_ok=True)
        return False
    finally:
        raw.unlink(missing_ok=True)
    return True
