"""configure/flush/shutdown: validation before mutation, exit paths, exporter faults."""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import logging
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _forks import fork_under_load
from _tmpfs import mounted_tmpfs
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExportResult

import asynctrace
from asynctrace import ConfigurationError, managed_span, umbrella_span
from asynctrace._running import current_telemetry, flush, shutdown
from asynctrace._runtime import configure, init_driver, init_worker
from asynctrace._state import GATE, snapshot
from asynctrace.export import read_chrome_trace

HERE = Path(__file__).parent
CHILD = HERE / "_telemetry_child.py"


@pytest.fixture(autouse=True)
def _no_telemetry_left_running() -> Iterator[None]:
    """Every test ends with no running Telemetry (threads, atexit hooks)."""
    yield
    shutdown(timeout_s=2.0)


def memory_config(**extra: Any) -> dict[str, Any]:
    return {"enabled": True, "span_groups": "all", "exporters": ["memory"], **extra}


def _atexit_count() -> int:
    return atexit._ncallbacks()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------
# Disabled and bad configurations install nothing.


def test_disabled_configure_starts_nothing(tmp_path: Path) -> None:
    """enabled=False: no thread, no file, no atexit hook, gate untouched."""
    threads = set(threading.enumerate())
    hooks = _atexit_count()
    before = snapshot()
    telemetry = configure({"enabled": False, "exporters": ["chrome"], "output_dir": str(tmp_path)})
    assert set(threading.enumerate()) == threads
    assert list(tmp_path.iterdir()) == []
    assert _atexit_count() == hooks
    assert snapshot() == before
    assert not telemetry.enabled
    assert telemetry.flush(0.1)
    assert telemetry.shutdown()
    assert telemetry.memory_exporter is None
    assert telemetry.trace_file is None


def test_enabled_after_disabled_works(tmp_path: Path) -> None:
    """A disabled configure leaves nothing behind that blocks a later enabled one."""
    configure({"enabled": False})
    telemetry = configure(memory_config())
    with managed_span("reward", "after"):
        pass
    assert telemetry.memory_exporter is not None
    assert [s.name for s in telemetry.memory_exporter.get_finished_spans()] == ["after"]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"exporters": ["chrome", "zipkin"]}, "exporters"),
        ({"span_groups": "default,!job"}, "span_groups"),
        ({"max_queue_size": -5}, "max_queue_size"),
        ({"schedule_delay_millis": -1}, "schedule_delay_millis"),
        ({"sesion_tracer": {}}, "telemetry"),
        ({"output_dir": "<file>/sub"}, "output_dir"),
    ],
)
def test_bad_config_changes_nothing(tmp_path: Path, config: dict[str, Any], key: str) -> None:
    """A bad value raises ConfigurationError naming the key; provider, gate and the running
    telemetry are untouched."""
    running = configure(memory_config())
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    if "output_dir" in config:
        config = {"output_dir": str(blocker / "sub"), "exporters": ["chrome"]}
    global_provider = trace.get_tracer_provider()
    gate = snapshot()
    threads = set(threading.enumerate())
    with pytest.raises(ConfigurationError) as info:
        configure({"enabled": True, **config})
    assert str(info.value).startswith(key)
    assert trace.get_tracer_provider() is global_provider
    assert snapshot() == gate
    assert set(threading.enumerate()) == threads
    assert current_telemetry() is running
    assert running.enabled


def test_unwritable_output_dir_names_the_path(tmp_path: Path) -> None:
    """The error says which directory and why."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(
        ConfigurationError, match=r"^output_dir: '.*file/traces' is not a writable"
    ):
        configure({"enabled": True, "output_dir": str(blocker / "traces")})


def test_missing_otlp_extra_is_reported_before_anything_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the otlp extra: MissingExtraError naming it, and nothing is installed."""
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    gate = snapshot()
    with pytest.raises(asynctrace.MissingExtraError, match=r"asynctrace\[otlp\]"):
        configure({"enabled": True, "exporters": ["otlp", "memory"]})
    assert snapshot() == gate
    assert current_telemetry() is None


def test_config_object_is_never_mutated(tmp_path: Path) -> None:
    """The run id is generated on a copy."""
    config = asynctrace._config.TelemetryConfig(
        enabled=True, exporters=["chrome"], output_dir=str(tmp_path / "{run_id}")
    )
    telemetry = configure(config)
    assert config.run_id == ""
    assert telemetry.run_id
    assert telemetry.trace_file == tmp_path / telemetry.run_id / "traces-r0.jsonl"


# ---------------------------------------------------------------------------
# The running pipeline.


def test_resource_and_spans_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans carry the resource: service, run id, rank, world size, local rank, role, host, pid."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    telemetry = configure(
        memory_config(service_name="svc", run_id="r1", resource_attributes={"team": "rl"}),
        rank=3,
        world_size=4,
        role="rollout",
    )
    with umbrella_span("step", "step"), managed_span("reward", "score"):
        pass
    assert telemetry.memory_exporter is not None
    spans = telemetry.memory_exporter.get_finished_spans()
    assert [s.name for s in spans] == ["score", "step"]
    attrs = dict(spans[0].resource.attributes)
    for key, value in {
        "service.name": "svc",
        "asynctrace.run_id": "r1",
        "asynctrace.rank": 3,
        "asynctrace.world_size": 4,
        "asynctrace.local_rank": 1,
        "asynctrace.role": "rollout",
        "process.pid": os.getpid(),
        "team": "rl",
    }.items():
        assert attrs[key] == value
    assert attrs["host.name"]


def test_open_spans_are_truncated_at_shutdown() -> None:
    """Spans open at shutdown() end with asynctrace.truncated=true; shutdown is idempotent."""
    telemetry = configure(memory_config())
    tracer = asynctrace.get_tracer()
    outer = tracer.start_span("still-open")  # started, never ended (and never made current)
    tracer.start_span("inner-open", context=trace.set_span_in_context(outer))
    with managed_span("reward", "closed"):
        pass
    assert telemetry.shutdown() is True
    assert telemetry.shutdown() is True
    assert not telemetry.enabled
    assert current_telemetry() is None
    assert telemetry.memory_exporter is not None
    spans = {s.name: s for s in telemetry.memory_exporter.get_finished_spans()}
    assert spans["still-open"].attributes["asynctrace.truncated"] is True
    assert spans["inner-open"].attributes["asynctrace.truncated"] is True
    assert "asynctrace.truncated" not in spans["closed"].attributes
    names = [s.name for s in telemetry.memory_exporter.get_finished_spans()]
    assert names.index("inner-open") < names.index("still-open")  # children first
    assert not GATE.enabled


