"""dispatch_scope and wait_until: the rollout-pump helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import asynctrace as at
from asynctrace import ConfigurationError
from asynctrace._backend import asyncio_loop
from asynctrace.testing import CapturedSpans, capture_spans


def attrs(span: object) -> dict[str, object]:
    """A span's attributes as a dict."""
    return dict(span.attributes or {})  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_dispatch_scope_is_a_per_prompt_umbrella(spans: CapturedSpans) -> None:
    """Attempt and target step are stamped; everything inside is per-prompt and unbucketed."""
    async with at.dispatch_scope(attempt=2, target_step=9) as span:
        assert at.in_per_prompt_scope()
        assert span.is_recording()
        with at.managed_span("reward", "score"):
            pass
    assert not at.in_per_prompt_scope()
    dispatch = spans.by_name("rl.rollout.dispatch")[0]
    assert attrs(dispatch) == {"rl.rollout.attempt": 2, "rl.target_step": 9}
    assert "rl.bucket" not in attrs(spans.by_name("score")[0])


def test_dispatch_scope_follows_the_per_prompt_switch() -> None:
    """With per_prompt off, nothing inside a dispatch is recorded."""
    with capture_spans("per_step") as captured, at.dispatch_scope(attempt=0):
        with at.managed_span("reward", "score"):
            pass
    assert captured.spans == []


@pytest.mark.parametrize("bad", [-1, "1", True])
def test_dispatch_scope_rejects_bad_attempts(bad: object) -> None:
    """attempt must be an int >= 0."""
    with pytest.raises(ConfigurationError, match="attempt"):
        at.dispatch_scope(attempt=bad)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_wait_until_coalesces_polls(spans: CapturedSpans) -> None:
    """A starved wait is one span with rl.idle.polls; a ready one records nothing."""
    box: list[int] = []
    asked = 0

    def ready() -> bool:
        nonlocal asked
        asked += 1
        return bool(box)

    async def fill() -> None:  # once the wait has polled five times, however slowly
        with anyio.move_on_after(10):  # at most 10 s: the count of polls says the rest
            while asked < 6:
                await anyio.sleep(0.002)
        box.append(1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(fill)
        polls = await at.wait_until(ready, interval_s=0.002)
    assert polls >= 5
    (wait,) = spans.spans
    assert wait.name == "rl.idle.buffer_starvation"
    assert attrs(wait)["rl.idle.polls"] == polls
    assert attrs(wait)["rl.bucket"] == "idle"
    assert await at.wait_until(lambda: True) == 0
    assert len(spans.spans) == 1


@pytest.mark.anyio
async def test_wait_until_timeout_and_async_predicates(spans: CapturedSpans) -> None:
    """An awaitable predicate works; a timeout raises and ends the wait as ERROR."""

    async def never() -> bool:
        return False

    with pytest.raises(TimeoutError):
        await at.wait_until(never, interval_s=0.001, timeout_s=0.02)
    (wait,) = spans.spans
    assert wait.status.status_code.name == "ERROR"


@pytest.mark.parametrize("bad", [0, -0.5, float("nan")])
def test_wait_until_rejects_bad_intervals(bad: float) -> None:
    """interval_s must be > 0; NaN too is refused (a NaN timer would fire at once, a busy wait)."""

    async def main() -> None:
        await at.wait_until(lambda: False, interval_s=bad, timeout_s=1.0)

    expected = r"wait_until\(interval_s\).*expected a number of seconds > 0"
    with pytest.raises(ConfigurationError, match=expected):
        asyncio.run(main())


def _guest_run(trio: Any, main: Callable[[], Awaitable[Any]]) -> asyncio.Future[Any]:
    """Start *main* as a trio guest run on the running asyncio loop; its outcome, when done."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    trio.lowlevel.start_guest_run(
        main, run_sync_soon_threadsafe=loop.call_soon_threadsafe, done_callback=done.set_result
    )
    return done


def test_wait_until_in_a_trio_guest_run_on_an_asyncio_loop(spans: CapturedSpans) -> None:
    """A trio task running as a guest of an asyncio loop polls with trio's sleep, not asyncio's."""
    trio = pytest.importorskip("trio")
    box: list[int] = []

    async def trio_main() -> int:
        async def fill() -> None:
            await trio.sleep(0.02)
            box.append(1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fill)
            return await at.wait_until(lambda: bool(box), interval_s=0.002)

    async def host() -> int:
        result: int = (await _guest_run(trio, trio_main)).unwrap()
        return result

    assert asyncio.run(host()) >= 1
    (wait,) = spans.by_name("rl.idle.buffer_starvation")
    assert attrs(wait)["rl.idle.polls"] >= 1


def test_during_a_trio_guest_run_the_host_loops_own_tasks_are_asyncio_tasks() -> None:
    """The guest's trio task takes anyio's paths; the host's asyncio tasks keep asyncio's."""
    trio = pytest.importorskip("trio")
    seen: dict[str, object] = {}

    async def trio_main() -> None:
        seen["trio task"] = asyncio_loop()
        await trio.sleep(0)

    async def host() -> None:
        done = _guest_run(trio, trio_main)
        assert trio.lowlevel.in_trio_run()  # the guest run is on this thread from here on
        seen["asyncio task"] = asyncio_loop()
        seen["loop"] = asyncio.get_running_loop()
        (await done).unwrap()

    asyncio.run(host())
    assert seen["trio task"] is None
    assert seen["asyncio task"] is seen["loop"]
