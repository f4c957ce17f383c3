"""The demo's pump and training loop fail together: a Gym server that stops mid-run
ends the demo with one line, never a hang; a training loop that fails ends the pump."""

from __future__ import annotations

import asyncio
import queue
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from asynctrace_contrib.demo._job import drive
from asynctrace_contrib.demo.gym import GymServer
from asynctrace_contrib.demo.pump import Collector, Rollout, RolloutPump

# The real demo, its real Gym server stopped (and its thread ended) once the pump has
# scored 12 prompts: past the first batch of 8, with 24 still to come.
_STOP_MID_RUN = textwrap.dedent(
    """
    import asyncio, sys
    from asynctrace_contrib.demo import gym, pump
    from asynctrace_contrib.demo.__main__ import main

    servers = []
    start = gym.GymServer.start
    def start_and_keep(self, timeout_s=20.0):
        servers.append(self)
        return start(self, timeout_s)
    gym.GymServer.start = start_and_keep

    score = pump.RolloutPump._score
    scored = [0]
    async def score_then_stop(self, *args):
        reward = await score(self, *args)
        scored[0] += 1
        if scored[0] == 12:
            servers[0]._server.should_exit = True
            await asyncio.to_thread(servers[0]._thread.join, 10)
        return reward
    pump.RolloutPump._score = score_then_stop

    if sys.argv[2] == "cli":  # `asynctrace demo`
        from asynctrace.cli import main as cli
        raise SystemExit(cli(["demo", "--out", sys.argv[1], "--steps", "4", "--prompts", "8"]))
    raise SystemExit(main([sys.argv[1], "--steps", "4", "--prompts", "8"]))
    """
)


@pytest.mark.parametrize("entry", ["module", "cli"])
def test_demo_ends_with_one_line_when_the_gym_server_stops(tmp_path: Path, entry: str) -> None:
    """The Gym server stopping mid-run ends the demo: exit 1, one error line naming the
    pump's failure (before the fix, training waited for a batch forever), from
    ``python -m asynctrace_contrib.demo`` and from ``asynctrace demo`` alike."""
    done = subprocess.run(
        [sys.executable, "-c", _STOP_MID_RUN, str(tmp_path / "out"), entry],
        capture_output=True,
        text=True,
        timeout=120,  # a hang fails here instead of hanging the suite
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    prog = "asynctrace demo" if entry == "cli" else "python -m asynctrace_contrib.demo"
    prefix = f"{prog}: error: the rollout pump failed: "
    assert lines[0].startswith(prefix)
    assert "Error" in lines[0]  # the aiohttp exception's name, such as ClientConnectorError
    assert done.stdout == ""


def test_a_failing_training_loop_ends_the_pump_and_the_collector() -> None:
    """A training loop that raises after its first batch: drive raises that error, with
    the pump task ended and the collector thread stopped, none left waiting."""
    gym = GymServer()
    gym.start()
    started: list[threading.Thread] = []

    class Failing(RuntimeError):
        pass

    async def train(
        collector: Collector, steps: int, checkpoint_every: int, rollouts: list[Rollout]
    ) -> None:
        started.append(collector.thread)
        while not collector.batches:
            await asyncio.sleep(0.005)
        raise Failing("the trainer broke")

    async def job() -> list[asyncio.Task[object]]:
        with pytest.raises(Failing, match="the trainer broke"):
            await drive(RolloutPump, train, asyncio.to_thread, 4, 8, 4, 2, gym.url)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    try:
        left = asyncio.run(job())
    finally:
        gym.stop()
    assert left == []  # the pump and its prompt groups ended before drive returned
    started[0].join(10)
    assert not started[0].is_alive()


def test_the_pump_ends_its_groups_when_one_fails() -> None:
    """A group that raises ends the pump with its error, the other groups cancelled and
    awaited: nothing is left running and no error is left unread."""
    unread: list[object] = []

    async def job() -> list[asyncio.Task[object]]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unread.append(ctx))
        finished: queue.Queue[Rollout | None] = queue.Queue()
        with socket.socket() as bound:  # bound, not listening: every request is refused
            bound.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{bound.getsockname()[1]}"
            pump = RolloutPump(url, 4, 8, finished, max_inflight=4)
            with pytest.raises(OSError):
                await pump.run()
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(job()) == []
    assert unread == []
