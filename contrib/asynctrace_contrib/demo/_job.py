"""The demo's job: the training loop and the rollout pump, each ending the other on failure.

``train_loop`` runs the per-step ``step`` umbrellas inside ``iteration_scope(step)``:
wait for a full batch (a 5 ms poll loop, one coalesced ``idle/buffer_starvation``
span per wait), ``policy_update`` (productive CPU work), validation inside
``bucket_scope(OVERHEAD)`` every other step, and a two-span checkpoint every
``checkpoint_every`` steps (staging blocks the loop; finalize runs in a daemon
thread and ends after its step). :func:`drive` runs it against the pump.
"""

from __future__ import annotations

import asyncio
import hashlib
import queue
import sys
import time
from collections.abc import Awaitable, Callable

import asynctrace as at

from .checkpoint import AsyncCheckpointer
from .pump import Collector, Rollout, RolloutPump

__all__ = ["DemoError", "Train", "cpu", "drive", "train_loop"]


class DemoError(RuntimeError):
    """A part of the demo failed while it ran; the message names it and the cause.

    Example:
        >>> str(DemoError("the rollout pump failed: OSError: gone"))
        'the rollout pump failed: OSError: gone'
    """


_BLOCK = bytes(256 * 1024)


def cpu(milliseconds: float) -> None:
    """Real CPU work standing in for a GPU kernel: hashing large blocks, which
    releases the GIL as an accelerator call would, so the loop keeps running."""
    deadline = time.perf_counter() + milliseconds / 1000
    while time.perf_counter() < deadline:
        hashlib.sha256(_BLOCK).digest()


async def train_loop(
    collector: Collector, steps: int, checkpoint_every: int, rollouts: list[Rollout]
) -> None:
    """The *steps* training steps, each on a batch of the pump's rollouts (added to *rollouts*)."""
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
                    await at.to_thread(cpu, 25)
            finally:
                collector.refit_done.set()
            if step % 2 == 0:
                with at.bucket_scope(at.Bucket.OVERHEAD):
                    with at.managed_span("generation", "rl.validate"):
                        await asyncio.sleep(0.01)
            if step % checkpoint_every == 0:
                checkpointer.save(step, stage=lambda s: cpu(8))
    checkpointer.finalize_pending(timeout=10)


def _failure(task: asyncio.Task[None]) -> BaseException | None:
    """The exception *task* ended with; ``None`` while it runs, if it was cancelled
    or if it returned."""
    if not task.done() or task.cancelled():
        return None
    return task.exception()


Train = Callable[[Collector, int, int, list[Rollout]], Awaitable[None]]


async def drive(
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
    assert driver is not None  # drive runs in a task: asyncio.run's

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
