"""Profiling chosen steps: the seed's schedule rule, on-demand requests, captures merged onto
the span timeline. The ``python`` backend (viztracer) runs for real here; the ``torch`` one in
``nox -s torch``."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

import asynctrace as at
from asynctrace import ConfigurationError, MissingExtraError
from asynctrace.cli import main as cli

pytest.importorskip("viztracer", reason="the python profiler backend needs viztracer")


def busy(n: int) -> int:
    """CPU work the profiler sees as Python calls."""
    return sum(i * i for i in range(n))


def configure(out: Path, profiler: dict[str, Any] | None, **extra: Any) -> at.Telemetry:
    return at.configure(
        {
            "enabled": True,
            "span_groups": "per_step",
            "exporters": ["chrome"],
            "output_dir": str(out),
            **({"profiler": profiler} if profiler is not None else {}),
            **extra,
        }
    )


async def steps(count: int, *, ask: bool, pause_s: float = 0.005) -> None:
    for step in range(1, count + 1):
        with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=ask):
            await asyncio.sleep(pause_s)
            busy(3000)


def captures(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("profile-*.json"))


@pytest.mark.parametrize(
    ("scheduled", "asks", "expected"),
    [
        pytest.param(True, True, ["profile-r0-step2.python.json"], id="flag-and-step"),
        pytest.param(False, True, [], id="flag-only"),
        pytest.param(True, False, [], id="step-only"),
        pytest.param(False, False, [], id="neither"),
    ],
)
def test_the_schedule_rule(
    tmp_path: Path, scheduled: bool, asks: bool, expected: list[str]
) -> None:
    """A step is profiled only when its span asks and its rl.iteration is scheduled."""
    telemetry = configure(tmp_path, {"steps": [2]} if scheduled else None)
    asyncio.run(steps(3, ask=asks))
    assert telemetry.shutdown()
    assert captures(tmp_path) == expected


def test_a_span_s_own_iteration_decides_over_the_scope_s(tmp_path: Path) -> None:
    """Leaf and umbrella alike: the step is the span's own rl.iteration, else the scope's;
    a step profiled again gets a capture file of its own."""
    telemetry = configure(tmp_path, {"steps": [2, 5]})

    def asks(kind: str, name: str, own: int | None) -> None:
        attributes = {"rl.iteration": own} if own is not None else None
        if kind == "leaf":
            span = at.managed_span("policy_update", name, attributes=attributes, profile=True)
        else:
            span = at.umbrella_span("step", name, attributes=attributes, profile=True)
        with span:
            busy(1000)

    asks("umbrella", "own-2-no-scope", 2)  # profiled: step 2
    with at.iteration_scope(3):
        asks("leaf", "own-5-in-scope-3", 5)  # profiled: step 5
        asks("leaf", "scope-3", None)  # not scheduled
    with at.iteration_scope(5):
        asks("umbrella", "own-3-in-scope-5", 3)  # not scheduled
        asks("leaf", "scope-5", None)  # profiled: step 5 again, while the first is saved
    assert telemetry.shutdown()
    assert captures(tmp_path) == [
        "profile-r0-step2.python.json",
        "profile-r0-step5.python.json",
        "profile-r0-step5_2.python.json",
    ]
    for name in captures(tmp_path):  # each whole: no two saves wrote one file
        assert json.loads((tmp_path / name).read_text())["traceEvents"]
    events, _ = _merged(tmp_path)
    profiled = {
        e["name"]: e["args"].get("asynctrace.profile.file")
        for e in events
        if e.get("ph") == "X" and e["name"].startswith(("own-", "scope-"))
    }
    assert profiled == {
        "own-2-no-scope": "profile-r0-step2.python.json",
        "own-5-in-scope-3": "profile-r0-step5.python.json",
        "scope-3": None,
        "own-3-in-scope-5": None,
        "scope-5": "profile-r0-step5_2.python.json",
    }
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    for step in ("2", "5", "5_2"):  # every capture merged onto the timeline
        assert any(name.startswith(f"profile step {step}: ") for name in tracks), tracks


def _merged(tmp_path: Path) -> tuple[list[dict[str, Any]], str]:
    out = tmp_path / "trace.json"
    assert cli(["convert", str(tmp_path), "-o", str(out), "--no-progress"]) == 0
    return json.loads(out.read_text())["traceEvents"], out.name


def test_a_capture_covers_its_step_and_lands_inside_it(tmp_path: Path) -> None:
    """Merged by convert, a capture's events fall inside its step's span (within the stated
    alignment error), under the same process, on tracks of their own."""
    telemetry = configure(tmp_path, {"steps": [2, 4]})
    asyncio.run(steps(5, ask=True, pause_s=0.02))
    assert telemetry.shutdown()
    assert captures(tmp_path) == ["profile-r0-step2.python.json", "profile-r0-step4.python.json"]
    errors = []
    for name in captures(tmp_path):
        about = json.loads((tmp_path / name).read_text())["otherData"]["asynctrace"]
        assert about["backend"] == "python"
        assert 0 <= about["clock_error_us"] < 1000  # measured around marker events
        errors.append(about["clock_error_us"])
    events, _ = _merged(tmp_path)
    spans = {
        e["args"]["rl.iteration"]: e
        for e in events
        if e.get("ph") == "X" and e["name"] == "rl.step"
    }
    assert spans[2]["args"]["asynctrace.profile.file"] == "profile-r0-step2.python.json"
    assert "asynctrace.profile.file" not in spans[3]["args"]
    tracks = {
        e["tid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    slack = max(errors) + 1  # microseconds
    for step in (2, 4):
        mine = {tid for tid, name in tracks.items() if name.startswith(f"profile step {step}: ")}
        assert mine, tracks
        profiled = [e for e in events if e.get("tid") in mine and e.get("ph") in ("X", "i")]
        calls = [e for e in profiled if e.get("name", "").startswith("busy")]
        assert calls, "the step's Python call is in its capture"
        span = spans[step]
        for event in profiled:
            assert event["pid"] == span["pid"]
            assert span["ts"] - slack <= event["ts"]
            assert event["ts"] + event.get("dur", 0) <= span["ts"] + span["dur"] + slack


def test_trace_fn_asks_too(tmp_path: Path) -> None:
    """trace_fn(profile=True) on a coroutine: the scheduled call is profiled."""

    @at.trace_fn("policy_update", "rl.update", profile=True)
    async def update() -> int:
        await asyncio.sleep(0.001)
        return busy(1000)

    async def run() -> None:
        for step in (1, 2):
            with at.iteration_scope(step):
                await update()

    telemetry = configure(tmp_path, {"steps": [1]})
    asyncio.run(run())
    assert telemetry.shutdown()
    assert captures(tmp_path) == ["profile-r0-step1.python.json"]
    with pytest.raises(ConfigurationError, match="is a generator function"):

        @at.trace_fn("policy_update", profile=True)
        def gen() -> Any:
            yield 1


def test_a_request_on_a_running_loop_profiles_exactly_one_step(tmp_path: Path) -> None:
    """Creating DIR/profile-next-step profiles the next step that asks, once per request."""
    telemetry = configure(tmp_path, {"steps": []})

    async def loop() -> None:
        request = tmp_path / "profile-next-step"
        for step in range(1, 80):
            with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                await asyncio.sleep(0.02)
                busy(500)
            if step == 5:
                request.write_text("")  # a request while the job runs
            if step == 45:
                request.write_text("again")  # a second request: a second capture

    asyncio.run(loop())
    assert telemetry.shutdown()
    found = captures(tmp_path)
    assert len(found) == 2, found
    first, second = sorted(int(name.split("step")[1].split(".")[0]) for name in found)
    assert 5 < first < 45 < second  # after each request, one step each


def test_configuration_errors_name_the_key(tmp_path: Path) -> None:
    """Bad profiler blocks fail at configure time with the key, the value, what is accepted."""
    cases = {
        "profiler.steps: 'all' is not accepted": {"steps": "all"},
        "profiler.steps: -1 is not accepted": {"steps": [-1]},
        "profiler.backend: 'perf' is not accepted; accepted: python, torch": {"backend": "perf"},
        "profiler: unknown key 'cpu'; accepted keys: steps, backend,": {"cpu": True},
        "profiler: unknown key 'stepz'; .*; did you mean 'steps'[?]": {"stepz": [1]},
        "profiler.with_stack: 'maybe' is not a boolean": {"with_stack": "maybe"},
    }
    for message, block in cases.items():
        with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
            configure(tmp_path, block)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_a_missing_backend_fails_at_configuration(tmp_path: Path) -> None:
    """No torch: configure (not step 49) raises MissingExtraError with the pip line."""
    with pytest.raises(MissingExtraError, match=r"pip install 'asynctrace\[torch\]'"):
        configure(tmp_path, {"steps": [49], "backend": "torch"})


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_torch_backend_puts_operators_on_the_timeline(tmp_path: Path) -> None:
    """torch.profiler on CPU: a profiled step's operators land inside its span."""
    import torch

    telemetry = configure(tmp_path, {"steps": [2], "backend": "torch", "record_shapes": True})

    async def run() -> None:
        for step in (1, 2, 3):
            with at.iteration_scope(step), at.umbrella_span("step", "rl.step", profile=True):
                a = torch.randn(64, 64)
                (a @ a).sum()
                await asyncio.sleep(0.005)

    asyncio.run(run())
    assert telemetry.shutdown(30)
    assert captures(tmp_path) == ["profile-r0-step2.torch.json"]
    events, _ = _merged(tmp_path)
    (span,) = [e for e in events if e.get("name") == "rl.step" and e["args"]["rl.iteration"] == 2]
    about = json.loads((tmp_path / "profile-r0-step2.torch.json").read_text())["otherData"]
    slack = about["asynctrace"]["clock_error_us"] + 1
    ops = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("aten::")]
    assert any(e["name"] == "aten::mm" for e in ops), sorted({e["name"] for e in ops})[:20]
    for op in ops:
        assert span["ts"] - slack <= op["ts"] <= span["ts"] + span["dur"] + slack


