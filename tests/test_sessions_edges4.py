"""Session records at their bounds: huge reasons and names, lines the readers would refuse,
phase timers outside any session, decorated generators."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import asynctrace as at
from asynctrace._errors import ConfigurationError
from asynctrace._jsonl import MAX_LINE_BYTES
from asynctrace.cli._read_stats import ReadStats
from asynctrace.cli._records import iter_records


def _configure(tmp_path: Path) -> Any:
    return at.configure(
        {"enabled": False, "output_dir": str(tmp_path), "session_tracer": {"enabled": True}}
    )


def _read_back(tmp_path: Path) -> tuple[list[dict[str, Any]], ReadStats]:
    """The session records as the ``asynctrace`` commands read them."""
    stats = ReadStats()
    found = [obj for _, obj, _ in iter_records([tmp_path / "sessions-r0.jsonl"], stats)]
    return found, stats


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "asynctrace" and r.levelno == logging.WARNING and text in r.getMessage()
    ]


# -- reason, task id and counter names are bounded as a payload's string is ---------------

_BODY = "lorem ipsum dolor sit amet " * 40_000  # about 1 MB: an error page quoted whole


def test_huge_reason_task_id_and_counter_name_are_bounded(tmp_path: Path) -> None:
    telemetry = _configure(tmp_path)

    async def raises() -> None:
        with at.task_scope(1), at.session_scope():
            raise RuntimeError(f"GET http://h/?token=abc said: {_BODY}")

    async def main() -> None:
        with pytest.raises(RuntimeError):
            await raises()
        with at.task_scope(2), at.session_scope():
            at.trace_session_event("finalized", status="rejected", reason=f"password=pw {_BODY}")
        with at.task_scope("T" * (1 << 20)), at.session_scope():
            at.increment_counter("n" * (1 << 20))
            at.trace_session_event("finalized", status="accepted")

    asyncio.run(main())
    assert telemetry.sessions.flush(10.0)
    stats = telemetry.sessions.stats()
    telemetry.shutdown()
    found, read = _read_back(tmp_path)
    assert read.malformed == 0
    by_task = {str(r["task_id"])[:1]: r for r in found}
    escaped, given, named = by_task["1"], by_task["2"], by_task["T"]
    for reason in (escaped["reason"], given["reason"]):
        assert len(reason) <= 65_536 + 40
        assert reason.endswith(" chars>")
        assert "abc" not in reason[:100]
        assert "password=pw" not in reason
    assert escaped["reason"].startswith("RuntimeError: GET http://h/?token=REDACTED said: lorem")
    assert len(named["task_id"]) <= 65_536 + 40
    assert named["task_id"].endswith(" chars>")
    [name] = named["counters"]
    assert len(name) <= 65_536 + 40
    assert named["counters"][name] == 1
    assert stats["truncated_payloads"] == 4  # two reasons, a task id, a counter name


# -- no line longer than the readers read ------------------------------------------------


def test_record_over_the_line_limit_loses_its_largest_payloads(tmp_path: Path) -> None:
    telemetry = _configure(tmp_path)
    big = {f"k{i}": "x" * 60_000 for i in range(17)}  # about 1 MiB: within a payload's bound
    small = {"tool": "search"}
    with at.task_scope(1), at.session_scope():
        timer = at.trace_session_phase("toolcall", end_payload=big)  # copied once
        for _ in range(70):  # 70 MiB of payloads in all: one record past 64 MiB
            with timer:
                pass
        with at.trace_session_phase("toolcall", end_payload=small):
            pass
        at.trace_session_event("finalized", status="accepted")
    with at.task_scope(2), at.session_scope():
        at.trace_session_event("finalized", status="accepted")
    assert telemetry.sessions.flush(30.0)
    stats = telemetry.sessions.stats()
    telemetry.shutdown()
    with (tmp_path / "sessions-r0.jsonl").open("rb") as lines:
        sizes = [len(line) - 1 for line in lines]
    assert len(sizes) == 2
    assert max(sizes) <= MAX_LINE_BYTES
    found, read = _read_back(tmp_path)
    assert read.malformed == 0
    assert len(found) == 2
    executions = found[0]["phases"]["toolcall"]
    cut = [e for e in executions if set(e["payload"]) == {"<truncated>"}]
    assert 1 <= len(cut) < 70  # only as many as it takes, largest first
    assert "left out to keep the record within" in cut[0]["payload"]["<truncated>"]
    assert executions[-1]["payload"] == small
    assert stats["written"] == 2
    assert stats["failed"] == 0
    assert stats["truncated_payloads"] == len(cut)


def test_record_too_long_without_payloads_is_failed_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    telemetry = _configure(tmp_path)
    filler = "x" * 64_990
    with at.task_scope(1), at.session_scope():
        for i in range(1_100):  # 1,100 counters of 65,000-character names: about 70 MB
            at.increment_counter(f"c{i:05d}{filler}")
        at.trace_session_event("finalized", status="accepted")
    with at.task_scope(2), at.session_scope():
        at.trace_session_event("finalized", status="accepted")
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        assert not telemetry.sessions.flush(30.0)  # a record was lost: said once
        stats = telemetry.sessions.stats()
    telemetry.shutdown()
    assert stats["written"] == 1
    assert stats["failed"] == 1
    found, read = _read_back(tmp_path)
    assert read.malformed == 0
    assert [r["task_id"] for r in found] == [2]
    assert len(_warnings(caplog, "longer than the 67108864 bytes")) == 1


# -- a phase timer outside any session ------------------------------------------------------


def test_phase_timer_outside_any_session_counts_a_dropped_event(tmp_path: Path) -> None:
    telemetry = _configure(tmp_path)

    @at.trace_session("reward")
    def compute_reward(response: str) -> float:
        return 1.0

    def timed_block() -> None:
        with at.trace_session_phase("generate"):
            pass

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with at.task_scope(1), at.session_scope():
            # run_in_executor copies no context: the session does not reach the thread
            assert await loop.run_in_executor(None, compute_reward, "response") == 1.0
            await loop.run_in_executor(None, timed_block)
            async with at.atrace_session_phase("generate"):  # in the session: recorded
                pass
            at.trace_session_event("finalized", status="accepted")

    asyncio.run(main())
    assert telemetry.sessions.flush(10.0)
    stats = telemetry.sessions.stats()
    telemetry.shutdown()
    assert stats["dropped_events"] == 2  # one per phase timer entered outside
    [record] = _read_back(tmp_path)[0]
    assert sorted(record["phases"]) == ["generate"]


def test_phase_timer_outside_any_session_without_tracer_does_nothing() -> None:
    with at.trace_session_phase("generate"):
        pass  # no tracer: nothing to count, nothing raised


# -- decorated generators -----------------------------------------------------------------


def test_decorators_refuse_generator_functions() -> None:
    async def stream_tokens(n: int) -> AsyncIterator[int]:
        for i in range(n):
            await asyncio.sleep(0)
            yield i

    def numbers(n: int) -> Iterator[int]:
        yield from range(n)

    for fn in (stream_tokens, numbers):
        with pytest.raises(ConfigurationError, match=r"trace_session\('generate'\): .*"):
            at.trace_session("generate")(fn)
        with pytest.raises(ConfigurationError, match=r"session_context\(\): .*") as raised:
            at.session_context()(fn)
        message = str(raised.value)
        assert fn.__name__ in message
        assert "coroutine function" in message

    @at.trace_session("generate")
    async def generate() -> int:  # still accepted
        return 1

    assert asyncio.run(generate()) == 1
