"""The demo's pump and driver recorded by AReaL's ``perf_tracer`` instead (benchmark only).

The anchor of ``bench_demo.py``: the same work as ``asynctrace_contrib.demo``
(the same seeds, sleeps, CPU work, Gym requests, batches and checkpoints,
against the same Gym server), with AReaL 1.0.4's own API at the places the
demo calls asynctrace: a task and a session per prompt group
(``register_task``, ``register_session``, ``set_session_id``), the
``generate`` and ``reward`` phases (``atrace_session_phase``), a scope per
generation, per dispatch attempt and per Gym request (``atrace_scope`` with
the ids and attributes the demo's spans carry, as a user of that tracer
passes them by hand), the retry counter and the finalize event
(``trace_session_event``), and the driver's step, wait, update, validation
and checkpoint scopes; ``save(step=...)`` after each step, as AReaL's
trainer calls it, with the session tracer at the demo's flush threshold.

What AReaL cannot record is left out, so this does less than the demo: no
trace context crosses the HTTP request (no ``traceparent``), no loop-stall
watch, no goodput rollup. AReaL writes its buffer and session lines on the
calling thread (``json.dumps`` and ``os.fsync``): that is its design, and it
runs here as it runs in AReaL.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import aiohttp
from _areal import PerfTracerConfig, SessionTracerConfig, load_perf_tracer
from _demo_parts import TwoPartCheckpointer
from asynctrace_contrib.demo._job import cpu, drive
from asynctrace_contrib.demo.pump import MAX_ATTEMPTS, Collector, Rollout, RolloutPump

__all__ = ["configure", "run"]

pt: Any = None  # areal.utils.perf_tracer, once configure() loaded it


def configure(out: Path, flush_threshold: int) -> Any:
    """Load and configure AReaL's tracer and session tracer, writing under *out*."""
    global pt
    pt = load_perf_tracer()
    pt.logger.setLevel(logging.WARNING)  # not a line per run ("Configured global PerfTracer")
    pt.reset()
    config = PerfTracerConfig(
        experiment_name="demo",
        trial_name="bench",
        fileroot=str(out),
        enabled=True,
        save_interval=1,
        session_tracer=SessionTracerConfig(enabled=True, flush_threshold=flush_threshold),
    )
    return pt.configure(config, rank=0)


class AReaLPump(RolloutPump):
    """:class:`RolloutPump` with AReaL's calls, over a plain aiohttp session."""

    def http_session(self) -> aiohttp.ClientSession:
        """A plain session: no asynctrace middleware."""
        return aiohttp.ClientSession()

    async def _group(self, http: aiohttp.ClientSession, prompt_id: int, target_step: int) -> None:
        draw = random.Random(self.seed * 1_000_003 + prompt_id)
        pt.set_task_id(prompt_id)
        pt.register_task(prompt_id)
        session_id = pt.register_session(prompt_id)
        pt.set_session_id(session_id)
        ids = {"rl.task_id": prompt_id, "rl.session_id": session_id}
        async with pt.atrace_session_phase("generate"):
            async with pt.atrace_scope("rl.generate", category="compute", args=ids):
                await asyncio.sleep(draw.uniform(0.005, 0.03))
            tokens = [draw.randrange(32_000) for _ in range(16)]
        reward = None
        attempt = 0
        url = f"{self.gym_url}/score/{prompt_id}"
        for attempt in range(MAX_ATTEMPTS):
            dispatch = {**ids, "rl.rollout.attempt": attempt, "rl.target_step": target_step}
            async with pt.atrace_scope("rl.rollout.dispatch", category="scheduler", args=dispatch):
                async with pt.atrace_session_phase("reward"):
                    request = {**ids, "http.request.method": "POST", "url.full": url}
                    async with pt.atrace_scope("POST", category="comm", args=request):
                        reward = await self._score(http, prompt_id, attempt, tokens)
            if reward is not None:
                break
            if attempt + 1 < MAX_ATTEMPTS:
                pt.trace_session_event(
                    "increment_counter", session_id=session_id, name="retries", value=1
                )
        status = "accepted" if reward is not None else "failed"
        reason = None if reward is not None else "gym error on every attempt"
        pt.trace_session_event(
            "mark_finalized", session_id=session_id, status=status, reason=reason
        )
        self.finished += 1
        self.out.put(Rollout(prompt_id, target_step, reward, attempt + 1))


class _Checkpointer(TwoPartCheckpointer):
    """The checkpoint's parts as AReaL scopes."""

    def scope(self, name: str, step: int) -> AbstractContextManager[Any]:
        return pt.trace_scope(name, category="io", args={"global_step": step})


async def _train(
    collector: Collector, steps: int, checkpoint_every: int, rollouts: list[Rollout]
) -> None:
    checkpointer = _Checkpointer(finalize=lambda step: time.sleep(0.15))
    for step in range(1, steps + 1):
        at_step = {"global_step": step}
        async with pt.atrace_scope("rl.step", category="scheduler", args=at_step):
            if not collector.batches:
                async with pt.atrace_scope(
                    "rl.idle.buffer_starvation", category="sync", args=at_step
                ):
                    while not collector.batches:
                        await asyncio.sleep(0.005)
            batch = collector.batches.popleft()
            rollouts.extend(batch)
            collector.refit_done.clear()
            try:
                update = {**at_step, "rl.batch_size": len(batch)}
                async with pt.atrace_scope("rl.policy_update", category="compute", args=update):
                    await asyncio.to_thread(cpu, 25)
            finally:
                collector.refit_done.set()
            if step % 2 == 0:
                async with pt.atrace_scope("rl.validate", category="compute", args=at_step):
                    await asyncio.sleep(0.01)
            if step % checkpoint_every == 0:
                checkpointer.save(step)
        pt.save(step=step)
    checkpointer.finalize_pending(timeout=10)


async def run(
    steps: int, prompts: int, max_inflight: int, checkpoint_every: int, gym_url: str
) -> list[Rollout]:
    """The demo's ``_run``, recorded by AReaL's tracer (configure it first)."""
    current = asyncio.current_task()
    if current is not None:
        current.set_name("driver")
    async with pt.atrace_scope("rl.job", category="scheduler", args={"rl.steps": steps}):
        sizes = (steps, prompts, max_inflight, checkpoint_every, gym_url)
        rollouts = await drive(AReaLPump, _train, asyncio.to_thread, *sizes)
    pt.save(force=True)
    return rollouts
