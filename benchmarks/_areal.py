"""AReaL's released ``perf_tracer`` without its training stack: ``tests/_areal_loader.py``.

The loader lives with the tests, which use it too; this module re-exports it
for the benchmarks.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "tests" / "_areal_loader.py"
_spec = importlib.util.spec_from_file_location("_areal_loader", _PATH)
assert _spec is not None
assert _spec.loader is not None
_loader = sys.modules.get("_areal_loader") or importlib.util.module_from_spec(_spec)
if "_areal_loader" not in sys.modules:
    sys.modules["_areal_loader"] = _loader
    _spec.loader.exec_module(_loader)

ANCHOR_VERSION = _loader.ANCHOR_VERSION
AnchorMissing = _loader.AnchorMissing
PerfTracerConfig = _loader.PerfTracerConfig
SessionTracerConfig = _loader.SessionTracerConfig
load_perf_tracer = _loader.load_perf_tracer
load_tool = _loader.load_tool

__all__ = [
    "ANCHOR_VERSION",
    "AnchorMissing",
    "PerfTracerConfig",
    "SessionTracerConfig",
    "load_perf_tracer",
    "load_tool",
]