def test_reconfigure_shuts_the_previous_telemetry_down(tmp_path: Path) -> None:
    """A second configure ends the first (its open spans truncated) before starting."""
    first = configure(memory_config())
    asynctrace.get_tracer().start_span("open")
    second = configure(memory_config())
    assert not first.enabled
    assert second.enabled
    assert current_telemetry() is second
    assert first.memory_exporter is not None
    assert second.memory_exporter is not None
    assert [s.name for s in first.memory_exporter.get_finished_spans()] == ["open"]
    with managed_span("reward", "new"):
        pass
    assert [s.name for s in second.memory_exporter.get_finished_spans()] == ["new"]


def test_flush_and_shutdown_module_functions_without_telemetry() -> None:
    """With nothing configured, flush() and shutdown() succeed at once."""
    assert current_telemetry() is None
    assert flush(0.1) is True
    assert shutdown() is True


def test_init_driver_shares_the_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """init_driver exports ASYNCTRACE_RUN_ID; init_worker picks it up with RANK/WORLD_SIZE."""
    monkeypatch.delenv("ASYNCTRACE_RUN_ID", raising=False)
    driver = init_driver(memory_config())
    assert driver.settings.role == "driver"
    assert os.environ["ASYNCTRACE_RUN_ID"] == driver.run_id
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    worker = init_worker(memory_config())
    assert (worker.run_id, worker.settings.rank, worker.settings.world_size) == (
        driver.run_id,
        2,
        3,
    )
    assert worker.settings.role == "worker"


def test_configure_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure() with no argument reads ASYNCTRACE_* variables."""
    monkeypatch.setenv("ASYNCTRACE_ENABLED", "1")
    monkeypatch.setenv("ASYNCTRACE_EXPORTERS", "memory")
    monkeypatch.setenv("ASYNCTRACE_SPAN_GROUPS", "reward")
    telemetry = configure()
    assert telemetry.enabled
    assert asynctrace.is_span_group_enabled("reward")
    assert not asynctrace.is_span_group_enabled("job")


# ---------------------------------------------------------------------------
# OpenTelemetry's global provider, in a fresh process (it can be set once).

_GLOBAL_SCRIPT = """
import json
from opentelemetry import trace
from asynctrace._runtime import configure

third_party = trace.get_tracer("thirdparty")
first = configure({"enabled": True, "exporters": ["memory"]})
third_party.start_span("one").end()
second = configure({"enabled": True, "exporters": ["memory"]})
third_party.start_span("two").end()
with third_party.start_as_current_span("three"):
    pass
second.shutdown()
third_party.start_span("after-shutdown").end()
names = lambda t: [s.name for s in t.memory_exporter.get_finished_spans()]
print(json.dumps({"first": names(first), "second": names(second),
                  "owns": [first.owns_global_provider, second.owns_global_provider]}))
"""

_DECORATOR_SCRIPT = """
import asyncio, json
from opentelemetry import trace
from asynctrace._runtime import configure

first = configure({"enabled": True, "exporters": ["memory"]})
tracer = trace.get_tracer("thirdparty")  # made under the first configuration

@tracer.start_as_current_span("sync")
def work():
    return trace.get_current_span().get_span_context().is_valid

@tracer.start_as_current_span("async")
async def awork():
    await asyncio.sleep(0)
    return trace.get_current_span().get_span_context().is_valid

calls = [work(), asyncio.run(awork())]
second = configure({"enabled": True, "exporters": ["memory"]})
calls += [work(), asyncio.run(awork())]
second.shutdown()
calls += [work(), asyncio.run(awork())]
names = lambda t: sorted(s.name for s in t.memory_exporter.get_finished_spans())
print(json.dumps({"first": names(first), "second": names(second), "calls": calls}))
"""

_GLOBAL_SHUTDOWN_SCRIPT = """
import json
from opentelemetry import trace
import asynctrace
from asynctrace._runtime import configure

first = configure({"enabled": True, "exporters": ["memory"], "span_groups": "all"})
with asynctrace.managed_span("generation", "before"):
    pass
trace.get_tracer_provider().shutdown()  # a program's exit hook
after = [asynctrace.is_span_group_enabled("generation"), trace.get_tracer_provider().force_flush()]
second = configure({"enabled": True, "exporters": ["memory"], "span_groups": "all"})
with asynctrace.managed_span("generation", "again"):
    pass
names = lambda t: [s.name for s in t.memory_exporter.get_finished_spans()]
print(json.dumps({"first": names(first), "after": after, "second": names(second),
                  "first_shut": first.shutdown(),
                  "flush": trace.get_tracer_provider().force_flush()}))
"""

_PROGRAM_PROVIDER_SCRIPT = """
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from asynctrace._runtime import configure

class Watched(SimpleSpanProcessor):
    ended = False
    def shutdown(self):
        Watched.ended = True
        super().shutdown()

mine = TracerProvider()
mine.add_span_processor(Watched(InMemorySpanExporter()))
telemetry = configure({"enabled": True, "exporters": [], "provider": mine})
trace.get_tracer_provider().shutdown()  # the program's exit hook: its provider ends too
print(json.dumps({"owns": telemetry.owns_global_provider, "ended": Watched.ended,
                  "enabled": telemetry.enabled}))
"""

_OWN_GLOBAL_SCRIPT = """
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from asynctrace._runtime import configure

mine = TracerProvider()
trace.set_tracer_provider(mine)
telemetry = configure({"enabled": True, "exporters": ["memory"]})
print(json.dumps({"kept": trace.get_tracer_provider() is mine,
                  "owns": telemetry.owns_global_provider}))
"""


def _run_python(script: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_global_provider_follows_reconfiguration() -> None:
    """Third-party tracers join the current pipeline, follow reconfiguration, stop at shutdown."""
    result = _run_python(_GLOBAL_SCRIPT)
    assert result == {"first": ["one"], "second": ["two", "three"], "owns": [True, True]}


def test_a_global_tracers_decorator_follows_reconfiguration() -> None:
    """``@tracer.start_as_current_span`` made under one configuration records into the
    configuration of each call: the next one after a reconfigure, none after shutdown."""
    result = _run_python(_DECORATOR_SCRIPT)
    assert result == {
        "first": ["async", "sync"],
        "second": ["async", "sync"],
        "calls": [True, True, True, True, False, False],
    }


def test_shutting_the_global_provider_down_shuts_telemetry_down() -> None:
    """``trace.get_tracer_provider().shutdown()`` (a program's exit hook) ends asynctrace's
    telemetry as ``Telemetry.shutdown()`` does: spans flushed, groups off; the global's
    ``force_flush`` works with telemetry off, and a later ``configure`` records again."""
    result = _run_python(_GLOBAL_SHUTDOWN_SCRIPT)
    assert result == {
        "first": ["before"],
        "after": [False, True],
        "second": ["again"],
        "first_shut": True,
        "flush": True,
    }


def test_shutting_the_global_provider_down_ends_the_programs_own_provider() -> None:
    """With the program's SDK provider given to ``configure`` (and the global claimed),
    the global's ``shutdown()`` ends that provider too, as it did before asynctrace."""
    assert _run_python(_PROGRAM_PROVIDER_SCRIPT) == {"owns": True, "ended": True, "enabled": False}


def test_an_application_global_provider_is_left_alone() -> None:
    """If the application set its own global provider, asynctrace does not replace it."""
    assert _run_python(_OWN_GLOBAL_SCRIPT) == {"kept": True, "owns": False}


# ---------------------------------------------------------------------------
# Exporter faults never reach the program.


class RaisingExporter:
    """Raises on every export."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise RuntimeError("collector exploded")

    def shutdown(self) -> None:
        raise RuntimeError("and again")


class BlockingExporter:
    """Blocks each export for 10 s (or until released)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10.0)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.wait(10.0)


