"""A profile capture's thread and task names are saved redacted."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from _profiling_helpers import configure

import asynctrace as at

pytest.importorskip("viztracer")

TASK = "fetch https://bob:hunter2@h/x?token=tok123"
THREAD = "worker token=tok123"


def test_a_captures_task_and_thread_names_are_saved_redacted(tmp_path: Path) -> None:
    """create_task(name=<a URL with a password and a token>) and a thread named with a
    token, inside a profiled step: the capture names their tracks without either."""
    telemetry = configure(tmp_path, {"steps": [1], "backend": "python", "output": str(tmp_path)})

    async def fetch() -> None:
        await asyncio.sleep(0.01)

    async def main() -> None:
        with at.iteration_scope(1), at.umbrella_span("step", "rl.step", profile=True):
            task = asyncio.create_task(fetch(), name=TASK)
            thread = threading.Thread(target=lambda: None, name=THREAD)
            thread.start()
            thread.join()
            await task

    try:
        asyncio.run(main())
    finally:
        telemetry.shutdown()
    (capture,) = tmp_path.glob("profile-r0-step1.python.json")
    text = capture.read_text()
    assert "hunter2" not in text
    assert "tok123" not in text
    assert "fetch https://h/x?token=REDACTED" in text  # the task's track, named still
