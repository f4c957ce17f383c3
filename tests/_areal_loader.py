"""Load AReaL's released ``perf_tracer`` without the training stack it sits in.

``import areal.utils.perf_tracer`` normally runs ``areal/__init__.py``, which
imports the whole trainer (torch, ray, ...). Here bare package objects stand
in for ``areal`` and ``areal.api`` (their ``__path__`` is the installed
wheel's), so the real ``areal/utils/perf_tracer.py`` and
``areal/utils/logging.py`` load unmodified. ``areal.api.cli_args`` gets just
the two dataclasses the tracer reads, with the wheel's fields and defaults,
and ``torch.profiler`` a dummy (touched only by a scope that enables the
profiler, which the benchmarks never do).

AReaL's tools (``areal/tools/perf_trace_converter.py``,
``areal/tools/plot_session_trace.py``) are loaded from the wheel by file path
(:func:`load_tool`), since importing them as ``areal.tools.*`` would run
``areal/__init__.py`` too.

Install it with ``pip install --no-deps areal==1.0.4 orjson colorlog`` (and
``numpy pandas plotly`` for the plot tool). Only that release is the anchor:
with another version installed the loaders raise :class:`AnchorMissing`
naming both, since the stand-in dataclasses and every comparison are 1.0.4's. Used by the tests
(``tests/contrib/test_areal.py``, ``tests/cli/test_areal_files.py``) and by
``benchmarks/bench_provider.py``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import types
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANCHOR_VERSION",
    "AnchorMissing",
    "PerfTracerConfig",
    "SessionTracerConfig",
    "load_perf_tracer",
    "load_tool",
]


ANCHOR_VERSION = "1.0.4"  # the AReaL release the tests and benchmarks compare against

_INSTALL = f"pip install --no-deps areal=={ANCHOR_VERSION}"


class AnchorMissing(RuntimeError):
    """AReaL's tracer could not be loaded; the message says why."""


def _areal_root() -> list[str]:
    """The installed ``areal`` package's directories, once its version is checked.

    Raises:
        AnchorMissing: AReaL is not installed, or not as release ``ANCHOR_VERSION``.
    """
    spec = importlib.util.find_spec("areal")
    if spec is None or not spec.submodule_search_locations:
        raise AnchorMissing(f"AReaL is not installed: {_INSTALL} orjson colorlog")
    try:
        installed = importlib.metadata.version("areal")
    except importlib.metadata.PackageNotFoundError:
        installed = "unknown (no package metadata)"
    if installed != ANCHOR_VERSION:
        raise AnchorMissing(
            f"AReaL {installed} is installed, not the anchor release {ANCHOR_VERSION}: {_INSTALL}"
        )
    return list(spec.submodule_search_locations)


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
    root = _areal_root()
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


def load_tool(name: str) -> Any:
    """``areal/tools/<name>.py`` from the installed wheel, imported by file path.

    Raises :class:`AnchorMissing` when AReaL or the tool's own imports are missing.
    """
    loaded = sys.modules.get("areal")  # the bare package load_perf_tracer registers
    if loaded is not None and getattr(loaded, "__path__", None):
        root = next(iter(loaded.__path__))
    else:
        root = _areal_root()[0]
    path = f"{root}/tools/{name}.py"
    module_name = f"_areal_tool_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    tool_spec = importlib.util.spec_from_file_location(module_name, path)
    if tool_spec is None or tool_spec.loader is None:
        raise AnchorMissing(f"AReaL's {name} is not in the installed wheel ({path})")
    module = importlib.util.module_from_spec(tool_spec)
    try:
        tool_spec.loader.exec_module(module)
    except ImportError as exc:
        raise AnchorMissing(f"AReaL's {name} needs {exc.name}: pip install {exc.name}") from exc
    sys.modules[module_name] = module
    return module
