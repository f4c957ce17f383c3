"""AReaL's own trace files (written by AReaL 1.0.4's perf_tracer): convert, goodput, report."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from asynctrace.cli._areal import DEFAULT_BUCKETS

from ._helpers import Result

WRITER = Path(__file__).with_name("_areal_writer.py")


def areal_files(root: Path, role: str = "actor", steps: bool = True) -> Path:
    """Run AReaL's tracer in a subprocess; its perf_tracer directory."""
    pytest.importorskip("orjson")
    pytest.importorskip("colorlog")
    done = subprocess.run(
        [sys.executable, str(WRITER), str(root), role, "yes" if steps else "no"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0 and "AnchorMissing" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr
    return root / "logs" / getpass.getuser() / "exp" / "trial" / "perf_tracer"


def _call(run: Callable[..., Result], *argv: object) -> tuple[int, str, str]:
    result = run(*argv)
    return result.code, result.out, result.err


def test_goodput_finds_steps_buckets_and_roles(tmp_path: Path, run: Callable[..., Result]) -> None:
    """Steps from args.global_step, buckets from the category table, the role in the label."""
    traces = areal_files(tmp_path)
    code, out, err = _call(run, "goodput", str(traces), "--json")
    assert code == 0, err
    table = json.loads(out)
    steps = table["steps"]
    assert [s["iteration"] for s in steps] == [0, 1]
    assert {s["process"] for s in steps} == {"actor r0"}
    for step in steps:
        assert 0.029 <= step["productive_s"] <= step["wall_s"]  # compute
        assert step["overhead_s"] >= 0.014  # scheduler + io
        assert step["idle_s"] == 0
    code, out, _ = _call(run, "goodput", str(traces), "--json", "--bucket-map", "io=idle")
    assert code == 0
    assert all(s["idle_s"] >= 0.004 for s in json.loads(out)["steps"])


def test_bucket_map_errors_and_json_file(tmp_path: Path, run: Callable[..., Result]) -> None:
    """A bad --bucket-map is a usage error naming what is accepted; a JSON file works too."""
    traces = areal_files(tmp_path)
    code, _, err = _call(run, "goodput", str(traces), "--bucket-map", "io=sometimes")
    assert code == 2
    assert "productive, overhead, idle, wasted or none" in err
    mapping = tmp_path / "buckets.json"
    mapping.write_text(json.dumps({"compute": "wasted"}))
    code, out, _ = _call(run, "goodput", str(traces), "--json", "--bucket-map", str(mapping))
    assert code == 0
    assert all(s["wasted_s"] >= 0.029 for s in json.loads(out)["steps"])


def test_no_step_is_a_plain_nonzero_exit(tmp_path: Path, run: Callable[..., Result]) -> None:
    """Without global_step there is no step: exit 2 and the reason, not an empty table."""
    traces = areal_files(tmp_path, steps=False)
    code, out, err = _call(run, "goodput", str(traces))
    assert code == 2
    assert out == ""
    assert "no step spans found" in err


def test_report_reads_areal_files(tmp_path: Path, run: Callable[..., Result]) -> None:
    """report renders AReaL's steps with the role kept."""
    traces = areal_files(tmp_path)
    out = tmp_path / "report.html"
    code, _, err = _call(run, "report", str(traces), "-o", str(out))
    assert code == 0, err
    assert "actor r0" in out.read_text()


def asynctrace_file(directory: Path) -> Path:
    """A trace file asynctrace writes (epoch clock): one step."""
    import asynctrace as at

    telemetry = at.configure(
        {"enabled": True, "span_groups": "all", "output_dir": str(directory)}, rank=0
    )
    with at.iteration_scope(1), at.umbrella_span("step", "rl.step"):
        pass
    telemetry.shutdown()
    return directory / "traces-r0.jsonl"


def test_convert_refuses_or_aligns_mixed_clocks(
    tmp_path: Path, run: Callable[..., Result]
) -> None:
    """AReaL's process-start clock with asynctrace's epoch clock: refused, naming the option;
    with --align-starts both start together; roles stay in the process names."""
    traces = areal_files(tmp_path)
    ours = asynctrace_file(tmp_path / "ours")
    out = tmp_path / "merged.json"
    code, _, err = _call(run, "convert", str(traces), str(ours), "-o", str(out))
    assert code == 2
    assert "different clocks" in err
    assert "--align-starts" in err
    assert not out.exists()
    code, _, err = _call(run, "convert", str(traces), str(ours), "-o", str(out), "--align-starts")
    assert code == 0, err
    events = json.loads(out.read_text())["traceEvents"]
    by_pid: dict[object, list[float]] = {}
    for event in events:
        if event.get("ph") == "X":
            by_pid.setdefault(event["pid"], []).append(event["ts"])
    starts = sorted(min(ts) for ts in by_pid.values())
    assert len(starts) == 2
    assert starts[1] - starts[0] < 60e6  # within a minute, not 56 years
    names = [e["args"]["name"] for e in events if e.get("name") == "process_name"]
    assert any(name.startswith("[actor] Rank 0") for name in names)
    code, _, err = _call(run, "convert", str(traces), "-o", str(out))  # one clock: as before
    assert code == 0, err


def test_default_table_matches_the_contrib_one() -> None:
    """The CLI's category table is asynctrace_contrib.areal's, bucket for bucket."""
    from asynctrace_contrib.areal import DEFAULT_CATEGORY_MAP

    assert {k: (v.value if v is not None else None) for k, v in DEFAULT_CATEGORY_MAP.items()} == (
        dict(DEFAULT_BUCKETS)
    )