class SlowExporter:
    """Takes 20 ms per batch."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        time.sleep(0.02)
        self.count += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _preemptions() -> int:
    """Involuntary context switches of this process so far (all threads)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


async def _workload_with_probe() -> tuple[int, float]:
    """10 tasks x 100 spans; a probe task records the longest gap between its turns.

    Gaps during which the OS preempted any thread of this process (another
    process took the CPU) are not attributable to telemetry and are left out;
    everything the process does itself counts, including waits for the GIL
    held by an exporter thread.
    """
    stop = asyncio.Event()
    worst = 0.0

    async def probe() -> None:
        nonlocal worst
        last, switches = time.perf_counter(), _preemptions()
        while not stop.is_set():
            await asyncio.sleep(0)
            now, now_switches = time.perf_counter(), _preemptions()
            if now_switches == switches:
                worst = max(worst, now - last)
            last, switches = time.perf_counter(), now_switches

    async def worker(i: int) -> int:
        total = 0
        for j in range(100):
            with managed_span("generation", "gen", attributes={"i": i, "j": j}):
                total += i * j
            await asyncio.sleep(0)
        return total

    probe_task = asyncio.ensure_future(probe())
    results = await asyncio.gather(*(worker(i) for i in range(10)))
    stop.set()
    await probe_task
    return sum(results), worst


def _best_of(runs: int, setup: Any) -> tuple[int, float]:
    """Least-disturbed run: the minimum over *runs* of the per-run worst loop gap.

    The garbage collector is paused during each run: its pauses are the
    interpreter's, not the exporter's, and would only add noise.
    """
    results, lags = set(), []
    for _ in range(runs):
        setup()
        gc.collect()
        gc.disable()
        try:
            result, lag = asyncio.run(_workload_with_probe())
        finally:
            gc.enable()
        results.add(result)
        lags.append(lag)
    assert len(results) == 1
    return results.pop(), min(lags)


