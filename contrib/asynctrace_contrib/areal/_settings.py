"""AReaL's ``perf_tracer:`` block and what asynctrace reads from it and the environment."""

from __future__ import annotations

import difflib
import getpass
import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import asynctrace

from ._values import _field, _warn_once


@dataclass
class SessionTracerConfig:
    """AReaL 1.0.4's ``SessionTracerConfig`` (fields and defaults).

    Example:
        >>> SessionTracerConfig(enabled=True).flush_threshold
        256
    """

    enabled: bool = False
    flush_threshold: int = 256


@dataclass
class PerfTracerConfig:
    """AReaL 1.0.4's ``PerfTracerConfig`` (fields and defaults), the ``perf_tracer:`` block.

    AReaL's own config object (``areal.api.cli_args.PerfTracerConfig``) or a
    mapping with these keys is accepted by :func:`configure` as well.

    Example:
        >>> PerfTracerConfig(enabled=True, fileroot="/tmp/x").save_interval
        1
    """

    experiment_name: str = "???"
    trial_name: str = "???"
    fileroot: str = "???"
    enabled: bool = False
    save_interval: int = 1
    profile_steps: list[int] | None = None
    session_tracer: SessionTracerConfig | None = field(default=None)


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """*base* with *extra* merged in, nested mappings key by key (copies; neither changes)."""
    out = dict(base)
    for key, value in extra.items():
        current = out.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = _deep_merge(dict(current), value)
        elif isinstance(value, Mapping):
            out[key] = _deep_merge({}, value)
        else:
            out[key] = value
    return out


def _flush_threshold(sessions: Any) -> int:
    """AReaL's rule: an int of at least 1; anything else is 1, with a warning."""
    raw = _field(sessions, "flush_threshold", 256)
    try:
        return max(int(raw), 1)
    except (TypeError, ValueError, OverflowError):
        _warn_once("flush_threshold", "Invalid flush_threshold=%r; defaulting to 1", raw)
        return 1


def _world_size(rank: int) -> int:
    """``WORLD_SIZE`` (at least ``rank + 1``); a value that is not an integer is warned about."""
    raw = os.environ.get("WORLD_SIZE", "")
    try:
        size = int(raw) if raw.strip() else 1
    except ValueError:
        _warn_once("world_size", "perf_tracer: WORLD_SIZE=%r is not an integer; using 1", raw)
        size = 1
    return max(size, rank + 1)


def _base_dir(config: Any) -> Path:
    """AReaL's ``<fileroot>/logs/<user>/<experiment>/<trial>``."""
    fileroot = os.path.expanduser(os.path.expandvars(str(_field(config, "fileroot", "???"))))
    return Path(
        fileroot,
        "logs",
        getpass.getuser(),
        str(_field(config, "experiment_name", "???")),
        str(_field(config, "trial_name", "???")),
    )


def _profile_steps(steps: Any) -> list[int]:
    """``profile_steps`` as a list of steps; an entry that is not one is warned about and
    skipped, as AReaL does."""
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
        steps = [steps]
    kept: list[int] = []
    for raw in steps:
        try:
            step = int(raw)
        except (TypeError, ValueError, OverflowError):
            step = -1
        if step < 0 or isinstance(raw, bool) or (isinstance(raw, float) and raw != step):
            _warn_once(f"profile_steps:{raw!r}", "PerfTracer: invalid profile_steps entry %r", raw)
            continue
        kept.append(step)
    return kept


def _profiler_backend() -> str:
    """AReaL profiles with ``torch.profiler``: the torch backend where torch is installed."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except ValueError:  # a stand-in module in sys.modules, without a spec: not torch
        found = False
    return "torch" if found else "python"


def _unknown_keys(where: str, mapping: Mapping[Any, Any], accepted: list[str]) -> None:
    """Raise ``ConfigurationError`` for a key of *mapping* that is not in *accepted*."""
    unknown = [key for key in mapping if key not in accepted]
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), accepted, n=1)
        if close:
            hints.append(f"{close[0]!r} for {key!r}" if len(unknown) > 1 else repr(close[0]))
    raise asynctrace.ConfigurationError(
        f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
        f"{', '.join(repr(k) for k in unknown)}; accepted keys: {', '.join(accepted)}"
        + (f"; did you mean {', '.join(hints)}?" if hints else "")
    )


def _check_keys(config: Any) -> None:
    """A ``perf_tracer:`` block given as a mapping has only AReaL's keys (its
    ``session_tracer`` block too): a misspelled key raises, naming the near one.

    Raises:
        asynctrace.ConfigurationError: an unknown key.
    """
    if isinstance(config, Mapping):
        _unknown_keys("perf_tracer", config, [f.name for f in fields(PerfTracerConfig)])
    sessions = _field(config, "session_tracer")
    if isinstance(sessions, Mapping):
        accepted = [f.name for f in fields(SessionTracerConfig)]
        _unknown_keys("perf_tracer.session_tracer", sessions, accepted)


def _flag(config: Any, name: str, where: str) -> bool:
    """A boolean key of the block, read as asynctrace reads a boolean value: ``True``,
    ``False``, the integers ``1``/``0`` (AReaL takes any truthy value), or the strings
    ``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off`` (any case); ``None``
    or a missing key is ``False``.

    Raises:
        asynctrace.ConfigurationError: anything else (``2``, ``"disabled"``), naming *where*.
    """
    value = _field(config, name, False)
    if value is None or isinstance(value, bool):
        return bool(value)
    if value.__class__ is int and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        try:  # asynctrace's own conversion of boolean values
            return asynctrace.SessionTracerConfig.from_mapping({"enabled": value}).enabled
        except asynctrace.ConfigurationError:
            pass
    raise asynctrace.ConfigurationError(
        f"{where}: {value!r} is not a boolean; accepted: true/false, 1/0 "
        "(or yes/no, on/off as strings)"
    )
