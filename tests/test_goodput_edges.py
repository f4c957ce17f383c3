"""Live goodput at its edges: stats from any thread, forgotten parents, violations
logged, the metrics interval, and the callbacks' shutdown."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

import asynctrace as at
from asynctrace import ConfigurationError
from asynctrace._goodput import Dispatcher, release_for_shutdown
from asynctrace._goodput_settings import GoodputSettings
from asynctrace._rollup import Rollup
from asynctrace._step_goodput import StepGoodput
from asynctrace.export._goodput_sink import GoodputSink

MS = 1_000_000


@pytest.fixture(autouse=True)
def _no_callbacks() -> Any:
    """Each test registers its own callbacks and leaves none behind."""
    yield
    for fn in at._goodput.callbacks():
        at.remove_step_goodput(fn)


def _configure(tmp_path: Path, **goodput: Any) -> at.Telemetry:
    return at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "goodput": {"metrics": "none", **goodput},
            "schedule_delay_millis": 20,
        }
    )


def test_stats_read_from_another_thread_while_remote_waits_change() -> None:
    """GoodputSink.stats (any thread) while the export thread adds and settles remote
    waits: never an error; awaited_parents is two counts read without a lock, so a read
    may catch waits being noted or settled, and counts no remote one once the thread is
    done."""
    sink = GoodputSink(GoodputSettings(metrics="none", grace_s=0.0001), path=None)
    rollup = sink.rollup
    stop = threading.Event()

    def export_thread() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            rollup.add_span("rpc", 7, 2 * i + 1, 2 * i, i * 10.0, i * 10.0 + 5, {}, "x", 0, True)

    feeder = threading.Thread(target=export_thread, daemon=True)
    feeder.start()
    errors: list[BaseException] = []
    reads = 0
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            try:
                assert sink.stats().awaited_parents >= 0
                reads += 1
            except BaseException as exc:  # what a reader of the stats would see
                errors.append(exc)
    finally:
        stop.set()
        feeder.join(5)
    assert reads > 0
    assert errors == []
    assert sink.stats().awaited_parents == 0
    sink.shutdown()


def test_awaited_leaves_out_remote_parents_exactly() -> None:
    """Local and remote waits, settled, taken and evicted: the count is exact."""
    rollup = Rollup(grace_us=100.0, max_pending=6)

    def brute() -> int:
        pending = rollup._pending
        return len(pending) - sum(1 for _, key in rollup._remote if key in pending)

    spans = [
        ("a", 1, 100, 0, 10, True),  # a remote parent 100
        ("b", 2, 100, 0, 11, True),  # the same remote parent
        ("c", 3, 200, 0, 12, False),  # a local parent 200
        ("p", 100, 0, 0, 20, False),  # the remote parent arrives after all
        ("d", 4, 100, 0, 21, True),  # ...a child after it: its parent is known
        ("e", 5, 300, 0, 22, True),
        ("f", 6, 400, 0, 23, False),
        ("g", 7, 500, 0, 500, True),  # past the grace of 300's wait: settled
    ]
    for name, sid, parent, start, end, remote in spans:
        rollup.add_span(
            name, 1, sid, parent, start, end, {"rl.bucket": "overhead"}, "x", 0, remote
        )
        assert rollup.awaited() == brute()
    for k in range(20):  # evictions past max_pending
        rollup.add_span(
            "h", 1, 1000 + k, 2000 + k, 0, 600, {"rl.bucket": "idle"}, "x", 0, k % 2 == 0
        )
        assert rollup.awaited() == brute()
    assert rollup.evicted > 0
    rollup.finish()
    assert rollup.awaited() == 0


def _finalize_run(tmp_path: Path) -> list[dict[str, Any]]:
    telemetry = _configure(tmp_path, window=50)
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("test")
    ctx = trace.set_span_in_context
    t0 = time.time_ns()
    job = tracer.start_span("rl.job", start_time=t0, attributes={"asynctrace.group": "job"})
    step1 = tracer.start_span(
        "rl.step",
        context=ctx(job),
        start_time=t0,
        attributes={"rl.iteration": 1, "asynctrace.group": "step"},
    )
    staging = tracer.start_span(
        "rl.checkpointing",
        context=ctx(step1),
        start_time=t0 + 400 * MS,
        attributes={"rl.bucket": "overhead", "rl.iteration": 1},
    )
    finalize = tracer.start_span(
        "rl.checkpoint.finalize",
        context=ctx(staging),
        start_time=t0 + 450 * MS,
        attributes={"rl.iteration": 1},
    )
    staging.end(t0 + 500 * MS)
    step1.end(t0 + 500 * MS)
    step2 = tracer.start_span(
        "rl.step",
        context=ctx(job),
        start_time=t0 + 550 * MS,
        attributes={"rl.iteration": 2, "asynctrace.group": "step"},
    )
    for k in range(100):  # more than the window of spans end before the finalize span
        tracer.start_span(
            "rl.gen",
            context=ctx(step2),
            start_time=t0 + 600 * MS + k * 1000,
            attributes={"rl.bucket": "productive"},
        ).end(t0 + 600 * MS + k * 1000 + 500)
    finalize.end(t0 + 1300 * MS)
    step2.end(t0 + 1550 * MS)
    job.end(t0 + 3000 * MS)
    assert telemetry.shutdown()
    (path,) = tmp_path.glob("goodput-*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_detached_finalize_span_is_no_step_past_the_window(tmp_path: Path) -> None:
    """goodput.window 50: the finalize span's staging parent is forgotten; no step line."""
    lines = _finalize_run(tmp_path)
    steps = [(x["name"], x["iteration"]) for x in lines if x["kind"] == "step"]
    assert steps == [("rl.step", 1), ("rl.step", 2)]


