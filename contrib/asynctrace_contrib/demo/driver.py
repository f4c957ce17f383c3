"""The demo's driver: a training loop fed by the rollout pump, traced end to end.

``job`` umbrella → per-step ``step`` umbrellas inside ``iteration_scope(step)``:
wait for a full batch (a 5 ms poll loop, one coalesced ``idle/buffer_starvation``
span per wait), ``policy_update`` (productive CPU work), validation inside
``bucket_scope(OVERHEAD)`` every other step, and a two-span checkpoint every
``checkpoint_every`` steps (staging blocks the loop; finalize runs in a daemon
thread and ends after its step).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import queue
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asynctrace as at

from .checkpoint import AsyncCheckpointer
from .gym import GymServer
from .pump import Collector, Rollout, RolloutPump

__all__ = ["DemoError", "DemoResult", "positive_int", "run_demo"]


class DemoError(RuntimeError):
    """A part of the demo failed while it ran; the message names it and the cause.

    Example:
        >>> str(DemoError("the rollout pump failed: OSError: gone"))
        'the rollout pump failed: OSError: gone'
    """


@dataclass
class DemoResult:
    """Where the demo wrote its files, and what it did."""

    out: Path
    trace_files: list[Path] = field(default_factory=list)
    sessions_file: Path | None = None
    rollouts: list[Rollout] = field(default_factory=list)
    seconds: float = 0.0


_BLOCK = bytes(256 * 1024)


def _cpu(milliseconds: float) -> None:
    """Real CPU work standing in for a GPU kernel: hashing large blocks, which
    releases the GIL as an accelerator call would, so the loop keeps running."""
    deadline = time.perf_counter() + milliseconds / 1000
    while time.perf_counter() < deadline:
        hashlib.sha256(_BLOCK).digest()


async def _train(
    collector: Collector, steps: int, checkpoint_every: int, rollouts: list[Rollout]
) -> None:
    checkpointer = AsyncCheckpointer(finalize=lambda step: time.sleep(0.15))
    for step in range(1, steps + 1):
        with at.iteration_scope(step), at.umbrella_span("step", "rl.step"):
            await at.wait_until(lambda: bool(collector.batches), interval_s=0.005)
            batch = collector.batches.popleft()
            rollouts.extend(batch)
            collector.refit_done.clear()
            try:
                with at.managed_span(
                    "policy_update", "rl.policy_update", attributes={"rl.batch_size": len(batch)}
                ):
                    # The "GPU" works while the loop keeps serving the pump.
                    await at.to_thread(_cpu, 25)
            finally:
                collector.refit_done.set()
            if step % 2 == 0:
                with at.bucket_scope(at.Bucket.OVERHEAD):
                    with at.managed_span("generation", "rl.validate"):
                        await asyncio.sleep(0.01)
            if step % checkpoint_every == 0:
                checkpointer.save(step, stage=lambda s: _cpu(8))
    checkpointer.finalize_pending(timeout=10)


def _failure(task: asyncio.Task[None]) -> BaseException | None:
    """The exception *task* ended with; ``None`` while it runs, if it was cancelled
    or if it returned."""
    if not task.done() or task.cancelled():
        return None
    return task.exception()


Train = Callable[[Collector, int, int, list[Rollout]], Awaitable[None]]


async def _drive(
    pump_type: type[RolloutPump],
    train: Train,
    to_thread: Callable[..., Awaitable[object]],
    steps: int,
    prompts: int,
    max_inflight: int,
    checkpoint_every: int,
    gym_url: str,
) -> list[Rollout]:
    """The job: the collector thread, the pump task and *train*; the finished rollouts.

    *train* runs in the calling task (its spans stay on that task's track). A
    failure of either side ends the other: a pump that fails cancels *train*,
    which would otherwise wait for a batch that never comes, and a *train* that
    fails cancels the pump; the collector thread ends either way.
    Shared with the benchmark's runs of the same work under other tracers.

    Raises:
        DemoError: the pump failed (the pump's exception is its cause).
    """
    rollouts: list[Rollout] = []
    finished: queue.Queue[Rollout | None] = queue.Queue()
    collector = Collector(finished, batch_size=prompts)
    collector.start()  # a ContextThread: its spans join this trace
    pump = pump_type(gym_url, steps, prompts, finished, max_inflight=max_inflight)
    pump_task = asyncio.create_task(pump.run(), name="rollout-pump")
    driver = asyncio.current_task()
    assert driver is not None  # _drive runs in a task: asyncio.run's

    def pump_done(task: asyncio.Task[None]) -> None:
        if _failure(task) is not None:
            driver.cancel()  # train waits for batches the pump will not make

    pump_task.add_done_callback(pump_done)
    try:
        await train(collector, steps, checkpoint_every, rollouts)
        await asyncio.wait([pump_task])
    except asyncio.CancelledError:
        if _failure(pump_task) is None:
            raise  # cancelled from outside
        if sys.version_info >= (3, 11):
            driver.uncancel()  # the cancellation was pump_done's
    finally:
        pump_task.remove_done_callback(pump_done)  # the driver is past its waits
        if not pump_task.done():  # train failed, or the job was cancelled
            pump_task.cancel()
        if not pump_task.done() or pump_task.cancelled() or _failure(pump_task) is not None:
            finished.put(None)  # the pump did not end the collector: end it here
            await asyncio.wait([pump_task])
    failure = _failure(pump_task)
    if failure is not None:
        message = f"the rollout pump failed: {type(failure).__name__}: {failure}"
        raise DemoError(message) from failure
    await to_thread(collector.thread.join, 10)
    return rollouts


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
        return await _drive(RolloutPump, _train, at.to_thread, *sizes)


def demo_exporters(exporters: Sequence[str] | None = None) -> list[str]:
    """``chrome`` plus *exporters* (``None``: those the environment names).

    Example:
        >>> demo_exporters(["otlp"])
        ['chrome', 'otlp']
    """
    if exporters is None:
        base = at.TelemetryConfig(exporters=[])
        exporters = [
            e for e in at.TelemetryConfig.from_env(base=base).exporters if isinstance(e, str)
        ]
    return ["chrome", *(name for name in dict.fromkeys(exporters) if name != "chrome")]


def positive_int(text: str) -> int:
    """An integer >= 1, for an ``argparse`` option (its message names the bad value).

    Example:
        >>> positive_int("3")
        3
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _demo_config(
    out: Path, span_groups: str, exporters: Sequence[str] | None, sizes: dict[str, int]
) -> dict[str, Any]:
    """The demo's configuration, every argument and key checked.

    Raises:
        ConfigurationError: naming the argument, its value and what is accepted.
    """
    for name, value in sizes.items():
        if value.__class__ is not int or value < 1:
            raise at.ConfigurationError(
                f"{name}: {value!r} is not accepted; accepted: an integer >= 1"
            )
    # The demo registers no group of its own: a name no preset or built-in group
    # knows is a typo, refused now rather than left pending for the whole run.
    at.resolve_span_groups(span_groups)
    if out.exists() and not out.is_dir():
        raise at.ConfigurationError(
            f"out: {str(out)!r} is not accepted; accepted: a directory (it is a file)"
        )
    config = {
        "enabled": True,
        "span_groups": span_groups,
        "exporters": demo_exporters(exporters),
        "output_dir": str(out),
        "session_tracer": {"enabled": True, "flush_threshold": 32},
        # goodput-*.jsonl, a line per finished step (asynctrace watch reads it); the
        # demo's steps are short, so a step is final once spans end 0.25 s past it
        "goodput": {"metrics": "none", "grace_s": 0.25},
    }
    at.TelemetryConfig.from_mapping(config)  # every key checked now, before anything runs
    return config


# The files init_driver writes (rank 0, role driver): the demo's own, replaced on a rerun.
_TRACE_FILE = "traces-driver-r0.jsonl"
_SESSIONS_FILE = "sessions-driver-r0.jsonl"
_GOODPUT_FILE = "goodput-driver-r0.jsonl"
_OWN_FILES = (_TRACE_FILE, _SESSIONS_FILE, _GOODPUT_FILE)


def _set_aside(out: Path) -> Path | None:
    """Move the demo's files of an earlier run out of the way, into a new hidden
    directory in *out*; that directory, or ``None`` when there were none.

    The exporter and the session tracer append to the files they find: the
    run starts with none. Other files in *out* are left alone.

    Raises:
        ConfigurationError: *out* does not let them be moved (nothing moved then).
    """
    earlier = [out / name for name in _OWN_FILES if (out / name).is_file()]
    if not earlier:
        return None
    aside: Path | None = None
    try:
        aside = Path(tempfile.mkdtemp(prefix=".earlier-demo-", dir=out))
        for path in earlier:
            path.replace(aside / path.name)
    except OSError as exc:
        if aside is not None:
            _put_back(aside, out)
        raise at.ConfigurationError(
            f"out: {str(out)!r} is not accepted; accepted: a directory whose earlier demo "
            f"files can be replaced ({exc.strerror or exc})"
        ) from None
    return aside


def _put_back(aside: Path, out: Path) -> None:
    """Return the files :func:`_set_aside` moved to *aside* (over any new ones)."""
    for path in aside.iterdir():
        path.replace(out / path.name)
    aside.rmdir()


def _start_telemetry(config: dict[str, Any], out: Path) -> at.Telemetry:
    """``init_driver(config)`` in place of the demo's earlier files in *out*.

    They are only set aside while it checks everything (the environment's
    ``ASYNCTRACE_RUN_ID``, ``LOCAL_RANK`` and ``OTEL_EXPORTER_OTLP_PROTOCOL``
    too) and opens its files: if it refuses, they are put back unchanged;
    once it runs, they are deleted.
    """
    aside = _set_aside(out)
    try:
        telemetry = at.init_driver(config)
    except BaseException:
        if aside is not None:
            _put_back(aside, out)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return telemetry


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
    config = _demo_config(out, span_groups, exporters, sizes)
    telemetry = _start_telemetry(config, out)
    gym = GymServer()
    try:
        gym.start()
        rollouts = asyncio.run(_run(out, steps, prompts, max_inflight, checkpoint_every, gym.url))
    finally:
        gym.stop()
        telemetry.shutdown()
    result = DemoResult(out, rollouts=rollouts, seconds=time.perf_counter() - started)
    result.trace_files = [out / _TRACE_FILE] if (out / _TRACE_FILE).is_file() else []
    sessions = out / _SESSIONS_FILE
    result.sessions_file = sessions if sessions.is_file() else None
    return result
