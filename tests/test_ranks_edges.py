"""Ranks from nested launchers and bounded values; trace files that stop being regular
files; the fork registry's size; a program's late global tracer provider."""

from __future__ import annotations

import gc
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import asynctrace as at
from asynctrace import ConfigurationError, _forksafe
from asynctrace._files import AppendFile
from asynctrace._rank_env import LAUNCHER_VARS, LOCAL_RANK_VARS, env_local_rank, env_rank
from asynctrace._ranks import parse_export_ranks, rank_hash

MAX_WORLD_SIZE = 2**31 - 1  # as documented
LAUNCH_VARS = (*(v for pair in LAUNCHER_VARS for v in pair), *LOCAL_RANK_VARS)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in (*LAUNCH_VARS, "ASYNCTRACE_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    yield
    at.shutdown()


def _mpirun_in_sbatch(k: int) -> dict[str, str]:
    """Process *k* of ``mpirun -n 3`` run from an ``sbatch`` script (the batch step's SLURM)."""
    return {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_LOCALID": "0",
        "OMPI_COMM_WORLD_RANK": str(k),
        "OMPI_COMM_WORLD_SIZE": "3",
        "OMPI_COMM_WORLD_LOCAL_RANK": str(k),
    }


@pytest.mark.parametrize("k", [0, 1, 2])
def test_mpirun_inside_sbatch_takes_open_mpis_rank(
    monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """The innermost launcher wins: mpirun's rank, world size and local rank, not SLURM's."""
    for var, value in _mpirun_in_sbatch(k).items():
        monkeypatch.setenv(var, value)
    settings = at.init_worker({"enabled": False}).settings
    assert (settings.rank, settings.world_size, settings.local_rank) == (k, 3, k)


def test_launchers_are_read_innermost_first() -> None:
    """RANK, then Open MPI, then PMI (MPICH's MPI_LOCALRANKID), then SLURM."""
    slurm = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}
    pmi = {**slurm, "PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"}
    assert (env_rank(pmi), env_local_rank(pmi)) == ((2, 4), 1)
    torchrun = {**pmi, "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}
    assert (env_rank(torchrun), env_local_rank(torchrun)) == ((5, 8), 3)
    # an explicit rank takes the innermost world size too
    assert env_rank({**slurm, "OMPI_COMM_WORLD_SIZE": "3"}, rank=2) == (2, 3)


@pytest.mark.parametrize("var", ["RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_LOCALID"])
def test_a_value_with_thousands_of_digits_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, var: str
) -> None:
    """Past int()'s digit limit: a ConfigurationError naming the variable, the value cut short."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(var, "1" * 5000)
    with pytest.raises(ConfigurationError) as info:
        at.init_worker({"enabled": False})
    message = str(info.value)
    assert message.startswith(f"{var}: '1111")
    assert "(5000 characters)" in message
    assert "accepted: an integer of at most 18 digits" in message
    assert len(message) < 300


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"WORLD_SIZE": str(MAX_WORLD_SIZE + 1)},
            r"^WORLD_SIZE: 2147483648 .* from 1 to 2147483647",
        ),
        ({"RANK": str(MAX_WORLD_SIZE), "WORLD_SIZE": "4"}, r"^RANK: 2147483647 .* from 0 to"),
        ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "9" * 12}, r"^LOCAL_RANK: 999999999999 "),
    ],
)
def test_launcher_values_are_bounded(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    """A world size above 2**31 - 1 (or a rank, a local rank past it) is refused, named."""
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ConfigurationError, match=message):
        at.init_worker({"enabled": False})


def test_sampled_ranks_decide_at_once_in_a_huge_world() -> None:
    """sampled stops at the first rank under the rate, whatever the world size (a subprocess)."""
    rank = next(r for r in range(100) if rank_hash(r) >= 0.01)
    code = (  # a bounded address space: a list of the world's hashes fails, not swaps
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from asynctrace._ranks import parse_export_ranks as p\n"
        f"print(p('k', 'sampled:0.01').exports(rank={rank}, world_size=10**18),\n"
        f"      p('k', 'sampled:1e-9').exports(rank={rank}, world_size=10**18))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.split() == ["False", "False"]
    # a small world with no rank under the rate still has its lowest hash export
    tiny = parse_export_ranks("k", "sampled:0.00001")
    assert [r for r in range(5) if tiny.exports(rank=r, world_size=5)] == [
        min(range(5), key=rank_hash)
    ]


def test_a_fifo_put_at_the_trace_path_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO in the trace file's place fails the reopen: counted, and shutdown is clean."""
    telemetry = at.configure(
        {"enabled": True, "output_dir": str(tmp_path), "run_id": "x", "span_groups": "all"}
    )
    path = tmp_path / "traces-r0.jsonl"
    try:
        with at.managed_span("reward", "a"):
            pass
        assert at.flush(5)
        path.unlink()
        os.mkfifo(path)
        for _ in range(10):
            with at.managed_span("reward", "b"):
                pass
        assert not at.flush(5)  # the batch failed: the FIFO was refused at once
        assert telemetry.shutdown(5)
        assert telemetry.stats()["chrome"].failed == 10
        assert not [t for t in threading.enumerate() if t.name.startswith("asynctrace-export")]
    finally:
        # Should a writer wait in open() for a reader, this lets it go.
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.close(reader)
        telemetry.shutdown(1)
    assert stat.S_ISFIFO(os.stat(path).st_mode)


def test_reopen_refuses_a_fifo_that_has_a_reader(tmp_path: Path) -> None:
    """A file replaced by a FIFO someone reads is not written into: reopen raises OSError."""
    path = tmp_path / "x.jsonl"
    out = AppendFile(path)
    path.unlink()
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert out.moved()
        with pytest.raises(OSError, match="not a regular file"):
            out.reopen()
        assert out.write(b'{"a":1}\n', 1)[1] is not None  # still refused: counted as lost
    finally:
        os.close(reader)
        out.close()


def test_the_fork_registry_drops_dead_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    """call_in_child keeps its list near the live methods, not one entry per object ever.

    The next pruning is due at twice what was alive at the last one: earlier tests in
    the process may have left that high, so it starts from what is alive now."""

    class Resettable:
        def reset(self) -> None:
            pass

    gc.collect()
    alive_now = sum(1 for ref in _forksafe._methods if ref() is not None)
    monkeypatch.setattr(_forksafe, "_prune_at", max(16, 2 * alive_now))
    kept = Resettable()
    _forksafe.call_in_child(kept.reset)
    added = max(1000, 4 * alive_now + 16)  # enough to reach the next pruning, whatever is alive
    for _ in range(added):
        _forksafe.call_in_child(Resettable().reset)
    gc.collect()
    alive = sum(1 for ref in _forksafe._methods if ref() is not None)
    assert len(_forksafe._methods) <= 2 * alive + 16
    assert len(_forksafe._methods) < alive_now + added  # pruned at least once
    assert any(ref() == kept.reset for ref in _forksafe._methods)


LATE_SETTER = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(name)s|%(message)s")
import asynctrace as at
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
telemetry = at.configure({"enabled": True, "exporters": ["memory"], "output_dir": sys.argv[1]})
trace.set_tracer_provider(TracerProvider())
trace.set_tracer_provider(TracerProvider())
telemetry.shutdown(5)
"""


def test_a_late_global_provider_is_explained_once(tmp_path: Path) -> None:
    """set_tracer_provider after configure(): asynctrace warns once, saying what to do."""
    done = subprocess.run(
        [sys.executable, "-c", LATE_SETTER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ours = [line for line in done.stdout.splitlines() if line.startswith("asynctrace|")]
    assert len(ours) == 1, done.stdout
    assert "set_tracer_provider() was called after asynctrace.configure()" in ours[0]
    assert "before the first configure()" in ours[0]
    assert done.stdout.count("Overriding of current TracerProvider is not allowed") == 2


def test_a_world_size_argument_past_the_bound_is_a_configuration_error() -> None:
    """``world_size=`` given in code has the launcher variables' bound."""
    import asynctrace as at

    with pytest.raises(at.ConfigurationError, match="world_size.*2147483647"):
        at.configure({"enabled": False, "session_tracer": {"enabled": True}}, world_size=2**40)