def test_violations_are_logged_once_per_kind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two unknown buckets: one warning naming the first, both counted."""
    telemetry = _configure(tmp_path, grace_s=0)
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("test")
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        with at.umbrella_span("step", "rl.step"):
            for name in ("odd-1", "odd-2"):
                tracer.start_span(name, attributes={"rl.bucket": "bogus"}).end()
        assert telemetry.flush()
        stats = telemetry.goodput
        assert telemetry.shutdown()
    logged = [r.getMessage() for r in caplog.records if "[unknown-bucket]" in r.getMessage()]
    assert len(logged) == 1
    assert "'odd-1'" in logged[0]
    assert "'bogus'" in logged[0]
    end = [json.loads(x) for x in next(tmp_path.glob("goodput-*.jsonl")).read_text().splitlines()]
    assert end[-1]["goodput"]["violations"] == 2
    assert stats is not None


@pytest.mark.parametrize("value", [1e-9, 0.0, 0.05, "0.01"])
def test_export_interval_has_a_lower_bound(value: Any) -> None:
    """A metric reader exporting continuously is refused, naming the key and the range."""
    with pytest.raises(ConfigurationError) as info:
        GoodputSettings.parse("goodput", {"export_interval_s": value})
    message = str(info.value)
    assert message.startswith("goodput.export_interval_s: ")
    assert repr(value) in message or str(value) in message
    assert "at least 0.1" in message


def test_export_interval_at_the_bound_is_accepted() -> None:
    settings = GoodputSettings.parse("goodput", {"export_interval_s": 0.1})
    assert isinstance(settings, GoodputSettings)
    assert settings.export_interval_s == 0.1


def test_close_on_timeout_counts_each_record_once() -> None:
    """Records still queued when close times out are dropped, not delivered later too."""
    gate = threading.Event()
    seen: list[int | None] = []

    def slow(record: StepGoodput) -> None:
        seen.append(record.iteration)
        gate.wait(10)

    at.on_step_goodput(slow)
    dispatcher = Dispatcher(16)
    for i in range(4):
        dispatcher.put(StepGoodput(name="s", iteration=i))
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.005)
    assert dispatcher.close(0.1) is False
    gate.set()
    thread = dispatcher._thread
    assert thread is not None
    thread.join(5)
    assert not thread.is_alive()
    assert (dispatcher.delivered, dispatcher.dropped) == (1, 3)
    assert seen == [0]


def test_a_shutdown_from_inside_a_callback_is_not_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A callback that shuts down (release_for_shutdown, then waiting for the close):
    close returns at once, and the records behind it are still delivered."""
    closed = threading.Event()
    seen: list[int | None] = []

    def shutting_down(record: StepGoodput) -> None:
        seen.append(record.iteration)
        if record.iteration == 0:
            assert release_for_shutdown()
            closed.wait(10)

    at.on_step_goodput(shutting_down)
    dispatcher = Dispatcher(16)
    dispatcher.put(StepGoodput(name="s", iteration=0))
    dispatcher.put(StepGoodput(name="s", iteration=1))
    deadline = time.monotonic() + 5
    while not dispatcher.released and time.monotonic() < deadline:
        time.sleep(0.005)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        assert dispatcher.close(5.0) is True
    assert time.monotonic() - began < 4.0
    closed.set()
    thread = dispatcher._thread
    assert thread is not None
    thread.join(5)
    assert seen == [0, 1]
    assert (dispatcher.delivered, dispatcher.dropped) == (2, 0)
    assert not [r for r in caplog.records if "goodput callback" in r.getMessage()]
    assert release_for_shutdown() is False  # not a callbacks thread


def test_asynctrace_shutdown_from_a_callback_does_not_wait_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The public shutdown, called inside a goodput callback, finishes without waiting
    out the callbacks' close (which would wait for the very callback running it)."""
    results: list[bool] = []
    done = threading.Event()

    def stop_here(record: StepGoodput) -> None:
        results.append(at.shutdown(10.0))
        done.set()

    at.on_step_goodput(stop_here)
    try:
        telemetry = at.configure(
            {
                "enabled": True,
                "span_groups": "all",
                "exporters": ["chrome"],
                "output_dir": str(tmp_path),
                "goodput": {"metrics": "none", "grace_s": 0},
            }
        )
        with caplog.at_level(logging.WARNING, logger="asynctrace"):
            with at.iteration_scope(1), at.umbrella_span("step", "rl.step"):
                with at.managed_span("generation", "gen"):
                    pass
            with at.managed_span("generation", "tick"):  # a later span: step 1 is final
                pass
            telemetry.flush(5.0)
            assert done.wait(10)
        assert results == [True]
        assert not [r for r in caplog.records if "goodput callback" in r.getMessage()]
    finally:
        at.remove_step_goodput(stop_here)
        at.shutdown(5.0)
