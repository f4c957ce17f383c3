"""A new telemetry handle: its files checked first, then its parts started.

Every path is checked (and its directory created) before the previous
handle is shut down; an ``OSError`` that still comes while starting is a
:class:`ConfigurationError` naming the key, and whatever had started is
stopped again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import ConfigurationError
from ._profiler import Profiler
from ._session_tracer import SessionTracer
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from ._profiler_settings import ProfilerSettings
    from ._resolved_settings import Settings
    from .export._running_pipeline import Pipeline

__all__ = ["checked_profile_dir", "checked_session_path", "new_profiler", "start_telemetry"]


def checked_session_path(settings: Settings) -> Path | None:
    """Where session records go, if the session tracer is on (directory checked)."""
    if not settings.session_tracer.enabled or settings.output_dir is None:
        return None
    from ._output_dir import writable_dir, writable_file

    name = (
        f"sessions-r{settings.rank}.jsonl"
        if settings.role in (None, "worker")
        else f"sessions-{settings.role}-r{settings.rank}.jsonl"
    )
    directory = Path(settings.output_dir)
    key = "output_dir"
    if settings.session_tracer.output_dir is not None:  # relative to output_dir, or absolute
        key = "session_tracer.output_dir"
        directory = directory / os.path.expanduser(
            settings.session_tracer.output_dir.replace("{run_id}", settings.run_id)
        )
    return writable_file(writable_dir(directory, key) / name, key, "session file")


def checked_profile_dir(settings: Settings) -> Path | None:
    """Where profiler captures go, if profiling is configured (created and checked)."""
    if settings.profiler is None or settings.profiler.output is None:
        return None
    from ._output_dir import writable_dir

    return writable_dir(settings.profiler.output, "profiler.output")


def start_telemetry(
    settings: Settings, session_path: Path | None, build: Callable[[], Pipeline] | None
) -> Telemetry:
    """The new handle's session tracer and pipeline, started (not installed yet).

    Every file was checked before the previous handle was shut down; an
    ``OSError`` that still comes (a directory replaced in between, a full
    disk) is a :class:`ConfigurationError` naming the file, and whatever had
    started is stopped again.
    """
    sessions: SessionTracer | None = None
    try:
        if session_path is not None:
            sessions = _new_session_tracer(settings, session_path)
        return Telemetry(settings, build() if build is not None else None, sessions)
    except BaseException as exc:
        if sessions is not None:
            sessions.shutdown(1.0)
        if not isinstance(exc, OSError):
            raise
        where = f" {exc.filename!r}" if exc.filename else ""
        raise ConfigurationError(
            f"output_dir: {settings.output_dir!r}: could not open{where} "
            f"({type(exc).__name__}: {exc.strerror or exc}); telemetry is off; accepted: a "
            "directory path this process can create and write to"
        ) from exc


def _new_session_tracer(settings: Settings, path: Path) -> SessionTracer:
    return SessionTracer(
        path,
        rank=settings.rank,
        role=settings.role,
        run_id=settings.run_id,
        flush_threshold=settings.session_tracer.flush_threshold,
        max_pending=settings.session_tracer.max_pending,
        sequential_ids=settings.session_tracer.ids == "sequential",
    )


def new_profiler(telemetry: Telemetry, profiler: ProfilerSettings, directory: Path) -> Profiler:
    """The profiler of *telemetry* (started, not installed); on any error the new
    pipeline is shut down again, and the error raised (a :class:`ConfigurationError`
    naming the key when the process had no thread or descriptor to spare)."""
    settings = telemetry.settings
    try:
        return Profiler(profiler, directory, settings.rank, settings.role)
    except BaseException as exc:
        telemetry.shutdown()  # its export threads and files: nothing is left running
        if not isinstance(exc, (OSError, RuntimeError)):
            raise
        raise ConfigurationError(
            f"profiler: {profiler!r}: the profiler could not be started "
            f"({type(exc).__name__}: {exc}); telemetry is off; accepted: a profiler "
            "configuration the process can start (a thread and files to spare), or none"
        ) from exc
