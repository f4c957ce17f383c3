"""The rollout pump (asyncio) and the collector thread that batches its rollouts.

The pump dispatches one asyncio task per prompt group, at most
``max_inflight`` at once. Each group is a task of the session tracer with one
session (generate, then reward phases); the reward comes from the Gym server
over an instrumented aiohttp session, inside :func:`asynctrace.dispatch_scope`
(per-prompt, unbucketed), retried with ``rl.rollout.attempt`` > 0 when the
Gym fails. The collector thread, started with :class:`asynctrace.ContextThread`,
turns finished rollouts into batches; while the driver refits it waits, and
that wait is an unbucketed ``idle/refit_event_wait`` span.
"""

from __future__ import annotations

import asyncio
import collections
import queue
import random
import threading
from dataclasses import dataclass
from typing import Any

import aiohttp

import asynctrace as at
from asynctrace_contrib.aiohttp_client import client_middleware

__all__ = ["Collector", "Rollout", "RolloutPump"]

MAX_ATTEMPTS = 3


@dataclass
class Rollout:
    """One finished prompt group."""

    prompt_id: int
    target_step: int
    reward: float | None
    attempts: int


@dataclass
class RolloutPump:
    """Generates rollouts for steps ``1..steps``, ``prompts`` groups per step."""

    gym_url: str
    steps: int
    prompts: int
    out: queue.Queue[Rollout | None]
    max_inflight: int = 4
    seed: int = 0
    finished: int = 0

    def http_session(self) -> aiohttp.ClientSession:
        """The session the Gym is called through: asynctrace's client middleware on it."""
        return aiohttp.ClientSession(middlewares=(client_middleware(),))

    async def run(self) -> None:
        """Dispatch every prompt group, bounded, then signal the end.

        A group that raises (the Gym unreachable, say) ends the others and
        the pump with its exception, without signalling the end.
        """
        limit = asyncio.Semaphore(self.max_inflight)
        async with self.http_session() as http:

            async def group(prompt_id: int, target_step: int) -> None:
                async with limit:
                    await self._group(http, prompt_id, target_step)

            tasks = [
                asyncio.create_task(group(prompt, step), name=f"prompt-{prompt}")
                for step in range(1, self.steps + 1)
                for prompt in range((step - 1) * self.prompts, step * self.prompts)
            ]
            try:
                await asyncio.gather(*tasks)
            except BaseException:
                # A group failed (or the pump was cancelled): the others end with it,
                # before the session closes, and none is left with an unread error.
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        self.out.put(None)

    async def _group(self, http: aiohttp.ClientSession, prompt_id: int, target_step: int) -> None:
        # A generator per prompt group: the groups run concurrently, so draws from a
        # shared one would depend on scheduling and a seed would not repeat a run.
        draw = random.Random(self.seed * 1_000_003 + prompt_id)
        with at.task_scope(prompt_id), at.session_scope():
            async with at.atrace_session_phase("generate"):
                with at.per_prompt_scope(), at.managed_span("generation", "rl.generate"):
                    await asyncio.sleep(draw.uniform(0.005, 0.03))  # the "model"
                tokens = [draw.randrange(32_000) for _ in range(16)]
            reward = None
            attempt = 0
            for attempt in range(MAX_ATTEMPTS):
                async with at.dispatch_scope(attempt=attempt, target_step=target_step):
                    async with at.atrace_session_phase("reward"):
                        reward = await self._score(http, prompt_id, attempt, tokens)
                if reward is not None:
                    break
                if attempt + 1 < MAX_ATTEMPTS:
                    at.increment_counter("retries")
            status = "accepted" if reward is not None else "failed"
            reason = None if reward is not None else "gym error on every attempt"
            at.trace_session_event("finalized", status=status, reason=reason)
        self.finished += 1
        self.out.put(Rollout(prompt_id, target_step, reward, attempt + 1))

    async def _score(
        self, http: aiohttp.ClientSession, prompt_id: int, attempt: int, tokens: list[int]
    ) -> float | None:
        url = f"{self.gym_url}/score/{prompt_id}"
        async with http.post(url, json={"attempt": attempt, "tokens": tokens}) as response:
            if response.status >= 500:
                await response.read()
                return None
            response.raise_for_status()
            body: dict[str, Any] = await response.json()
            return float(body["reward"])


class Collector:
    """Batches rollouts in a thread; pauses while the driver refits the policy."""

    def __init__(self, source: queue.Queue[Rollout | None], batch_size: int) -> None:
        self.source = source
        self.batch_size = batch_size
        self.batches: collections.deque[list[Rollout]] = collections.deque()
        self.refit_done = threading.Event()
        self.refit_done.set()
        self.thread = at.ContextThread(target=self._run, name="collector", daemon=True)

    def start(self) -> None:
        """Start the collector thread (in the caller's trace context)."""
        self.thread.start()

    def _run(self) -> None:
        pending: list[Rollout] = []
        while True:
            item = self.source.get()
            if item is None:
                break
            if not self.refit_done.is_set():
                # The weights are being updated: the collection loop parks until the
                # refit is done. This thread's wall clock overlaps the driver's, so
                # the wait is kept out of the goodput buckets (unbucketed category).
                with at.efficiency_span("idle/refit_event_wait"):
                    self.refit_done.wait()
            pending.append(item)
            if len(pending) == self.batch_size:
                with at.umbrella_span("rollout", "rl.collector.batch") as span:
                    span.set_attribute("rl.num_prompt_groups", len(pending))
                    self.batches.append(pending)
                pending = []
        if pending:
            self.batches.append(pending)
