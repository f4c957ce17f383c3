"""The demo's pump and driver recorded by the floor tracer (benchmark only).

The floor of ``bench_demo.py``: the same work as ``asynctrace_contrib.demo``
(the same seeds, sleeps, CPU work, Gym requests, batches and checkpoints,
against the same Gym server), recorded by ``_floor_tracer.py``, the least a
tracer can do, at the places the demo calls asynctrace: the event-loop
thread's spans with the attributes the demo's spans carry, a ``traceparent``
on every Gym request, a session per prompt group with its ``generate`` and
``reward`` phases and its final status, and the checkpoint's finalize span
in its thread. The attributes are built by hand in this module (as a user of
AReaL's tracer builds them), so that work counts as the application's: where
asynctrace's scopes stamp them, it counts as asynctrace's. The collector
thread's batch and wait spans are not recorded (they are not on the loop's
thread). asynctrace is off in these runs, as in the anchor's.
"""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import AbstractContextManager
from typing import Any

import _floor_tracer as ft
import aiohttp
import yarl
from _demo_parts import TwoPartCheckpointer
from asynctrace_contrib.demo._job import cpu, drive
from asynctrace_contrib.demo.pump import MAX_ATTEMPTS, Collector, Rollout, RolloutPump

__all__ = ["run"]


class FloorPump(RolloutPump):
    """:class:`RolloutPump` recorded by the floor tracer, over a plain aiohttp session."""

    def http_session(self) -> aiohttp.ClientSession:
        """A plain session: no asynctrace middleware."""
        return aiohttp.ClientSession()

    async def _group(self, http: aiohttp.ClientSession, prompt_id: int, target_step: int) -> None:
        draw = random.Random(self.seed * 1_000_003 + prompt_id)
        record = ft.session(prompt_id)
        ids = {"rl.task_id": prompt_id, "rl.session_id": record[0]}
        with ft.Phase(record, "generate"):
            with ft.Span("rl.generate", ids.copy()):
                await asyncio.sleep(draw.uniform(0.005, 0.03))
            tokens = [draw.randrange(32_000) for _ in range(16)]
        reward = None
        attempt = 0
        url = yarl.URL(f"{self.gym_url}/score/{prompt_id}")
        server = {"server.address": url.host, "server.port": url.port}
        for attempt in range(MAX_ATTEMPTS):
            dispatch = {**ids, "rl.rollout.attempt": attempt, "rl.target_step": target_step}
            with ft.Span("rl.rollout.dispatch", dispatch), ft.Phase(record, "reward"):
                request = {**ids, "http.request.method": "POST", "url.full": str(url)}
                request.update(server)
                with ft.Span("POST", request) as span:
                    reward = await self._score(http, url, attempt, tokens, span)
            if reward is not None:
                break
            if attempt + 1 < MAX_ATTEMPTS:
                record.append(("retries", 1))
        status = "accepted" if reward is not None else "failed"
        reason = None if reward is not None else "gym error on every attempt"
        ft.finalize(record, status, reason)
        self.finished += 1
        self.out.put(Rollout(prompt_id, target_step, reward, attempt + 1))

    async def _score(  # type: ignore[override]
        self,
        http: aiohttp.ClientSession,
        url: yarl.URL,
        attempt: int,
        tokens: list[int],
        span: ft.Span,
    ) -> float | None:
        body = {"attempt": attempt, "tokens": tokens}
        async with http.post(url, json=body, headers=ft.carrier(span)) as response:
            span.attributes["http.response.status_code"] = response.status
            if response.status >= 500:
                await response.read()
                return None
            response.raise_for_status()
            reply: dict[str, Any] = await response.json()
            return float(reply["reward"])


class _Checkpointer(TwoPartCheckpointer):
    """The checkpoint's parts as floor spans."""

    def scope(self, name: str, step: int) -> AbstractContextManager[Any]:
        if name == "rl.checkpointing":
            return ft.Span(name, {"rl.iteration": step, "rl.bucket": "overhead"})
        return ft.Span(name, {"rl.iteration": step})


async def _train(
    collector: Collector, steps: int, checkpoint_every: int, rollouts: list[Rollout]
) -> None:
    checkpointer = _Checkpointer(finalize=lambda step: time.sleep(0.15))
    for step in range(1, steps + 1):
        with ft.Span("rl.step", {"rl.iteration": step}):
            if not collector.batches:
                wait = {"rl.iteration": step, "rl.bucket": "idle", "rl.idle.polls": 0}
                with ft.Span("rl.idle.buffer_starvation", wait):
                    while not collector.batches:
                        await asyncio.sleep(0.005)
                        wait["rl.idle.polls"] += 1
            batch = collector.batches.popleft()
            rollouts.extend(batch)
            collector.refit_done.clear()
            try:
                update = {"rl.iteration": step, "rl.bucket": "productive"}
                update["rl.batch_size"] = len(batch)
                with ft.Span("rl.policy_update", update):
                    await asyncio.to_thread(cpu, 25)
            finally:
                collector.refit_done.set()
            if step % 2 == 0:
                with ft.Span("rl.validate", {"rl.iteration": step, "rl.bucket": "overhead"}):
                    await asyncio.sleep(0.01)
            if step % checkpoint_every == 0:
                checkpointer.save(step)
    checkpointer.finalize_pending(timeout=10)


async def run(
    steps: int, prompts: int, max_inflight: int, checkpoint_every: int, gym_url: str
) -> list[Rollout]:
    """The demo's ``_run``, recorded by the floor tracer."""
    ft.reset()
    current = asyncio.current_task()
    if current is not None:
        current.set_name("driver")
    with ft.Span("rl.job", {"rl.steps": steps}):
        sizes = (steps, prompts, max_inflight, checkpoint_every, gym_url)
        return await drive(FloorPump, _train, asyncio.to_thread, *sizes)
