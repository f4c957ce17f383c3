"""AReaL's ``PerfTracer``: one configuration of asynctrace, started when it first records."""

from __future__ import annotations

import numbers
import os
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asynctrace

from ._categories import NAMESPACE, CategoryLike, _areal_category, _category, _category_map
from ._scope import _NULL, _NullContext, _Scope
from ._session_tracer import SessionTracer
from ._settings import (
    _base_dir,
    _check_keys,
    _deep_merge,
    _flag,
    _flush_threshold,
    _profile_steps,
    _profiler_backend,
    _world_size,
)
from ._values import _attributes, _field, _warn_once

_last_started: weakref.ref[PerfTracer] | None = None  # whose configuration asynctrace runs
_perf_tracers: weakref.WeakSet[PerfTracer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for perf in list(_perf_tracers):
        perf._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # once for the module: a WeakSet, not one hook per tracer
    os.register_at_fork(after_in_child=_after_fork_in_child)


class PerfTracer:
    """The configured tracer, as ``perf_tracer.get_tracer()`` returns it.

    Built as AReaL's is, ``PerfTracer(config, rank=0, role=None)`` (what
    :func:`configure` does, without making it the module's tracer; the
    extra keywords are :func:`configure`'s). Building one changes nothing
    else: it configures asynctrace when it first records (a scope, an
    instant, its :attr:`session_tracer`), or when :func:`configure` makes it
    the module's. ``telemetry`` is the :class:`asynctrace.Telemetry` it runs
    (``None`` until then; a disabled tracer without sessions leaves asynctrace
    alone until :meth:`set_enabled`); ``trace_path`` and ``session_path`` are
    AReaL's file locations.

    asynctrace runs one configuration per process. A tracer that starts
    while another one's configuration is running replaces it (warned once);
    the replaced tracer records nothing more: its scopes and instants are
    skipped and counted in :meth:`stats` (``not_running``), warned once, and
    its session tracer does the same (:class:`SessionTracer`). So does a
    tracer whose configuration ``asynctrace.configure`` or ``shutdown``
    replaced.

    Example:
        >>> tracer = PerfTracer(PerfTracerConfig(), rank=0)
        >>> tracer.enabled, tracer.telemetry
        (False, None)
    """

    def __init__(
        self,
        config: Any,
        *,
        rank: int,
        role: str | None = None,
        telemetry: Mapping[str, Any] | None = None,
        category_map: Mapping[str, asynctrace.Bucket | str | None] | None = None,
    ) -> None:
        given: Any = rank  # numpy's integers too, as AReaL takes them
        # Checked before comparing: AReaL's own `rank < 0` raises TypeError for a string.
        if isinstance(given, bool) or not isinstance(given, numbers.Integral) or given < 0:
            raise asynctrace.ConfigurationError(
                f"rank: {given!r} is not accepted; accepted: an integer >= 0 (an int or a "
                "numpy integer; not a bool, a float or a string)"
            )
        rank = int(given)
        if role == "":  # AReaL's "no role": no subdirectory, the plain file name
            role = None
        self.rank = rank
        self.role = role
        _check_keys(config)
        self._buckets = _category_map(category_map)
        self._groups = {name: (f"areal.{name}", b) for name, b in self._buckets.items()}
        base = _base_dir(config).absolute()
        self._base = base
        self._fileroot = _field(config, "fileroot", "???")
        trace_dir = base / "perf_tracer"
        session_dir = base / "session_tracer"
        if role:
            trace_dir, session_dir = trace_dir / role, session_dir / role
        sessions = _field(config, "session_tracer")
        self._sessions_on = sessions is not None and _flag(
            sessions, "enabled", "perf_tracer.session_tracer.enabled"
        )
        self._enabled = _flag(config, "enabled", "perf_tracer.enabled")
        extra = _deep_merge({}, telemetry or {})
        ids = _field(extra.get("session_tracer") or {}, "ids", "sequential")
        if ids != "sequential":
            raise asynctrace.ConfigurationError(
                f"telemetry['session_tracer']['ids']: {ids!r} is not accepted; accepted: "
                "sequential (AReaL's API numbers its sessions)"
            )
        groups = ",".join(filter(None, [NAMESPACE, extra.pop("span_groups", "")]))
        settings: dict[str, Any] = {
            "enabled": True,
            "span_groups": groups,
            "exporters": ["chrome"],
            "output_dir": str(trace_dir),
            "session_tracer": {
                "enabled": self._sessions_on,
                "flush_threshold": _flush_threshold(sessions) if self._sessions_on else 100,
                "output_dir": str(session_dir),
                "ids": "sequential",
            },
        }
        steps = _field(config, "profile_steps")
        if steps and "profiler" not in extra:
            kept = _profile_steps(steps)
            if kept:
                settings["profiler"] = {"steps": kept, "backend": _profiler_backend()}
        self._settings = _deep_merge(settings, extra)
        # Checked now, though asynctrace is configured later: a bad key fails here, not in
        # the first scope.
        asynctrace.TelemetryConfig.from_mapping(self._settings)
        self._world_size = _world_size(rank)
        name = (
            f"traces-r{rank}.jsonl" if role in (None, "worker") else f"traces-{role}-r{rank}.jsonl"
        )
        self.trace_path = trace_dir / name
        self.session_path: Path | None = None
        self.telemetry: asynctrace.Telemetry | None = None
        self._session_tracer: SessionTracer | None = None
        self._not_running = 0
        self._count_lock = threading.Lock()
        self._start_lock = threading.Lock()  # one lazy configuration, whichever thread asks
        self._start_error: Exception | None = None
        _perf_tracers.add(self)

    def _after_fork_in_child(self) -> None:
        """New locks: one held by another thread at fork() would never be released."""
        self._count_lock = threading.Lock()
        self._start_lock = threading.Lock()

    def _activate(self) -> None:
        """Configure asynctrace now if this tracer records anything (:func:`configure`)."""
        if self.telemetry is None and (self._enabled or self._sessions_on):
            self._start()

    def _start(self) -> None:
        """Configure asynctrace (only now: a disabled tracer leaves its state alone).

        Disabled with sessions on, asynctrace runs the session tracer alone:
        no span pipeline, OpenTelemetry's global provider left as it is.
        """
        global _last_started
        running = asynctrace.current_telemetry()
        if running is not None and not any(p.telemetry is running for p in list(_perf_tracers)):
            _warn_once(  # not a PerfTracer's: the application configured asynctrace itself
                "replaced-application",
                "perf_tracer: the PerfTracer writing to %s replaces the asynctrace "
                "configuration the application started itself: asynctrace runs one "
                "configuration per process, so the application's spans and sessions are "
                "recorded in this tracer's files from now on (the sessions it left open are "
                "written as pending), and perf_tracer.reset() leaves none running",
                self.trace_path.parent,
            )
        previous = _last_started() if _last_started is not None else None
        if (
            previous is not None
            and previous is not self
            and previous.telemetry is not None
            and previous.telemetry is asynctrace.current_telemetry()
        ):
            _warn_once(
                "replaced",
                "perf_tracer: a PerfTracer writing to %s replaces the running one (%s): "
                "asynctrace runs one configuration per process, so the replaced tracer "
                "records nothing more (counted in its stats()['not_running'])",
                self.trace_path.parent,
                previous.trace_path.parent,
            )
        try:
            handle = asynctrace.configure(
                {**self._settings, "enabled": self._enabled},
                rank=self.rank,
                world_size=self._world_size,
                role=self.role,
            )
        except asynctrace.ConfigurationError as exc:
            if str(self._base) not in str(exc):  # not about the directories fileroot gives
                raise
            raise asynctrace.ConfigurationError(
                f"perf_tracer.fileroot: {self._fileroot!r}: the traces and sessions go under "
                f"{self._base}, which cannot be made ({exc}); accepted: a fileroot under "
                "which this process can create and write directories"
            ) from exc
        self.telemetry = handle
        _last_started = weakref.ref(self)
        if handle.sessions is not None:
            # AReaL's record shape: integer ids, pending sessions with no end
            handle.sessions.set_record_style("areal")
            self.session_path = Path(handle.sessions.path)
            self._session_tracer = SessionTracer(
                rank=self.rank, role=self.role, tracer=handle.sessions
            )

    @property
    def enabled(self) -> bool:
        """Whether scopes and instants are recorded."""
        return self._enabled

    def set_enabled(self, flag: bool) -> None:
        """Turn recording of scopes and instants on or off (AReaL's switch).

        Turning it on for a tracer configured disabled starts asynctrace's span
        pipeline then (a reconfiguration: sessions still open are written as
        ``pending`` by the session tracer it replaces).
        """
        self._enabled = bool(flag)
        if self._enabled and (self.telemetry is None or not self.telemetry.enabled):
            self._start()

    @property
    def session_tracer(self) -> SessionTracer | None:
        """AReaL's session tracer API (:class:`SessionTracer`), when ``session_tracer.enabled``
        (asking for it starts this tracer, as recording does)."""
        if self.telemetry is None and self._sessions_on:
            self._start_lazily()
        return self._session_tracer

    def _start_lazily(self) -> bool:
        """Start from the host's recording calls: once, whichever thread asks first; a
        failure (an output directory that cannot be written, say) is said once, never
        raised into the host and not tried again: this tracer then records nothing."""
        with self._start_lock:
            if self.telemetry is not None:
                return True
            if self._start_error is not None:
                return False
            try:
                self._start()
            except Exception as exc:
                self._start_error = exc
                _warn_once(
                    "start-failed",
                    "perf_tracer: asynctrace could not be configured for %s (%s); this "
                    "tracer records nothing",
                    self.trace_path.parent,
                    exc,
                )
                return False
            return True

    def stats(self) -> dict[str, int]:
        """``not_running``: scopes and instants not recorded because this tracer's asynctrace
        configuration is no longer the running one (see the class)."""
        return {"not_running": self._not_running}

    def _runs(self) -> bool:
        """Whether scopes may be recorded: started now if need be; ``False`` (counted, warned
        once) when another configuration replaced this tracer's."""
        telemetry = self.telemetry
        if telemetry is None:
            return self._start_lazily()
        if telemetry is asynctrace.current_telemetry():
            return True
        with self._count_lock:
            self._not_running += 1
        _warn_once(
            "scopes-not-running",
            "perf_tracer: the PerfTracer writing to %s is no longer asynctrace's running "
            "configuration (another PerfTracer recorded, or asynctrace was configured or "
            "shut down): its scopes and instants are not recorded from now on (counted in "
            "its stats()['not_running'])",
            self.trace_path.parent,
        )
        return False

    def bucket_of(self, category: str) -> tuple[str, asynctrace.Bucket | None]:
        """The span group and bucket of a (normalised) category."""
        found = self._groups.get(category)
        return found if found is not None else self._groups["misc"]

    def trace_scope(
        self,
        name: str,
        *,
        category: CategoryLike = None,
        enable_profiler: bool = False,
        profiler_args: dict[str, Any] | None = None,
        args: dict[str, Any] | None = None,
    ) -> _Scope | _NullContext:
        """A span around the block (``with`` or ``async with``); see :func:`trace_scope`."""
        if not self._enabled:
            return _NULL
        telemetry = self.telemetry  # the common case inline: this tracer's config is running
        if (telemetry is None or telemetry is not asynctrace.current_telemetry()) and not (
            self._runs()
        ):
            return _NULL
        return _Scope(self, name, category, args, enable_profiler)

    atrace_scope = trace_scope

    def instant(
        self, name: str, *, category: CategoryLike = None, args: dict[str, Any] | None = None
    ) -> None:
        """A point in time; see :func:`instant`."""
        if self._enabled and self._runs():
            group, _ = self.bucket_of(_category(category))
            asynctrace.instant(
                group, name, attributes=_attributes(args, _areal_category(category))
            )

    def save(self, *, step: int | None = None, force: bool = False) -> None:
        """Write out what was recorded; see :func:`save`."""
        if force and self.telemetry is not None:
            self.telemetry.flush()

    def reset(self) -> None:
        """Flush and stop, as AReaL's ``reset`` does before a new ``configure``."""
        if self.telemetry is not None:
            self.telemetry.shutdown()
