"""A world size with no rank; a rank from the environment past a given world size; a
late global provider with OpenTelemetry's loggers quieted; the global provider's
shutdown and a handed-in provider; a timeout during wait_until's first check; the
variable a too-large Prometheus port's local rank came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

from asynctrace._pump import wait_until
from asynctrace._rank_env import LAUNCHER_VARS, LOCAL_RANK_VARS
from asynctrace.testing import capture_spans

LAUNCH_VARS = (*(v for pair in LAUNCHER_VARS for v in pair), *LOCAL_RANK_VARS)


def _run(script: str, env: dict[str, str] | None = None) -> Any:
    """*script* in a new interpreter with the launcher variables of *env* only; its last
    stdout line, as JSON."""
    base = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    base.pop("ASYNCTRACE_RUN_ID", None)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- a world size with no rank --------------------------------------------------------

_SPAWNED_CHILD = """
import json, os, sys, tempfile
import asynctrace as at
out = {}
config = {"enabled": True, "exporters": ["memory"], "output_dir": tempfile.mkdtemp(),
          "export_ranks": "first"}
try:  # a child of mp.spawn: WORLD_SIZE from its parent, its rank an argument
    at.init_worker(config)
    out["bare"] = None
except at.ConfigurationError as exc:
    out["bare"] = str(exc)
t = at.init_worker(config, rank=2)  # the remedy: the rank passed, the world size read
out["given"] = [t.settings.rank, t.settings.world_size, t.enabled]
t.shutdown()
os.environ["WORLD_SIZE"] = "1"  # a world of one: rank 0 of 1, as before
t = at.init_worker(config)
out["one"] = [t.settings.rank, t.settings.world_size, t.enabled]
t.shutdown()
print(json.dumps(out))
"""


def test_a_world_size_without_a_rank_is_a_configuration_error() -> None:
    """WORLD_SIZE=4 with no rank variable (the mp.spawn pattern) fails init_worker(),
    naming the variable, its value, the rank variables looked for and the remedy;
    init_worker(rank=...) keeps the world size, and WORLD_SIZE=1 is rank 0 of 1."""
    out = _run(_SPAWNED_CHILD, {"WORLD_SIZE": "4"})
    message = out["bare"]
    assert message is not None, "every child would be rank 0 of 4"
    assert message.startswith("WORLD_SIZE: 4 is not accepted without a rank")
    assert "RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID" in message
    assert "init_worker(rank=...)" in message
    assert out["given"] == [2, 4, False]  # rank 2 of 4 under export_ranks: first
    assert out["one"] == [0, 1, True]


_ENV_RANK_PAST_WORLD = """
import json
import asynctrace as at
try:
    at.init_worker({"enabled": False}, world_size=4)
    print(json.dumps(None))
except at.ConfigurationError as exc:
    print(json.dumps(str(exc)))
"""


@pytest.mark.parametrize(
    ("env", "var"),
    [
        ({"RANK": "7"}, "RANK"),
        ({"RANK": "7", "WORLD_SIZE": "8"}, "RANK"),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8"}, "SLURM_PROCID"),
    ],
)
def test_a_rank_from_the_environment_past_a_given_world_size_names_the_variable(
    env: dict[str, str], var: str
) -> None:
    """init_worker(world_size=4) with a rank of 7 read from RANK: the error names RANK."""
    message = _run(_ENV_RANK_PAST_WORLD, env)
    assert message is not None
    assert message.startswith(f"{var}: {env[var]} is not accepted with init_worker(world_size=4)")
    assert "from 0 to 3" in message


# --- OpenTelemetry's global provider ----------------------------------------------------

_LATE_SETTER_QUIET = """
import json, logging, sys, tempfile
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(name)s|%(message)s")
logging.getLogger("opentelemetry").setLevel(logging.ERROR)  # OpenTelemetry's chatter quieted
import asynctrace as at
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
t = at.configure({"enabled": True, "exporters": ["memory"], "output_dir": tempfile.mkdtemp()})
mine = TracerProvider()
trace.set_tracer_provider(mine)
trace.set_tracer_provider(TracerProvider())
refused = trace.get_tracer_provider() is not mine
t.shutdown()
print(json.dumps({"owns": t.owns_global_provider, "refused": refused}))
"""


_RESET_GLOBAL = """
import json, tempfile
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import asynctrace as at

at.configure({"enabled": True, "exporters": [], "output_dir": tempfile.mkdtemp()}).shutdown()
# what many test fixtures do to set the global again
trace._TRACER_PROVIDER_SET_ONCE._done = False
trace._TRACER_PROVIDER = None
mine = TracerProvider()
memory = InMemorySpanExporter()
mine.add_span_processor(SimpleSpanProcessor(memory))
trace.set_tracer_provider(mine)
trace.get_tracer("app").start_span("work").end()
print(json.dumps({"mine": trace.get_tracer_provider() is mine,
                  "spans": len(memory.get_finished_spans())}))
