"""The demo's driver: a training loop fed by the rollout pump, traced end to end.

``job`` umbrella → per-step ``step`` umbrellas inside ``iteration_scope(step)``
(the training loop, the pump and their failures are in
:mod:`asynctrace_contrib.demo._job`); the configuration is checked first
(:mod:`asynctrace_contrib.demo._config`), and a rerun replaces the demo's own
files (:mod:`asynctrace_contrib.demo._outputs`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asynctrace as at

from ._config import demo_config
from ._config import positive_int as positive_int
from ._job import DemoError as DemoError
from ._job import drive, train_loop
from ._outputs import SESSIONS_FILE, TRACE_FILE, start_telemetry
from .gym import GymServer
from .pump import Rollout, RolloutPump

__all__ = ["DemoError", "DemoResult", "positive_int", "run_demo"]


@dataclass
class DemoResult:
    """Where the demo wrote its files, and what it did."""

    out: Path
    trace_files: list[Path] = field(default_factory=list)
    sessions_file: Path | None = None
    rollouts: list[Rollout] = field(default_factory=list)
    seconds: float = 0.0


async def _run(
    out: Path,
    steps: int,
    prompts: int,
    max_inflight: int,
    checkpoint_every: int,
    gym_url: str,
) -> list[Rollout]:
    current = asyncio.current_task()
    if current is not None:
        current.set_name("driver")  # names its trace track: before its first span
    sizes = (steps, prompts, max_inflight, checkpoint_every, gym_url)
    with at.umbrella_span("job", "rl.job", attributes={"rl.steps": steps}):
        return await drive(RolloutPump, train_loop, at.to_thread, *sizes)


def run_demo(
    out: str | Path = "asynctrace-demo",
    *,
    steps: int = 8,
    prompts: int = 16,
    max_inflight: int = 4,
    checkpoint_every: int = 2,
    span_groups: str = "all",
    exporters: Sequence[str] | None = None,
) -> DemoResult:
    """Run the rollout-pump demo; traces and session records go to *out*.

    The chrome exporter always writes *out*'s trace files (the report and
    the goodput table read them); *exporters* adds others, such as
    ``["otlp"]`` to send the whole demo, the Gym server's spans included, to
    a collector. ``None``: ``ASYNCTRACE_EXPORTERS``, else
    ``OTEL_TRACES_EXPORTER``, as :meth:`asynctrace.TelemetryConfig.from_env`
    reads them.

    A rerun into the same *out* replaces the demo's own files
    (``traces-driver-r0.jsonl``, ``sessions-driver-r0.jsonl``,
    ``goodput-driver-r0.jsonl``) once telemetry has started; other files are
    left alone, and a run refused for its configuration keeps them all.

    Raises:
        ConfigurationError: an argument is not accepted (a span group no preset
            or built-in group knows, an *out* that is a file, a count below 1,
            an unknown exporter), or the environment is not (a malformed
            ``ASYNCTRACE_RUN_ID`` or ``LOCAL_RANK``, an unknown
            ``OTEL_EXPORTER_OTLP_PROTOCOL``), before anything runs; the
            earlier run's files are left as they were.
        DemoError: the run failed (the rollout pump raised: the Gym server
            gone, say); the training loop is stopped with it, not left waiting
            for batches that never come.

    Example:
        >>> result = run_demo("/tmp/demo", steps=2)  # doctest: +SKIP
        >>> result.trace_files  # doctest: +SKIP
        [PosixPath('/tmp/demo/traces-driver-r0.jsonl')]
    """
    started = time.perf_counter()
    out = Path(out)
    sizes = {
        "steps": steps,
        "prompts": prompts,
        "max_inflight": max_inflight,
        "checkpoint_every": checkpoint_every,
    }
    config = demo_config(out, span_groups, exporters, sizes)
    telemetry = start_telemetry(config, out)
    gym = GymServer()
    try:
        gym.start()
        rollouts = asyncio.run(_run(out, steps, prompts, max_inflight, checkpoint_every, gym.url))
    finally:
        gym.stop()
        telemetry.shutdown()
    result = DemoResult(out, rollouts=rollouts, seconds=time.perf_counter() - started)
    result.trace_files = [out / TRACE_FILE] if (out / TRACE_FILE).is_file() else []
    sessions = out / SESSIONS_FILE
    result.sessions_file = sessions if sessions.is_file() else None
    return result