def test_an_odd_iteration_never_stops_the_step(tmp_path: Path) -> None:
    """A span that asks with an ``rl.iteration`` no set holds (a list, a valid attribute
    value) runs unprofiled instead of raising into the program; a numpy integer is the
    step it stands for, in the capture's file name too."""
    np = pytest.importorskip("numpy")
    telemetry = configure(tmp_path, {"steps": [2]})
    with at.managed_span(
        "policy_update", "listed", attributes={"rl.iteration": [2]}, profile=True
    ):
        busy(100)
    with at.managed_span(
        "policy_update", "numpy", attributes={"rl.iteration": np.int64(2)}, profile=True
    ):
        busy(1000)
    assert telemetry.shutdown()
    assert captures(tmp_path) == ["profile-r0-step2.python.json"]


def test_a_backend_that_fails_to_stop_is_stopped_and_not_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend's end marker raising: the tracer is stopped all the same (it traced
    everything after, for good), the capture is not saved half-made, the step runs."""
    from asynctrace import _errors
    from asynctrace._viztracer_backend import PythonBackend

    stopped: list[bool] = []
    real_stop = PythonBackend.stop

    def failing_mark(self: Any) -> None:
        raise RuntimeError("marker failed")

    def recording_stop(self: Any) -> None:
        monkeypatch.setattr(PythonBackend, "mark", failing_mark)
        try:
            real_stop(self)
        finally:
            stopped.append(not self._tracer.enable)

    monkeypatch.setattr(PythonBackend, "stop", recording_stop)
    strict = _errors.set_strict(False)
    try:
        telemetry = configure(tmp_path, {"steps": [2]})
        with at.iteration_scope(2), at.umbrella_span("step", "rl.step", profile=True):
            busy(1000)
        assert telemetry.shutdown()
    finally:
        _errors.set_strict(strict)
    assert stopped == [True]
    assert captures(tmp_path) == []
