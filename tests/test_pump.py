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


class _ReadCounter(dict[str, int]):
    """A mapping of attributes that counts how often it is read."""

    reads = 0

    def __len__(self) -> int:
        type(self).reads += 1
        return super().__len__()

    def keys(self) -> Any:
        type(self).reads += 1
        return super().keys()


@pytest.mark.parametrize("telemetry", [False, True], ids=["off", "on"])
def test_dispatch_scope_with_attributes_that_are_not_a_mapping_runs_untraced(
    telemetry: bool, lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    """attributes="abc" is reported once (telemetry on), never raised; the scope still works."""
    with capture_spans("all" if telemetry else "") as captured:
        for _ in range(2):
            with at.dispatch_scope(attributes="abc") as span:  # type: ignore[arg-type]
                assert at.in_per_prompt_scope()
                assert not span.is_recording()
        assert not at.in_per_prompt_scope()
        with at.dispatch_scope(attempt=1, attributes={"rl.prompt": "p"}):
            pass  # the next dispatch is recorded as usual
    failures = [r for r in caplog.records if "instrumentation failed" in r.getMessage()]
    assert len(failures) == (1 if telemetry else 0)
    if telemetry:
        (dispatch,) = captured.spans
        assert attrs(dispatch) == {"rl.prompt": "p", "rl.rollout.attempt": 1}
    else:
        assert captured.spans == []


@pytest.mark.parametrize("spec", ["", "per_step"], ids=["off", "per_prompt_off"])
def test_dispatch_scope_does_not_read_its_attributes_when_not_recorded(spec: str) -> None:
    """With telemetry or per_prompt off, the caller's attributes are not even looked at."""
    _ReadCounter.reads = 0
    with capture_spans(spec) as captured:
        with at.dispatch_scope(attempt=0, attributes=_ReadCounter(a=1)):
            pass
    assert _ReadCounter.reads == 0
    assert captured.spans == []
    with capture_spans("all") as captured, at.dispatch_scope(attributes=_ReadCounter(a=1)):
        pass
    assert _ReadCounter.reads > 0  # the same mapping is read when the umbrella records
    assert attrs(captured.spans[0])["a"] == 1


def test_dispatch_scope_made_before_telemetry_records_when_entered() -> None:
    """The gate is read at entry: a scope built while telemetry was off records once it is on."""
    dispatch = at.dispatch_scope(attempt=1, target_step=4)
    with capture_spans("all") as captured, dispatch as span:
        assert span.is_recording()
    assert [attrs(s) for s in captured.spans] == [{"rl.rollout.attempt": 1, "rl.target_step": 4}]
    with capture_spans("per_step") as captured, dispatch as span:  # and per_prompt off, later
        assert not span.is_recording()
    assert captured.spans == []


@pytest.mark.anyio
async def test_dispatch_scope_can_be_entered_again_after_it_exits(spans: CapturedSpans) -> None:
    """One dispatch_scope object, entered three times in turn, gives three umbrellas."""
    dispatch = at.dispatch_scope(attempt=2)
    ids = []
    for _ in range(3):
        async with dispatch as span:
            assert at.in_per_prompt_scope()
            assert span.is_recording()
            ids.append(span.get_span_context().span_id)
        assert not at.in_per_prompt_scope()
    recorded = spans.by_name("rl.rollout.dispatch")
    assert [s.context.span_id for s in recorded] == ids
    assert len(set(ids)) == 3
    assert all(attrs(s) == {"rl.rollout.attempt": 2} for s in recorded)


def test_dispatch_scope_still_refuses_a_nested_entry(spans: CapturedSpans) -> None:
    """Entering it while it is active raises; the active entry is not disturbed."""
    dispatch = at.dispatch_scope()
    with dispatch as span:
        with pytest.raises(RuntimeError, match="already entered"):
            dispatch.__enter__()
        assert span.is_recording()
        assert at.in_per_prompt_scope()
    assert not at.in_per_prompt_scope()
    assert len(spans.by_name("rl.rollout.dispatch")) == 1


@pytest.mark.parametrize("bad", [-1, "1", True, 2**63, 2**70])
def test_dispatch_scope_rejects_bad_attempts(bad: object) -> None:
    """attempt must be an int from 0 to 2**63 - 1 (what a span attribute holds)."""
    with pytest.raises(ConfigurationError, match=r"dispatch_scope\(attempt\)"):
        at.dispatch_scope(attempt=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, 2**70, "3"])
def test_dispatch_scope_rejects_target_steps_out_of_range(bad: object) -> None:
    """target_step must be an int a 64-bit attribute holds: a plain int is range-checked too."""
    with pytest.raises(ConfigurationError, match=r"dispatch_scope\(target_step\)"):
        at.dispatch_scope(target_step=bad)  # type: ignore[arg-type]


def test_dispatch_scope_accepts_the_ends_of_the_range(spans: CapturedSpans) -> None:
    """The largest attempt and the extreme target steps are kept as they are."""
    with at.dispatch_scope(attempt=2**63 - 1, target_step=-(2**63)):
        pass
    with at.dispatch_scope(target_step=2**63 - 1):
        pass
    first, second = spans.by_name("rl.rollout.dispatch")
    assert attrs(first) == {"rl.rollout.attempt": 2**63 - 1, "rl.target_step": -(2**63)}
    assert attrs(second)["rl.target_step"] == 2**63 - 1


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


@pytest.mark.parametrize("bad", [0, -0.5, float("nan"), float("inf")])
def test_wait_until_rejects_bad_intervals(bad: float) -> None:
    """interval_s must be finite and > 0: NaN (a busy wait) and infinity (no second poll) too."""

    async def main() -> None:
        await at.wait_until(lambda: False, interval_s=bad, timeout_s=1.0)

    expected = r"wait_until\(interval_s\).*expected a finite number of seconds > 0"
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


@pytest.mark.parametrize("preset", [None, "default", "per_step", "all"])
def test_wait_until_returns_the_same_count_whatever_is_recorded(preset: str | None) -> None:
    """The count of starved polls is the loop's own: telemetry on or off does not change it."""
    asked = 0

    def ready() -> bool:
        nonlocal asked
        asked += 1
        return asked > 5  # five starved polls, then ready

    async def main() -> int:
        return await at.wait_until(ready, interval_s=0.001)

    if preset is None:
        polls = asyncio.run(main())
    else:
        with capture_spans(preset):
            polls = asyncio.run(main())
    assert polls == 5


@pytest.mark.anyio
async def test_wait_until_with_an_infinite_timeout_waits_until_ready() -> None:
    """timeout_s=inf means no timeout."""
    asked = 0

    def ready() -> bool:
        nonlocal asked
        asked += 1
        return asked > 2

    assert await at.wait_until(ready, interval_s=0.001, timeout_s=float("inf")) == 2


def test_wait_until_times_out_on_the_backend_clock() -> None:
    """One deadline on trio's MockClock covers a slow first check and the wait after it."""
    trio = pytest.importorskip("trio")
    mock_clock = pytest.importorskip("trio.testing").MockClock

    async def main() -> float:
        calls = 0

        async def ready() -> bool:
            nonlocal calls
            calls += 1
            if calls == 1:
                await trio.sleep(8)  # 8 of the 10 s go to the first check
            return False

        started = trio.current_time()
        with pytest.raises(TimeoutError):
            await at.wait_until(ready, interval_s=0.5, timeout_s=10)
        return float(trio.current_time() - started)

    elapsed = trio.run(main, clock=mock_clock(autojump_threshold=0))
    assert elapsed == pytest.approx(10, abs=1e-6)
