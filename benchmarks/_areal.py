"""Load AReaL's released ``perf_tracer`` without the training stack it sits in.

``import areal.utils.perf_tracer`` normally runs ``areal/__init__.py``, which
imports the whole trainer (torch, ray, ...). Here bare package objects stand
in for ``areal`` and ``areal.api`` (their ``__path__`` is the installed
wheel's), so the real ``areal/utils/perf_tracer.py`` and
``areal/utils/logging.py`` load unmodified. ``areal.api.cli_args`` gets just
the two dataclasses the tracer reads, with the wheel's fields and defaults,
and ``torch.profiler`` a dummy (touched only by a scope that enables the
profiler, which the benchmarks never do).

Install it for the benchmarks only:
``pip install --no-deps areal==1.0.4 orjson colorlog``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AnchorMissing", "load_perf_tracer"]


class AnchorMissing(RuntimeError):
    """AReaL's tracer could not be loaded; the message says why."""


@dataclass
class SessionTracerConfig:
    """AReaL 1.0.4's ``areal.api.cli_args.SessionTracerConfig`` (fields and defaults)."""

    enabled: bool = False
    flush_threshold: int = 256


@dataclass
class PerfTracerConfig:
    """AReaL 1.0.4's ``areal.api.cli_args.PerfTracerConfig`` (fields and defaults)."""

    experiment_name: str = "???"
    trial_name: str = "???"
    fileroot: str = "???"
    enabled: bool = False
    save_interval: int = 1
    profile_steps: list[int] | None = None
    session_tracer: SessionTracerConfig | None = field(default=None)


def _package(name: str, path: list[str]) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = path
    module.__package__ = name
    sys.modules[name] = module
    return module


def load_perf_tracer() -> Any:
    """``areal.utils.perf_tracer``, the wheel's own module; raises :class:`AnchorMissing`."""
    if "areal.utils.perf_tracer" in sys.modules:
        return sys.modules["areal.utils.perf_tracer"]
    spec = importlib.util.find_spec("areal")
    if spec is None or not spec.submodule_search_locations:
        raise AnchorMissing(
            "AReaL is not installed: pip install --no-deps areal==1.0.4 orjson colorlog"
        )
    root = list(spec.submodule_search_locations)
    for needed in ("orjson", "colorlog"):
        if importlib.util.find_spec(needed) is None:
            raise AnchorMissing(f"AReaL's tracer needs {needed}: pip install {needed}")
    _package("areal", root)
    _package("areal.api", [f"{root[0]}/api"])
    cli_args = types.ModuleType("areal.api.cli_args")
    cli_args.PerfTracerConfig = PerfTracerConfig  # type: ignore[attr-defined]
    cli_args.SessionTracerConfig = SessionTracerConfig  # type: ignore[attr-defined]
    sys.modules["areal.api.cli_args"] = cli_args
    if importlib.util.find_spec("torch") is None:
        torch = types.ModuleType("torch")
        profiler = types.ModuleType("torch.profiler")

        def _no_profiler(*args: object, **kwargs: object) -> None:
            raise AnchorMissing("torch.profiler is a stand-in here; scopes never profile")

        profiler.profile = _no_profiler  # type: ignore[attr-defined]
        profiler.ProfilerActivity = types.SimpleNamespace(CPU="CPU", CUDA="CUDA")  # type: ignore[attr-defined]
        torch.profiler = profiler  # type: ignore[attr-defined]
        sys.modules["torch"] = torch
        sys.modules["torch.profiler"] = profiler
    try:
        return importlib.import_module("areal.utils.perf_tracer")
    except Exception as exc:
        raise AnchorMissing(f"areal.utils.perf_tracer failed to import: {exc!r}") from exc
