"""``asynctrace goodput`` and ``convert`` on AReaL's own files: parents, order, roles."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ._helpers import Result

TESTS = Path(__file__).resolve().parents[1]


def areal_file(directory: Path, spans: list[tuple[str, int, int, str, dict[str, Any]]]) -> Path:
    """A trace file as AReaL 1.0.4 writes it (metadata, then complete events as scopes end)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines: list[dict[str, Any]] = [
        {"name": "thread_name", "ph": "M", "pid": 7, "tid": 7, "args": {"name": "MainThread"}},
        {"name": "process_name", "ph": "M", "pid": 7, "args": {"name": "Rank 0, Process"}},
        {"name": "process_sort_index", "ph": "M", "pid": 7, "args": {"sort_index": 0}},
    ]
    for name, ts, dur, cat, args in spans:
        lines.append(
            {
                "name": name,
                "ph": "X",
                "ts": ts,
                "dur": dur,
                "pid": 7,
                "tid": 7,
                "cat": cat,
                "args": {**args, "rank": 0},
            }
        )
    path = directory / "traces-r0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


S = 1_000_000  # µs


def test_nested_bucketed_scopes_count_the_inner_one(
    tmp_path: Path, run: Callable[..., Result]
) -> None:
    """AReaL writes the inner scope first; the rollup must see both (end order): the
    nested-bucket violation is reported and the leaf (the inner one) is what counts."""
    areal_file(
        tmp_path,
        [
            ("allreduce", 2 * S, 2 * S, "comm", {}),
            ("update", 1 * S, 6 * S, "compute", {}),
            ("train.step", 0, 10 * S, "misc", {"global_step": 1}),
        ],
    )
    result = run("goodput", str(tmp_path), "--json")
    assert result.code == 1, result.err  # violations found
    table = result.json()
    (step,) = table["steps"]
    assert step["overhead_s"] == pytest.approx(2.0)  # the comm leaf
    assert step["productive_s"] == 0
    assert [v["kind"] for v in table["violations"]] == ["nested-bucket"]


def test_a_crossing_event_is_not_a_parent(tmp_path: Path, run: Callable[..., Result]) -> None:
    """A long event that starts in the step and ends after it does not take the step's
    children away from it; an event under no step is reported on stderr."""
    areal_file(
        tmp_path,
        [
            ("update", 5 * S, 1 * S, "compute", {}),
            ("train.step", 0, 10 * S, "misc", {"global_step": 0}),
            ("bg.rollout_wait", 1 * S, 29 * S, "misc", {}),
            ("late", 40 * S, 1 * S, "compute", {}),
        ],
    )
    result = run("goodput", str(tmp_path), "--json")
    assert result.code == 0, result.err
    (step,) = result.json()["steps"]
    assert step["productive_s"] == pytest.approx(1.0)
    assert "1 bucketed AReaL event(s) (1.000s) lie under no step" in result.err


def test_same_thread_parent_preferred(tmp_path: Path, run: Callable[..., Result]) -> None:
    """Of two events containing a child, the one on the child's thread is its parent: a
    bucketed event of another thread running meanwhile is a sibling, not a parent."""
    path = areal_file(
        tmp_path,
        [
            ("work", 2 * S, 1 * S, "compute", {}),
            ("train.step", 0, 10 * S, "misc", {"global_step": 3}),
        ],
    )
    lines = path.read_text().splitlines()
    other = {
        "name": "pool.task",
        "ph": "X",
        "ts": 1 * S,
        "dur": 4 * S,
        "pid": 7,
        "tid": 99,
        "cat": "io",
        "args": {"rank": 0},
    }
    path.write_text("\n".join([*lines, json.dumps(other)]) + "\n")
    result = run("goodput", str(tmp_path), "--json")
    assert result.code == 0, result.err
    table = result.json()
    (step,) = table["steps"]
    assert step["productive_s"] == pytest.approx(1.0)
    assert step["overhead_s"] == pytest.approx(4.0)
    assert table["violations"] == []
    # Siblings on two threads, both bucketed: the second of wall clock they share is in
    # both sums, within the wall, which the rollup notes (a nested pair: nested-bucket).
    assert "1 step count bucketed spans that overlap" in result.err
    assert "at least 1.000000 s" in result.err


def test_convert_keeps_roles_sharing_a_pid_apart(
    tmp_path: Path, run: Callable[..., Result]
) -> None:
    """Two AReaL roles in processes with one pid (one per container): two processes,
    as AReaL's own converter keeps them."""
    pytest.importorskip("orjson")
    pytest.importorskip("colorlog")
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(TESTS)!r})
        from _areal_loader import load_perf_tracer, PerfTracerConfig
        pt = load_perf_tracer()
        cfg = PerfTracerConfig(experiment_name="e", trial_name="t",
                               fileroot={str(tmp_path)!r}, enabled=True)
        for role in ("actor", "rollout"):
            pt.configure(cfg, rank=0, role=role)
            with pt.trace_scope(role + ".work", category="compute", args={{"global_step": 0}}):
                time.sleep(0.002)
            pt.save(force=True)
            pt.reset()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0 and "AnchorMissing" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr
    traces = tmp_path / "logs" / getpass.getuser() / "e" / "t" / "perf_tracer"
    out = tmp_path / "merged.json"
    result = run("convert", str(traces), "-o", str(out))
    assert result.code == 0, result.err
    events = json.loads(out.read_text())["traceEvents"]
    pids = {e["name"]: e["pid"] for e in events if e["ph"] == "X"}
    assert pids["actor.work"] != pids["rollout.work"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names[pids["actor.work"]].startswith("[actor]")
    assert names[pids["rollout.work"]].startswith("[rollout]")
