"""Load: 10,000 concurrent tasks, each in its own scopes, nested spans, thread hops."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import Counter

import pytest

import asynctrace as at
from asynctrace.testing import capture_spans

from ._soak import report, scale

TASKS = 10_000


def _in_thread(step: int) -> int:
    with at.managed_span("reward", "in-thread"):
        return step


async def _one(step: int, pool: concurrent.futures.Executor) -> None:
    with at.iteration_scope(step), at.bucket_scope(at.Bucket.PRODUCTIVE), at.task_scope(step):
        with at.session_scope(), at.umbrella_span("rollout", "rollout"):
            with at.managed_span("generation", "generate"):
                await asyncio.sleep(0)
            assert await at.to_thread(_in_thread, step) == step
            future = pool.submit(_in_thread, step)
            assert await asyncio.wrap_future(future) == step
            with at.managed_span("reward", "score"):
                await asyncio.sleep(0)


def test_ten_thousand_concurrent_tasks_never_leak_scopes(caplog: pytest.LogCaptureFixture) -> None:
    """Every span carries its own task's iteration and session; each ends once; no warnings.

    Rounds of 10,000 tasks follow each other for 15 s by default, 60 s with
    ``-- full`` (the first round always runs whole).
    """
    seconds = 15.0 * scale()
    rounds = 0
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    total = 0
    with capture_spans("all") as spans:
        while rounds == 0 or time.monotonic() - started < seconds:
            rounds += 1
            spans.clear()

            async def main() -> None:
                with concurrent.futures.ThreadPoolExecutor(4) as raw:
                    pool = at.context_executor(raw)
                    await asyncio.gather(*(_one(step, pool) for step in range(TASKS)))

            asyncio.run(main())
            ours = {"rollout", "generate", "in-thread", "score"}  # not the loop-stall spans
            finished = [span for span in spans.spans if span.name in ours]
            assert len(finished) == TASKS * 5
            ids = Counter(span.context.span_id for span in finished)
            assert max(ids.values()) == 1  # every span ended (and was exported) once
            sessions: dict[int, set[str]] = {}
            for span in finished:
                attrs = span.attributes or {}
                step = attrs["rl.iteration"]
                assert attrs["rl.task_id"] == step  # never another task's
                sessions.setdefault(step, set()).add(attrs["rl.session_id"])
            assert len(sessions) == TASKS
            assert all(len(ids) == 1 for ids in sessions.values())
            total += len(finished)
    took = time.monotonic() - started
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    report(
        "load", tasks=TASKS, rounds=rounds, seconds=round(took, 1), spans=total,
        spans_per_s=round(total / took),
    )  # fmt: skip