@pytest.mark.parametrize("kind", ["raising", "blocking", "slow"])
def test_exporter_faults_never_reach_the_program(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A raising, blocked (10 s) or slow exporter changes no result, raises nothing, adds no
    loop stall over one GIL switch interval (5 ms) compared with telemetry off, and its
    drops/failures are reported.

    The export thread runs Python while it converts a batch for an SDK exporter or logs
    the first failure with its traceback; the loop waiting for the GIL then waits until
    the thread lets go of it, at most one switch interval, which is also the chaos soak's
    bound. On the 2-core VM under the suite's load these stretches took 1.1-1.3 ms. An
    exporter called on the loop's thread would stall it for 20 ms (slow) or 10 s (blocked).
    """
    exporter: Any = {
        "raising": RaisingExporter,
        "blocking": BlockingExporter,
        "slow": SlowExporter,
    }[kind]()
    baseline, base_lag = _best_of(3, lambda: configure({"enabled": False}))
    state: dict[str, Any] = {}

    def setup() -> None:
        state["telemetry"] = configure(
            {
                "enabled": True,
                "span_groups": "all",
                "exporters": [exporter],
                "max_queue_size": 64,
                "max_export_batch_size": 16,
                "schedule_delay_millis": 5,
                "shutdown_timeout_s": 0.2,
            }
        )
        if isinstance(exporter, SlowExporter):
            exporter.count = 0  # count the last run only

    caplog.set_level(logging.WARNING, logger="asynctrace")
    try:
        result, lag = _best_of(3, setup)
        assert result == baseline
        assert lag <= base_lag + sys.getswitchinterval(), (kind, lag, base_lag)
        telemetry = state["telemetry"]
        started = time.monotonic()
        flushed = telemetry.flush(0.3)
        dropped_before_shutdown = telemetry.dropped_spans
        telemetry.shutdown(timeout_s=0.5)
        assert time.monotonic() - started < 2.0  # never joined forever
        # As shutdown() left them: once released, a blocked exporter finishes the batch
        # it held, which then counts as exported, no longer as abandoned.
        stats = next(iter(telemetry.stats().values()))
    finally:
        if isinstance(exporter, BlockingExporter):
            exporter.release.set()
    # flush() is True only when nothing was lost: a raising exporter fails spans, a
    # blocking one fills the queue, a slow one may drop some.
    assert flushed is (kind == "slow" and dropped_before_shutdown == 0)
    if kind == "raising":
        assert stats.failed > 0
        assert stats.exported == 0
        assert "failed to export" in caplog.text
    elif kind == "blocking":
        assert telemetry.dropped_spans > 900
        # the batch the stuck exporter holds is in flight, not dropped: it may still go out
        in_flight = re.search(r"(\d+) spans in flight; its thread may still", caplog.text)
        assert in_flight is not None, caplog.text
        assert f"dropped {stats.dropped - int(in_flight[1])} spans" in caplog.text
    else:
        assert stats.exported + stats.dropped == 1000
        assert stats.failed == 0
        assert exporter.count == stats.exported


def test_flush_respects_its_timeout_with_a_stuck_exporter() -> None:
    """flush() returns False after its timeout instead of waiting for the exporter."""
    exporter = BlockingExporter()
    telemetry = configure(memory_config(exporters=[exporter], schedule_delay_millis=5))
    try:
        with managed_span("reward", "x"):
            pass
        time.sleep(0.05)  # the worker is now stuck in export()
        with managed_span("reward", "y"):
            pass
        started = time.monotonic()
        assert telemetry.flush(0.2) is False
        assert 0.15 < time.monotonic() - started < 1.5
        started = time.monotonic()
        assert telemetry.shutdown(timeout_s=0.2) is False
        assert time.monotonic() - started < 1.5
    finally:
        exporter.release.set()


class _RaisingProcessor(SpanProcessor):
    """An SDK span processor whose shutdown raises."""

    def shutdown(self) -> None:
        raise RuntimeError("processor shutdown failed")


def test_a_failure_inside_shutdown_still_leaves_telemetry_stopped() -> None:
    """A user's span processor that raises in ``shutdown()``, and an exporter that shuts
    telemetry down from inside ``export`` (on the export thread, which cannot wait for
    itself): ``shutdown()`` returns False instead of raising, and the handle is forgotten,
    its hooks removed, and a second call is a quick no-op."""
    from asynctrace import _errors

    strict = _errors.set_strict(False)
    try:
        telemetry = configure(memory_config(provider="sdk"))
        telemetry.provider.add_span_processor(_RaisingProcessor())  # type: ignore[union-attr]
        assert telemetry.shutdown(2.0) is False
        assert current_telemetry() is None
        assert not telemetry._atexit_registered  # its exit hook is gone
        assert telemetry.shutdown(2.0) is False

        results: list[bool] = []

        class ShutsDown:
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                results.append(asynctrace.shutdown(2.0))
                return SpanExportResult.SUCCESS

            def shutdown(self) -> None:
                pass

        telemetry = configure(memory_config(exporters=[ShutsDown()], schedule_delay_millis=5))
        with managed_span("reward", "x"):
            pass
        deadline = time.monotonic() + 10
        while not results and time.monotonic() < deadline:
            time.sleep(0.01)
        assert results == [False]
        assert current_telemetry() is None
        started = time.monotonic()
        assert telemetry.shutdown(2.0) is False
        assert time.monotonic() - started < 1.0
    finally:
        _errors.set_strict(strict)


def test_configure_does_not_wait_out_a_shutdown_running_on_another_thread() -> None:
    """A shutdown in progress on another thread (SIGTERM's helper, an exit hook) and a
    configure() meanwhile: configure waits for that shutdown to end, not for its timeout
    (the shutdown needed a lock configure held, to forget its handle)."""

    class SlowToStop:
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            time.sleep(0.5)

    old = configure(memory_config(exporters=[SlowToStop()], shutdown_timeout_s=20))
    stopper = threading.Thread(target=old.shutdown)
    stopper.start()
    time.sleep(0.1)
    started = time.monotonic()
    new = configure(memory_config())
    try:
        took = time.monotonic() - started
        assert took < 5.0, took  # the old handle's exporter needs 0.5 s; its timeout is 20
        stopper.join(10)
        assert current_telemetry() is new
    finally:
        new.shutdown()


# ---------------------------------------------------------------------------
# Process exits: every span ended before the exit/signal is in the file.


def _spawn(mode: str, out: Path, count: int = 200) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(out), str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _span_names(out: Path) -> list[str]:
    trace_file = out / "traces-r0.jsonl"
    return [e["name"] for e in read_chrome_trace(trace_file).complete_events()]


def _expect_spans(out: Path, count: int) -> list[str]:
    names = _span_names(out)
    assert sorted(n for n in names if n.startswith("span-")) == sorted(
        f"span-{i}" for i in range(count)
    )
    return names


def test_normal_exit_writes_every_span(tmp_path: Path) -> None:
    """At a normal exit, atexit flushes everything."""
    with _spawn("exit", tmp_path) as child:
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "ended"
    _expect_spans(tmp_path, 200)


def test_sigterm_flushes_then_dies_of_the_signal(tmp_path: Path) -> None:
    """handle_sigterm: spans written, the open one truncated, exit status is SIGTERM's."""
    with _spawn("sigterm", tmp_path) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGTERM
    names = _expect_spans(tmp_path, 200)
    assert "open-at-sigterm" in names
    events = read_chrome_trace(tmp_path / "traces-r0.jsonl").complete_events()
    (open_event,) = [e for e in events if e["name"] == "open-at-sigterm"]
    assert open_event["args"]["asynctrace.truncated"] is True


def test_sigterm_chains_to_the_previous_handler(tmp_path: Path) -> None:
    """A previous Python handler runs after the flush (here it exits 7)."""
    with _spawn("sigterm-chain", tmp_path) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    assert child.returncode == 7
    assert (tmp_path / "previous-handler-ran").read_text() == "yes"
    _expect_spans(tmp_path, 200)


def test_sigterm_with_ignored_previous_handler_keeps_running(tmp_path: Path) -> None:
    """If SIGTERM was ignored before, telemetry shuts down and the process carries on."""
    with _spawn("sigterm-ignored", tmp_path) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        assert child.stdout.readline().strip() == "survived"
        child.wait(timeout=30)
    assert child.returncode == 0
    _expect_spans(tmp_path, 200)


def _terminated(mode: str, out: Path) -> str:
    """Run the child in *mode*, send SIGTERM once it is ready; its stderr, once it died
    of that signal (asserted)."""
    with _spawn(mode, out) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGTERM, err
    return err


def test_sigterm_through_a_later_handler_that_calls_ours_dies_once(tmp_path: Path) -> None:
    """A handler installed after asynctrace's that calls it, the default action before:
    the flush, then the process dies of SIGTERM (handing the signal on by re-raising it
    used to reach that handler again, and again)."""
    assert "RecursionError" not in _terminated("sigterm-wrapped", tmp_path)
    _expect_spans(tmp_path, 200)


def test_a_forked_child_that_exits_leaves_the_parents_sigterm_handling_alone(
    tmp_path: Path,
) -> None:
    """A forked child's normal exit (its exit hooks run) neither tells the parent's
    SIGTERM helper to stop (the pipe is shared) nor reports the parent's counts as its
    own; the parent's SIGTERM then flushes and ends the parent as usual."""
    err = _terminated("sigterm-after-fork", tmp_path)
    assert "Bad file descriptor" not in err
    assert "dropped" not in err, err
    assert "still open at shutdown" not in err, err
    names = _expect_spans(tmp_path, 200)
    assert "in-the-child" not in names  # the child never writes the parent's file
    assert "open-at-sigterm" in names


_TWO_SIGNALS = """
import os, signal, sys, time
from asynctrace._sigterm import SigtermHandler
calls = []
signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(time.monotonic()))
handler = SigtermHandler(lambda: time.sleep(float(sys.argv[1])))
os.kill(os.getpid(), signal.SIGTERM)  # the shutdown outlasts the handler's wait: deferred
time.sleep(float(sys.argv[2]))
if float(sys.argv[2]) < float(sys.argv[1]):
    os.kill(os.getpid(), signal.SIGTERM)  # a second one from outside, while it runs
deadline = time.monotonic() + 3
while time.monotonic() < deadline and (len(calls) < 1 or time.monotonic() < deadline - 1.5):
    time.sleep(0.02)
print(len(calls))
"""


@pytest.mark.parametrize(("shutdown_s", "second_after_s"), [(0.6, 0.1), (0.6, 1.0)])
def test_a_deferred_sigterm_reaches_the_previous_handler_once(
    shutdown_s: float, second_after_s: float
) -> None:
    """A shutdown that outlasts the handler's wait: the previous handler runs once, when
    the shutdown ends, or at once when a second SIGTERM comes from outside meanwhile
    (the helper then sends nothing)."""
    result = subprocess.run(
        [sys.executable, "-c", _TWO_SIGNALS, str(shutdown_s), str(second_after_s)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


def test_flush_then_sigkill_keeps_every_ended_span(tmp_path: Path) -> None:
    """flush() returns once the spans are written: a SIGKILL after it loses none."""
    with _spawn("flush-kill", tmp_path, count=500) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "flushed True"
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    _expect_spans(tmp_path, 500)


# -- SIGTERM at any instant ------------------------------------------------------

SIGTERM_CHILD = Path(__file__).with_name("_sigterm_child.py")


def _sigterm_run(mode: str, out: Path, delay_s: float) -> float:
    """Start the child, SIGTERM it *delay_s* after ``ready``; seconds from signal to exit."""
    with subprocess.Popen(
        [sys.executable, str(SIGTERM_CHILD), mode, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        time.sleep(delay_s)
        sent = time.monotonic()
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        finally:
            child.kill()
        took = time.monotonic() - sent
        assert child.returncode == -signal.SIGTERM, child.stderr.read()
    return took


def _sigterm_within_a_second(mode: str, out: Path, delay_s: float) -> Path:
    """The output of a run whose child exited within 1 s of SIGTERM (up to three runs).

    A loaded machine (four test workers on two cores) can keep the child off the
    CPU for a while, so a run over 1 s is run again; one that waited out the
    shutdown's 5 s timeout (4.5 s or more) fails at once, whatever the others do.
    """
    took: list[float] = []
    for n in range(3):
        run = out / f"run-{n}"
        took.append(_sigterm_run(mode, run, delay_s))
        if took[-1] < 1.0:
            return run
        if took[-1] >= 4.5:
            pytest.fail(f"the child waited out the shutdown timeout: {took[-1]:.2f} s")
    raise AssertionError(f"no run exited within 1 s of SIGTERM: {took}")


def _session_records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "sessions-r0.jsonl").read_bytes().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("mode", ["session-lock", "span-lock"])
def test_sigterm_inside_a_held_lock_exits_within_a_second(tmp_path: Path, mode: str) -> None:
    """SIGTERM landing while the main thread holds a lock shutdown needs: no wait, nothing lost."""
    out = _sigterm_within_a_second(mode, tmp_path, 0.2)
    records = _session_records(out)
    accepted = [r for r in records if r["status"] == "accepted"]
    assert len(accepted) == 200
    assert len({r["session_id"] for r in records}) == len(records)  # each written once
    names = _span_names(out)
    assert sorted(n for n in names if n.startswith("span-")) == sorted(
        f"span-{i}" for i in range(200)
    )
    if mode == "session-lock":
        assert [r["status"] for r in records if r["task_id"] == 2] == ["pending"]
    else:
        events = read_chrome_trace(out / "traces-r0.jsonl").complete_events()
        (open_event,) = [e for e in events if e["name"] == "open-at-sigterm"]
        assert open_event["args"]["asynctrace.truncated"] is True


@pytest.mark.parametrize("mode", ["busy-async", "busy-sync"])
def test_sigterm_in_a_busy_program_keeps_everything_ended(tmp_path: Path, mode: str) -> None:
    """A busy loop, SIGTERM at an arbitrary instant: every ended span and session is written."""
    out = _sigterm_within_a_second(mode, tmp_path, 0.3)
    spans, sessions = map(int, (out / "progress").read_text().split())
    records = _session_records(out)
    busy = [r for r in records if r["task_id"] == 3]
    assert len({r["session_id"] for r in records}) == len(records)  # none written twice
    # Every session finalized before telemetry shut down is there as accepted, and
    # every span ended before then (the last one may be there too, or as pending).
    assert sum(r["status"] == "accepted" for r in busy) >= sessions > 0
    assert _span_names(out).count("busy") >= spans > 0


# -- a dead export thread, stats that add up ---------------------------------------


class ExitingExporter:
    """Raises SystemExit from export() while *exiting* is set (as a buggy exporter may)."""

    def __init__(self) -> None:
        self.exiting = True
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.exiting:
            raise SystemExit(3)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_an_exporter_raising_systemexit_is_counted_and_the_worker_lives(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SystemExit from export(): counted failed, flush() says False, later spans still go out."""
    exporter = ExitingExporter()
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": [exporter],
            "output_dir": str(tmp_path),
        }
    )
    caplog.set_level(logging.WARNING, logger="asynctrace")
    try:
        for i in range(100):
            with managed_span("generation", f"s{i}"):
                pass
        assert telemetry.flush(5.0) is False  # nothing was delivered
        stats = telemetry.stats()["ExitingExporter"]
        assert (stats.exported, stats.failed) == (0, 100)
        exporter.exiting = False
        for i in range(50):
            with managed_span("generation", f"t{i}"):
                pass
        assert telemetry.flush(5.0) is True
        assert exporter.exported == 50
    finally:
        assert telemetry.shutdown(5.0) is True  # the loss was reported by the first flush
    assert "raised in export" in caplog.text


def test_a_flush_that_a_processor_or_exporter_refuses_is_a_failed_flush() -> None:
    """A user's span processor, or an exporter, whose ``force_flush`` returns False (its own
    buffer was not delivered): ``flush()`` returns False, as the SDK's provider would."""
    from opentelemetry.sdk.trace.export import SpanExporter

    class Undelivered(SpanProcessor):
        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return False

    class Unflushed(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return False

    for provider in ("fast", "sdk"):
        telemetry = configure(memory_config(provider=provider))
        telemetry.provider.add_span_processor(Undelivered())  # type: ignore[union-attr]
        with managed_span("generation", "x"):
            pass
        assert telemetry.flush(5.0) is False, provider
        telemetry.shutdown(2.0)
    telemetry = configure(memory_config(exporters=[Unflushed()]))
    with managed_span("generation", "x"):
        pass
    assert telemetry.flush(5.0) is False
    assert telemetry.stats()["Unflushed"].exported == 1


def test_an_attribute_whose_str_raises_systemexit_costs_only_its_span() -> None:
    """OTLP on the fast provider encodes on its export thread, calling ``str()`` on an odd
    attribute value: one that raises SystemExit fails that span, counted; the thread lives
    and the spans around it are delivered."""
    from opentelemetry.sdk.trace.export import SpanExporter

    from asynctrace._fast import FastTracerProvider
    from asynctrace.export._otlp_wire import WireEncoder
    from asynctrace.export._retry import RetryingSpanProcessor

    class Counting(SpanExporter):
        received = 0

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            Counting.received += len(spans)
            return SpanExportResult.SUCCESS

    class Exits:
        def __str__(self) -> str:
            raise SystemExit("from __str__")

    provider = FastTracerProvider()
    exporter = Counting()
    queue = RetryingSpanProcessor(
        exporter, name="otlp", convert=WireEncoder(None, provider.limits).encode
    )
    provider.add_queue(queue)
    tracer = provider.get_tracer("t")
    from asynctrace import _errors

    strict = _errors.set_strict(False)
    try:
        for i in range(9):
            tracer.start_span(f"s{i}").end()
        tracer.start_span("odd", attributes={"v": Exits()}).end()  # type: ignore[dict-item]
        for i in range(5):
            tracer.start_span(f"later{i}").end()
        assert queue.force_flush(5000) is False  # one span was lost, and said so
        assert queue._thread.is_alive()
        stats = queue.stats()
        assert (stats.exported, stats.failed, stats.in_flight) == (14, 1, 0)
        assert Counting.received == 14
    finally:
        _errors.set_strict(strict)
        queue.shutdown_within(2.0)


def test_a_blocked_exporter_holds_spans_in_flight_and_markers_are_not_spans(
    tmp_path: Path,
) -> None:
    """The batch inside a stuck export() is counted; flush markers never count as dropped."""
    exporter = BlockingExporter()
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": [exporter],
            "output_dir": str(tmp_path),
            "max_export_batch_size": 16,
            # Only the 16th span wakes the worker (a full batch), so the stuck batch
            # holds all 16 however slowly a loaded machine ends them.
            "schedule_delay_millis": 60_000,
        }
    )
    try:
        for i in range(16):
            with managed_span("generation", f"s{i}"):
                pass
        deadline = time.monotonic() + 5
        while telemetry.stats()["BlockingExporter"].in_flight == 0:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        for i in range(10):
            with managed_span("generation", f"q{i}"):
                pass
        for _ in range(5):  # five flush markers join the queue behind the 10 spans
            assert telemetry.flush(0.01) is False
        stats = telemetry.stats()["BlockingExporter"]
        assert (stats.in_flight, stats.queued, stats.dropped) == (16, 10, 0)
        assert telemetry.shutdown(timeout_s=0.2) is False
        stats = telemetry.stats()["BlockingExporter"]
        assert stats.dropped == 26  # 16 in flight + 10 queued: spans only, no markers
        assert stats.exported + stats.failed + stats.dropped == 26
    finally:
        exporter.release.set()


def test_truncated_sdk_spans_stay_silent_when_the_program_ends_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Spans truncated at shutdown: their later end() logs nothing, the shutdown one line."""
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "output_dir": str(tmp_path),
            "provider": "sdk",
        }
    )
    caplog.set_level(logging.INFO)
    spans = [managed_span("generation", f"open-{i}") for i in range(200)]
    for span in spans:
        span.__enter__()
    telemetry.shutdown()
    for span in reversed(spans):
        span.__exit__(ValueError, ValueError("late"), None)
    lines = [r.getMessage() for r in caplog.records]
    assert not [line for line in lines if "ended span" in line]
    assert sum("200 spans were still open at shutdown" in line for line in lines) == 1


# -- fork --------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["sdk", "fast"])
def test_forked_children_never_hang_on_an_inherited_lock(tmp_path: Path, provider: str) -> None:
    """A user thread holds each lock asynctrace takes in turn; forked children run init_worker.

    Each child writes its own span and session (``nox -s soak`` forks hundreds).
    """
    found = fork_under_load(tmp_path, 12, provider)
    assert (found["hung"], found["failed"], found["written"]) == ([], [], 12)


# -- the output directory deleted under a running process ---------------------------


@pytest.mark.parametrize("goodput", [False, True], ids=["plain", "live-goodput"])
def test_a_deleted_output_directory_is_noticed_reopened_and_the_loss_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, goodput: bool
) -> None:
    """rm -rf of the output directory: files made again, spans and sessions go on, loss counted.

    With live goodput on, the rollup runs on the chrome writer's thread: the
    chrome queue's figures are still the writer's.
    """
    import shutil

    out = tmp_path / "run"
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(out),
            "session_tracer": {"enabled": True},
            **({"goodput": {"metrics": "none", "file": False}} if goodput else {}),
        }
    )
    caplog.set_level(logging.WARNING, logger="asynctrace")

    def work(prefix: str) -> None:
        for i in range(20):
            with managed_span("generation", f"{prefix}-{i}"), asynctrace.session_scope():
                asynctrace.trace_session_event("finalized", status="accepted", n=prefix)

    work("before")
    assert telemetry.flush(5.0)
    shutil.rmtree(out)
    work("after")
    assert telemetry.flush(5.0)
    work("later")
    assert telemetry.shutdown(5.0)
    names = _span_names(out)
    assert sorted(names) == sorted(
        [f"after-{i}" for i in range(20)] + [f"later-{i}" for i in range(20)]
    )
    assert telemetry.stats()["chrome"].lost == 20
    records = _session_records(out)
    assert [r["payload"]["n"] for r in records] == ["after"] * 20 + ["later"] * 20
    deleted = [r for r in caplog.records if "was deleted or replaced" in r.getMessage()]
    assert len(deleted) == 2  # once per file


# -- a full disk ---------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted on a fresh directory (root only; else the test is skipped)."""
    with mounted_tmpfs(tmp_path / "disk", "2m") as mount:
        yield mount


def test_a_full_disk_loses_only_what_it_must_and_writing_resumes_on_a_fresh_line(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ENOSPC: the loss counted, no torn line left mid-file, writing resumes when space returns."""
    out = small_disk / "run"
    telemetry = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(out),
            "session_tracer": {"enabled": True, "flush_threshold": 1000},
        }
    )
    caplog.set_level(logging.WARNING, logger="asynctrace")
    pad = "x" * 300

    def work(prefix: str, count: int) -> None:
        for i in range(count):
            with managed_span("generation", f"{prefix}-{i}", attributes={"pad": pad}):
                with asynctrace.session_scope():
                    asynctrace.trace_session_event("finalized", status="accepted", pad=pad)

    work("before", 50)
    assert telemetry.flush(5.0)
    filler = small_disk / "filler"
    with open(filler, "wb") as fill:  # take every block that is left
        try:
            while True:
                fill.write(b"\0" * 65536)
                fill.flush()
        except OSError:
            pass
    work("full", 300)
    assert telemetry.flush(5.0) is False
    filler.unlink()
    work("after", 50)
    assert telemetry.flush(5.0) is True
    assert telemetry.shutdown(5.0)

    chrome = telemetry.stats()["chrome"]
    raw = (out / "traces-r0.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    events = [json.loads(line) for line in raw.splitlines()]  # every line whole
    names = [e["name"] for e in events if e.get("ph") == "X"]
    assert chrome.failed > 0
    assert chrome.exported == len(names) == 400 - chrome.failed
    assert {f"before-{i}" for i in range(50)} | {f"after-{i}" for i in range(50)} <= set(names)

    sessions_raw = (out / "sessions-r0.jsonl").read_bytes()
    records = [json.loads(line) for line in sessions_raw.splitlines()]  # every line whole
    stats = telemetry.sessions.stats() if telemetry.sessions is not None else {}
    assert stats["failed"] > 0
    assert stats["written"] == len(records) == 400 - stats["failed"]
    assert "failed" in caplog.text


def test_shutting_down_a_disabled_handle_returns_at_once() -> None:
    """A handle that never ran has nothing to wait for: shutdown() does not sit out its timeout."""
    telemetry = configure({"enabled": False, "shutdown_timeout_s": 30})
    started = time.monotonic()
    assert telemetry.shutdown()
    assert telemetry.shutdown(timeout_s=30)
    assert time.monotonic() - started < 1.0


class _GatedSink:
    """Records batch sizes; its first export waits until released."""

    def __init__(self, any_size: bool) -> None:
        self.any_batch_size = any_size
        self.sizes: list[int] = []
        self.first = threading.Event()
        self.release = threading.Event()

    def export(self, batch: list[Any]) -> tuple[int, int]:
        self.sizes.append(len(batch))
        if len(self.sizes) == 1:
            self.first.set()
            self.release.wait(10)
        return len(batch), 0

    def flush(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


@pytest.mark.parametrize(
    ("any_size", "along", "sizes"),
    [(True, False, [8, 16, 8]), (False, False, [8, 8, 8, 8]), (True, True, [8, 16, 8])],
)
def test_a_writer_two_batches_behind_takes_two_at_once(
    any_size: bool, along: bool, sizes: list[int]
) -> None:
    """A sink that takes any size catches up two batches per export; others keep their size.

    With *along*, the sink is swapped for the live rollup wrapped around it after the
    queue started, as the pipeline does: the catch-up follows the sink the queue has.
    """
    from asynctrace._goodput_settings import GoodputSettings
    from asynctrace.export import QueuedSpanProcessor
    from asynctrace.export._along_chrome import AlongChrome
    from asynctrace.export._goodput_sink import GoodputSink

    sink = _GatedSink(any_size)
    rollup = GoodputSink(GoodputSettings(metrics="none"), path=None)
    processor = QueuedSpanProcessor(
        _GatedSink(False) if along else sink,
        name="gated",
        max_queue_size=64,
        max_export_batch_size=8,
        schedule_delay_millis=60_000,
    )
    if along:  # the pipeline's swap, before any span (a fixed size then would be the old one)
        processor._sink = AlongChrome(sink, rollup)
    try:
        for item in range(8):  # a full batch wakes the worker; its export holds it
            processor.on_end(item)  # type: ignore[arg-type]
        assert sink.first.wait(5)
        for item in range(8, 32):  # three batches wait behind it
            processor.on_end(item)  # type: ignore[arg-type]
        sink.release.set()
        assert processor.force_flush(5_000)
        assert sink.sizes == sizes
        stats = processor.stats()
        assert (stats.exported, stats.dropped) == (32, 0)
    finally:
        sink.release.set()
        assert processor.shutdown_within(5.0)
        rollup.shutdown()


def test_counts_are_the_stats_without_counting_the_queue() -> None:
    """``counts()`` (read at every goodput batch) equals ``stats()``'s three counters:
    with a backlog, with drops, and once shutdown abandons a stuck export."""
    from asynctrace.export import QueuedSpanProcessor

    sink = _GatedSink(False)
    processor = QueuedSpanProcessor(
        sink, name="gated", max_queue_size=16, max_export_batch_size=8, schedule_delay_millis=5
    )

    def both() -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        stats = processor.stats()
        return processor.counts(), (stats.exported, stats.dropped, stats.failed)

    try:
        for item in range(8):
            processor.on_end(item)  # type: ignore[arg-type]
        assert sink.first.wait(5)  # the worker holds the first batch
        for item in range(8, 40):  # 16 wait, 16 dropped
            processor.on_end(item)  # type: ignore[arg-type]
        counts, stats = both()
        assert counts == stats == (0, 16, 0)
        assert processor.stats().queued == 16
        assert processor.shutdown_within(0.2) is False  # the export is stuck: abandoned
        counts, stats = both()
        assert counts == stats == (0, 16 + 16 + 8, 0)
        abandoned = processor.stats()
        assert (abandoned.queued, abandoned.in_flight) == (0, 0)  # counted once, as dropped
        sink.release.set()  # the stuck export returns after all: its spans were exported
        processor._thread.join(5)
        late = processor.stats()
        assert (late.exported, late.dropped, late.queued, late.in_flight) == (8, 32, 0, 0)
    finally:
        sink.release.set()


def test_a_dead_worker_is_started_again_once_by_concurrent_flushes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Eight threads flush at once after the worker died: one new worker, not several.

    Two workers would drain one queue at once: the chrome writer is not
    thread-safe, and ``stats()``'s moves assume one writer.
    """
    import ctypes

    from asynctrace.export import QueuedSpanProcessor

    processor = QueuedSpanProcessor(
        _Writes(),
        name="dies",
        max_queue_size=64,
        max_export_batch_size=8,
        schedule_delay_millis=60_000,
    )
    try:
        worker = processor._thread
        assert worker.ident is not None
        # What ends a thread from outside: an exception raised in it, asynchronously
        # (delivered once it runs Python again: woken, past its wait).
        raised = ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(worker.ident), ctypes.py_object(SystemExit)
        )
        assert raised == 1
        with caplog.at_level(logging.CRITICAL, logger="asynctrace"):
            processor._wake.set()
            worker.join(5)
        assert not worker.is_alive()
        barrier = threading.Barrier(8)

        def flush() -> None:
            barrier.wait()
            processor.request_flush()

        flushers = [threading.Thread(target=flush) for _ in range(8)]
        for flusher in flushers:
            flusher.start()
        for flusher in flushers:
            flusher.join(5)
        workers = [t for t in threading.enumerate() if t.name == "asynctrace-export-dies"]
        assert len(workers) == 1, workers
        assert processor._restarts == 1
        for item in range(8):
            processor.on_end(item)  # type: ignore[arg-type]
        processor.force_flush(5_000)
        stats = processor.stats()
        assert stats.exported + stats.failed == 8  # the new worker exports; nothing twice
    finally:
        assert processor.shutdown_within(5.0)


def test_a_span_queued_after_the_last_drain_counts_once_as_dropped() -> None:
    """A span that got into the queue in the instant the worker finished (its end
    passed the closing check just before shutdown began) is never exported: it is
    counted as dropped, not also as queued."""
    from asynctrace.export import QueuedSpanProcessor

    processor = QueuedSpanProcessor(_Writes(), name="late", schedule_delay_millis=60_000)
    processor.on_end(0)  # type: ignore[arg-type]
    assert processor.shutdown_within(5.0)
    processor._queue.append(1)  # what that span's end did, after the worker's last drain
    stats = processor.stats()
    assert (stats.exported, stats.dropped, stats.queued, stats.in_flight) == (1, 1, 0, 0)


def test_the_chrome_writer_takes_any_size(tmp_path: Path) -> None:
    """The chrome writer says it takes any size (the catch-up above is then its)."""
    from asynctrace.export._chrome_writer import ChromeWriter

    writer = ChromeWriter(tmp_path / "t.jsonl", {}, iter(range(1, 100)).__next__)
    assert writer.any_batch_size is True


class _Flaky:
    """An exporter (or chrome-like sink) that delivers, refuses every third batch, or raises."""

    any_batch_size = False

    def __init__(self) -> None:
        self.calls = 0

    def export(self, batch: list[Any]) -> Any:
        self.calls += 1
        if self.calls % 7 == 0:
            raise RuntimeError("down for a moment")
        if self.calls % 3 == 0:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def flush(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


class _Writes(_Flaky):
    """As a sink: ``(exported, failed)``, a third of the batches failed, some raising."""

    def export(self, batch: list[Any]) -> tuple[int, int]:  # type: ignore[override]
        result = super().export(batch)
        return (0, len(batch)) if result is SpanExportResult.FAILURE else (len(batch), 0)


@pytest.mark.parametrize("kind", ["queue", "retrying"])
def test_stats_count_every_span_once_while_the_worker_moves_batches(kind: str) -> None:
    """Each ``stats()`` accounts for exactly the spans ended so far: a batch the worker
    is taking from the queue, exporting, holding for retry or giving up is never missed
    or counted twice (the reads used to interleave with those moves: with the threads
    switching every microsecond, a quarter of the reads or more were off)."""
    from asynctrace.export import QueuedSpanProcessor
    from asynctrace.export._retry import RetryingSpanProcessor

    processor: QueuedSpanProcessor
    if kind == "queue":
        processor = QueuedSpanProcessor(
            _Writes(), name="moves", max_queue_size=4096, max_export_batch_size=4,
            schedule_delay_millis=1,
        )  # fmt: skip
    else:  # held batches, retries, a bounded buffer trimmed (dropped), failures
        processor = RetryingSpanProcessor(
            _Flaky(), name="moves", max_queue_size=4096, max_export_batch_size=4,
            schedule_delay_millis=1, buffer_spans=256,
        )  # fmt: skip
    ended = 0
    stop = threading.Event()

    def produce() -> None:
        nonlocal ended
        while not stop.is_set():
            processor.on_end(ended)  # type: ignore[arg-type]
            ended += 1  # after the span is in: a read may count one more than this

    wrong: list[tuple[int, int, int, Any]] = []
    reads = 0
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            before = ended
            stats = processor.stats()
            after = ended
            reads += 1
            total = (
                stats.exported + stats.dropped + stats.failed + stats.queued
                + stats.in_flight + stats.buffered
            )  # fmt: skip
            if not before <= total <= after + 1:
                wrong.append((before, total, after, stats))
    finally:
        stop.set()
        thread.join(10)
        sys.setswitchinterval(interval)
        processor.shutdown_within(0.5)  # held batches wait out a backoff: then dropped
    assert reads > 50
    assert not wrong, f"{len(wrong)} of {reads} reads: {wrong[:3]}"
    final = processor.stats()
    assert final.exported + final.dropped + final.failed == ended
    assert final.exported
    assert final.failed


def test_a_batch_counts_its_spans_not_its_notices(tmp_path: Path) -> None:
    """The worker counts a batch's spans in flight in one C pass when it holds none of
    the queue's notices (flush markers, chrome track notices), item by item otherwise."""
    from asynctrace.export._chrome_writer import NewTrack
    from asynctrace.export._sync import _Marker
    from asynctrace.export.chrome import ChromeTraceProcessor

    processor = ChromeTraceProcessor(tmp_path / "t.jsonl")
    try:
        spans: list[Any] = [("a span",), object(), 3.0]
        assert processor._spans_in(spans) == 3
        assert processor._spans_in([*spans, NewTrack(7, "task: x"), 7, _Marker()]) == 3
        assert processor._spans_in([]) == 0
    finally:
        assert processor.shutdown_within(5.0)


class _Refuses:
    """An OTLP-like exporter that refuses every batch (each is held for retry)."""

    def export(self, batch: list[Any]) -> Any:
        return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def test_a_sigterm_handler_counts_trimmed_spans_while_a_producer_holds_the_drop_lock() -> None:
    """The retry buffer's trim never waits for a lock inside a move: a SIGTERM handler
    that interrupted a producer dropping spans (holding the drop lock) reads every span,
    at once (the trim used to wait for that lock with the move open: the handler's reads
    all failed and its last read missed the trimmed spans)."""
    from asynctrace.export._retry import RetryingSpanProcessor

    processor = RetryingSpanProcessor(
        _Refuses(), name="otlp", max_export_batch_size=4, schedule_delay_millis=1, buffer_spans=4
    )
    for item in range(4):
        processor.on_end(item)  # type: ignore[arg-type]  # held: the buffer is full
    deadline = time.monotonic() + 5
    while processor.stats().buffered != 4 and time.monotonic() < deadline:
        time.sleep(0.001)
    seen: list[Any] = []
    old = signal.signal(signal.SIGTERM, lambda *_: seen.append(processor.stats()))
    try:
        with processor._drop_lock:  # where the signal lands: inside a producer's _drop()
            for item in range(4, 8):
                processor.on_end(item)  # type: ignore[arg-type]  # held behind: trimmed
            # The worker takes the batch and trims the buffer (a loaded machine may
            # not run it for a while; a trim that waits for the drop lock never ends).
            deadline = time.monotonic() + 5
            while processor._trimmed < 4 and time.monotonic() < deadline:
                time.sleep(0.005)
            signal.raise_signal(signal.SIGTERM)
        (stats,) = seen
        total = (
            stats.exported + stats.dropped + stats.failed + stats.queued
            + stats.in_flight + stats.buffered
        )  # fmt: skip
        assert total == 8, stats
        assert stats.dropped == 4
    finally:
        signal.signal(signal.SIGTERM, old)
        processor.shutdown_within(0.2)