"""


def test_a_program_that_resets_opentelemetrys_guard_sets_its_provider() -> None:
    """The reset-the-global idiom of test fixtures (``_done = False``) works after asynctrace
    held the global, as it does with OpenTelemetry's own guard."""
    assert _run(_RESET_GLOBAL) == {"mine": True, "spans": 1}


def test_a_late_global_provider_is_explained_with_opentelemetry_quieted() -> None:
    """With the opentelemetry logger at ERROR, a refused set_tracer_provider still gets
    asynctrace's one warning on its own logger."""
    done = subprocess.run(
        [sys.executable, "-c", _LATE_SETTER_QUIET],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == {"owns": True, "refused": True}
    ours = [line for line in lines if line.startswith("asynctrace|")]
    assert len(ours) == 1, done.stdout
    assert "set_tracer_provider() was called after asynctrace.configure()" in ours[0]
    assert "Overriding of current TracerProvider" not in done.stdout  # OTel's, quieted


# --- wait_until: a timeout during the first check -----------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_a_timeout_during_the_first_check_records_the_wait(backend: str, provider: str) -> None:
    """A slow async predicate outlasting timeout_s: TimeoutError, and one wait span from
    the first check's start, with one poll, ended with ERROR."""
    timeout_s = 0.05

    async def slow() -> bool:
        await anyio.sleep(60)  # cut by the timeout
        return False

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await wait_until(slow, timeout_s=timeout_s)

    with capture_spans(provider=provider) as captured:
        before = time.time_ns()
        anyio.run(main, backend=backend)
    (wait,) = captured.by_name("rl.idle.buffer_starvation")
    assert wait.status.status_code.name == "ERROR"
    assert wait.attributes is not None
    assert wait.attributes["rl.idle.polls"] == 1
    assert wait.attributes["rl.bucket"] == "idle"
    assert wait.start_time is not None
    assert wait.end_time is not None
    assert wait.start_time >= before
    # it covers the check the timeout cut (generous: the timeout's own length halved)
    assert wait.end_time - wait.start_time >= timeout_s / 2 * 1e9


def test_the_first_check_records_nothing_unless_the_timeout_cut_it() -> None:
    """A predicate true at once records nothing, with a timeout too; a TimeoutError the
    predicate raises itself (not the timeout's) before any wait records nothing."""

    async def ready() -> bool:
        await anyio.sleep(0)
        return True

    async def own_timeout() -> bool:
        raise TimeoutError("the predicate's own")

    async def main() -> None:
        assert await wait_until(ready, timeout_s=5) == 0
        with pytest.raises(TimeoutError, match="the predicate's own"):
            await wait_until(own_timeout, timeout_s=5)

    with capture_spans() as captured:
        anyio.run(main)
    assert captured.names() == []


# --- the Prometheus port's local rank ----------------------------------------------------

_PORT_PAST_65535 = """
import json, tempfile
import asynctrace as at
try:
    at.configure({"enabled": True, "exporters": ["memory"], "output_dir": tempfile.mkdtemp(),
                  "goodput": {"metrics": "prometheus", "prometheus_host": "127.0.0.1",
                              "prometheus_port": 65534, "file": False}})
    print(json.dumps(None))
except at.ConfigurationError as exc:
    print(json.dumps(str(exc)))
"""


@pytest.mark.parametrize("var", ["SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"])
def test_a_port_past_65535_names_the_local_rank_variable(var: str) -> None:
    """prometheus_port + the local rank past 65535: the error names the variable the
    local rank came from."""
    pytest.importorskip("opentelemetry.exporter.prometheus")
    env = {var: "3"} if var == "LOCAL_RANK" else {var: "3", "LOCAL_RANK": "-1"}  # -1: unset
    message = _run(_PORT_PAST_65535, env)
    assert message is not None
    assert message.startswith(f"goodput.prometheus_port: 65534 + {var} 3 = 65537"), message
    assert f"with {var}=3" in message


# --- a world size given in code with no rank ------------------------------------------

_GIVEN_WORLD_NO_RANK = """
import json
import asynctrace as at
out = {}
try:
    at.init_worker({"enabled": False}, world_size=4)
    out["bare"] = None
except at.ConfigurationError as exc:
    out["bare"] = str(exc)
t = at.init_worker({"enabled": False}, world_size=1)
out["one"] = [t.settings.rank, t.settings.world_size]
t.shutdown()
t = at.init_worker({"enabled": False}, rank=2, world_size=4)
out["given"] = [t.settings.rank, t.settings.world_size]
t.shutdown()
print(json.dumps(out))
"""


def test_a_world_size_given_in_code_without_a_rank_is_a_configuration_error() -> None:
    """init_worker(world_size=4) with no rank passed or set fails as WORLD_SIZE=4 does,
    naming where the world size came from and the remedy; world_size=1 is rank 0 of 1."""
    out = _run(_GIVEN_WORLD_NO_RANK)
    message = out["bare"]
    assert message is not None, "every process would be rank 0 of 4"
    assert message.startswith("init_worker(world_size): 4 is not accepted without a rank")
    assert "RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID" in message
    assert "init_worker(rank=...)" in message
    assert out["one"] == [0, 1]
    assert out["given"] == [2, 4]
