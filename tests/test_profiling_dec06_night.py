"""Profiling: a full buffer seen in an asyncio step, and captures of negative steps."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest
from _profiling_helpers import about, captures, configure

import asynctrace as at
from asynctrace._profile_names import claim_capture
from asynctrace.cli import main as cli
from asynctrace.cli._captures import CAPTURE_NAME

pytest.importorskip("viztracer", reason="the python profiler backend needs viztracer")


def convert(out: Path, capsys: pytest.CaptureFixture[str], *inputs: Path) -> str:
    """``asynctrace convert`` of *inputs* (else *out*): its summary line."""
    capsys.readouterr()
    named = [str(p) for p in inputs] or [str(out)]
    assert cli(["convert", *named, "-o", str(out / "trace.json"), "--no-progress"]) == 0
    return capsys.readouterr().err


async def asyncio_step(iteration: int, switches: int) -> None:
    with at.iteration_scope(iteration):
        async with at.umbrella_span("step", "rl.step", profile=True):
            for _ in range(switches):
                await asyncio.sleep(0)


def test_an_asyncio_step_that_fills_the_buffer_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """viztracer names the tasks' tracks after the events, which hides a full buffer from
    its own flag: the capture still says ``overflow: true``, a warning says to raise
    ``profiler.entries``, and convert calls the merged capture partial."""
    from asynctrace import _capture_finish

    _capture_finish._warned.discard("overflow")
    telemetry = configure(tmp_path, {"steps": [1], "entries": 1000})
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        asyncio.run(asyncio_step(1, 300))
        assert telemetry.shutdown()
    (name,) = captures(tmp_path)
    events = json.loads((tmp_path / name).read_text())["traceEvents"]
    assert events[-1]["ph"] == "M"  # a task's name after the events: the case at hand
    assert about(tmp_path / name)["overflow"] is True
    assert "raise profiler.entries" in caplog.text
    assert f"partial: {name} lost its earliest events" in convert(tmp_path, capsys)


def test_an_asyncio_step_that_fits_says_no_overflow(tmp_path: Path) -> None:
    telemetry = configure(tmp_path, {"steps": [1], "entries": 100_000})
    asyncio.run(asyncio_step(1, 30))
    assert telemetry.shutdown()
    assert about(tmp_path / "profile-r0-step1.python.json")["overflow"] is False


def test_capture_names_of_every_step_read_back(tmp_path: Path) -> None:
    """Each name a capture is given (a negative step, ``na``, a name taken) is read back as
    a capture's, with its step."""
    taken: dict[object, int] = {}
    steps: list[int | str] = [-1, -1, 0, 7, "na", "na", -9_223_372_036_854_775_808]
    names = [claim_capture(tmp_path, 2, "driver", taken, s, "python").name for s in steps]
    assert names[0] == "profile-driver-r2-step-1.python.json"
    read = [CAPTURE_NAME.match(n) for n in names]
    assert all(read), names
    assert [m["step"] for m in read if m] == [
        "-1",
        "-1_2",
        "0",
        "7",
        "na",
        "na_2",
        "-9223372036854775808",
    ]
    assert {(m["role"], m["rank"], m["backend"]) for m in read if m} == {("driver", "2", "python")}


def test_a_capture_of_a_negative_step_is_merged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A request answered by a warm-up step (``rl.iteration`` -3) is saved as
    ``...-step-3...`` and merged by convert, found in the directory or named."""
    telemetry = configure(tmp_path, {"steps": []})
    request = tmp_path / "profile-next-step"

    async def loop() -> None:
        deadline = time.monotonic() + 30
        touched = 0.0
        while not captures(tmp_path) and time.monotonic() < deadline:
            if time.monotonic() - touched > 0.7:  # until the watcher has seen one
                request.write_text(str(touched))
                touched = time.monotonic()
            await asyncio_step(-3, 3)
            await asyncio.sleep(0.02)

    asyncio.run(loop())
    assert telemetry.shutdown()
    assert captures(tmp_path) == ["profile-r0-step-3.python.json"]
    summary = convert(tmp_path, capsys)
    assert "merged 1 profile capture " in summary
    assert "not merged" not in summary
    document = json.loads((tmp_path / "trace.json").read_text())
    tracks = {e["args"]["name"] for e in document["traceEvents"] if e.get("name") == "thread_name"}
    assert any(t.startswith("profile step -3: ") for t in tracks), tracks
    named = convert(
        tmp_path, capsys, tmp_path / "traces-r0.jsonl", tmp_path / "profile-r0-step-3.python.json"
    )
    assert "merged 1 profile capture " in named
