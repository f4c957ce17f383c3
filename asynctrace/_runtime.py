"""The runtime: configure once per process, flush before a kill, shut down at exit.

:func:`configure` validates everything (settings, extras, exporters, output
directory) before it changes anything; then it shuts down the previous
:class:`~asynctrace.Telemetry`, starts the SDK pipeline, turns the span
groups on and registers the exit hooks. The OpenTelemetry SDK is imported
here lazily, and only when telemetry is enabled. The running handle and the
module-level ``flush()`` and ``shutdown()`` are :mod:`asynctrace._running`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any, Union

from . import _state
from ._config import TelemetryConfig
from ._errors import MissingExtraError
from ._forksafe import reinit_at_fork
from ._running import current_telemetry, make_current
from ._sigterm import release_closed
from ._telemetry import Telemetry
from ._telemetry_start import (
    checked_profile_dir,
    checked_session_path,
    new_profiler,
    start_telemetry,
)

__all__ = ["ConfigLike", "configure", "init_driver", "init_worker"]

ConfigLike = Union[TelemetryConfig, Mapping[str, Any], None]  # noqa: UP007

_lock = threading.RLock()  # one configure() at a time
reinit_at_fork(_lock, _state._lock)  # held at fork(): new in the child


def configure(
    config: ConfigLike = None,
    *,
    rank: int = 0,
    world_size: int = 1,
    role: str | None = None,
) -> Telemetry:
    """Validate *config* and start telemetry for this process.

    Everything is checked first: keys and values, the span-group spec, the
    exporters and their extras, the output directory (created if missing).
    On any error a :class:`ConfigurationError` (or :class:`MissingExtraError`)
    is raised and nothing changes: the previous configuration keeps running,
    OpenTelemetry's global provider and the span-group gate are untouched.
    Then the previous :class:`Telemetry` is shut down and the new one starts.

    Args:
        config: a :class:`TelemetryConfig`, a mapping of its fields (a YAML
            ``telemetry:`` block), or ``None`` to read ``ASYNCTRACE_*``
            environment variables. Never mutated.
        rank: this process's rank (names the trace file ``traces-r{rank}.jsonl``).
        world_size: number of ranks.
        role: e.g. ``"driver"``; ``None`` or ``"worker"`` keep the plain file name.

    Returns:
        The :class:`Telemetry` handle (inert when the config is disabled).

    Example:
        >>> telemetry = configure({"enabled": True, "exporters": ["memory"],
        ...                        "span_groups": "all"})  # doctest: +SKIP
        >>> telemetry.shutdown()  # doctest: +SKIP
        True
    """
    if config is None:
        config = TelemetryConfig.from_env()
    elif isinstance(config, Mapping):
        config = TelemetryConfig.from_mapping(config)
    from ._settings import resolve  # hostname, secrets: only when configuring

    settings = resolve(config, rank=rank, world_size=world_size, role=role)
    session_path = checked_session_path(settings)  # validated before anything changes
    if not settings.enabled:
        with _lock:
            previous = current_telemetry()
            if previous is not None:
                previous.shutdown()
            _release_closed_sigterm()
            if session_path is None:
                return Telemetry(settings, None)
            telemetry = start_telemetry(settings, session_path, None)
            telemetry._install()
            make_current(telemetry)
        return telemetry
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("sdk", "opentelemetry.sdk") from exc
    from .export import _pipeline

    plan = _pipeline.prepare(settings)
    profile_dir = checked_profile_dir(settings)  # checked before anything changes
    with _lock:
        previous = current_telemetry()
        if previous is not None:  # waits for a shutdown running on another thread, if any
            previous._keep_exporters(settings.exporters)  # listed again: they stay open
            previous.shutdown()
        _release_closed_sigterm()
        telemetry = start_telemetry(settings, session_path, lambda: _pipeline.build(plan))
        if profile_dir is not None and settings.profiler is not None:  # its threads start now
            telemetry._profiler = new_profiler(telemetry, settings.profiler, profile_dir)
        telemetry._install()
        make_current(telemetry)  # a new run: the last one's shutdown is no longer asked
    return telemetry


def _release_closed_sigterm() -> None:
    """Remove a SIGTERM handler left installed by a shutdown off the main thread.

    Only the main thread can; it puts back the handler it replaced and
    closes its pipes, so that handlers do not pile up over reconfigurations.
    """
    if threading.current_thread() is threading.main_thread():
        release_closed()


def init_driver(config: ConfigLike = None) -> Telemetry:
    """Configure the driver process (rank 0, role ``driver``) and share its run id.

    The driver is rank 0 of a process group of its own: it exports whatever
    ``export_ranks`` says (that key chooses among the workers), so the
    workers' configuration block can be passed here unchanged.

    Exports ``ASYNCTRACE_RUN_ID`` into ``os.environ`` so that workers started
    afterwards (subprocesses, Ray actors with the driver's environment) put
    their traces under the same run.

    Example:
        >>> telemetry = init_driver({"enabled": True, "run_id": "run-1"})  # doctest: +SKIP
        >>> os.environ["ASYNCTRACE_RUN_ID"]  # doctest: +SKIP
        'run-1'
    """
    telemetry = configure(config, rank=0, world_size=1, role="driver")
    from ._settings import RUN_ID_ENV

    os.environ[RUN_ID_ENV] = telemetry.run_id
    return telemetry


def init_worker(
    config: ConfigLike = None, rank: int | None = None, world_size: int | None = None
) -> Telemetry:
    """Configure a worker process of a multi-rank job.

    *rank* and *world_size* default to the launcher's variables, read in
    this order (:data:`asynctrace._rank_env.LAUNCHER_VARS`): ``RANK``/``WORLD_SIZE``
    (torchrun and most launchers), ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``
    (Open MPI), ``PMI_RANK``/``PMI_SIZE`` (MPICH), ``SLURM_PROCID``/``SLURM_NTASKS``
    (srun); with none set, 0 and 1. A world size above 1 with no rank to go
    with it raises :class:`ConfigurationError` (pass *rank*), and so does a
    *rank* above 0 with no world size given or set, or one a world size
    variable does not hold (pass *world_size* too, as an ``mp.spawn`` worker
    does: ``init_worker(config, rank=rank, world_size=nprocs)``). The run id
    comes from the config, else from ``ASYNCTRACE_RUN_ID``.

    Example:
        >>> init_worker({"enabled": False}, rank=3, world_size=8).settings.rank
        3
    """
    from ._rank_env import env_rank

    rank, world_size = env_rank(os.environ, rank, world_size)
    return configure(config, rank=rank, world_size=world_size, role="worker")
