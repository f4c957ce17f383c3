"""The rollout-pump demo: an async RL training loop against a real Gym server.

No GPU and no model: generation is a sleep, the policy update and the Gym's
scoring are small CPU computations. Everything else is what a real pipeline
does — an asyncio driver loop, a rollout pump with bounded in-flight work and
retries, a collector thread, a FastAPI environment server called over aiohttp,
two-span checkpoints — all traced into one trace per run.

Run it with ``asynctrace demo`` (or ``python -m asynctrace_contrib.demo``).
"""

from __future__ import annotations

from ._config import positive_int
from ._job import DemoError
from .driver import DemoResult, run_demo

__all__ = ["DemoError", "DemoResult", "positive_int", "run_demo"]
