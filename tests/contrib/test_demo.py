"""The rollout-pump demo, end to end: one trace, clean goodput, consistent sessions."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from asynctrace_contrib.demo import run_demo
from asynctrace_contrib.demo.gym import fails
from asynctrace_contrib.demo.pump import MAX_ATTEMPTS

from asynctrace import ConfigurationError


def complete_events(path: Path) -> list[dict[str, Any]]:
    """The complete ("X") events of a chrome JSONL file."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("ph") == "X"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The demo with default arguments, timed."""
    out = tmp_path_factory.mktemp("demo")
    started = time.monotonic()
    result = run_demo(out)
    result.wall = time.monotonic() - started
    return result


def test_finishes_within_a_minute(demo: Any) -> None:
    """Default arguments finish in <= 60 s on this machine kind."""
    assert demo.wall <= 60
    assert len(demo.rollouts) == 8 * 16


def test_one_trace_for_everything(demo: Any) -> None:
    """Driver, pump tasks, collector thread, finalize thread and Gym server: one trace id."""
    (trace_file,) = demo.trace_files
    events = complete_events(trace_file)
    assert {e["args"]["trace_id"] for e in events} == {events[0]["args"]["trace_id"]}
    names = collections.Counter(e["name"] for e in events)
    for name in (
        "rl.job",
        "rl.step",
        "rl.rollout.dispatch",
        "POST",
        "POST /score/{prompt_id}",
        "gym.score",
        "rl.collector.batch",
        "rl.checkpoint.finalize",
        "rl.policy_update",
    ):
        assert names[name] > 0, name
    assert names["rl.step"] == 8
    assert names["POST /score/{prompt_id}"] == names["POST"]  # exactly one server span each


def test_waits_and_retries_are_shaped_right(demo: Any) -> None:
    """One starvation span per wait (with rl.idle.polls); retries carry attempt > 0."""
    events = complete_events(demo.trace_files[0])
    waits = [e for e in events if e["name"] == "rl.idle.buffer_starvation"]
    assert 0 < len(waits) <= 8
    assert all(e["args"]["rl.idle.polls"] >= 1 for e in waits)
    assert len({e["args"]["rl.iteration"] for e in waits}) == len(waits)  # one per step's wait
    expected_retries = sum(
        1
        for prompt in range(8 * 16)
        for attempt in range(1, MAX_ATTEMPTS)
        if fails(prompt, attempt - 1)
    )
    retries = [
        e
        for e in events
        if e["name"] == "rl.rollout.dispatch" and e["args"]["rl.rollout.attempt"] > 0
    ]
    assert len(retries) == expected_retries > 0


def test_goodput_is_clean(demo: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """asynctrace goodput: zero violations; per step the buckets never exceed the wall."""
    from asynctrace.cli import main

    assert main(["goodput", "--json", str(demo.out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["violations"] == []
    assert len(report["steps"]) == 8
    for step in report["steps"]:
        buckets = sum(step[f"{b}_s"] for b in ("productive", "overhead", "idle", "wasted"))
        assert buckets <= step["wall_s"] + 1e-6
        assert step["productive_s"] > 0


def test_one_session_per_prompt_group(demo: Any) -> None:
    """One record per prompt group; statuses follow the injected failures."""
    assert demo.sessions_file is not None
    records = [json.loads(line) for line in demo.sessions_file.read_text().splitlines()]
    assert len(records) == len({r["task_id"] for r in records}) == 8 * 16
    for record in records:
        prompt = record["task_id"]
        always_fails = all(fails(prompt, a) for a in range(MAX_ATTEMPTS))
        assert record["status"] == ("failed" if always_fails else "accepted"), prompt
        assert record["generate_s"] <= record["total_s"]
        assert len(record["phases"]["reward"]) == (
            MAX_ATTEMPTS if always_fails else 1 + int(fails(prompt, 0))
        )


def test_default_preset_keeps_only_its_umbrellas(tmp_path: Path) -> None:
    """With span_groups=default only the preset's spans remain; with all, client spans appear."""
    result = run_demo(tmp_path, steps=2, prompts=4, span_groups="default")
    names = {e["name"] for e in complete_events(result.trace_files[0])}
    assert names == {"rl.job", "rl.checkpointing", "rl.checkpoint.finalize"}


def test_the_example_script_runs_the_demo(tmp_path: Path) -> None:
    """``python examples/rollout_pump.py OUT``: demo, trace.json, report and goodput table."""
    import os
    import subprocess
    import sys

    script = Path(__file__).parents[2] / "examples" / "rollout_pump.py"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--steps", "2", "--prompts", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "8 rollouts in" in proc.stdout
    assert "goodput" in proc.stdout
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_the_same_seed_gives_the_same_rollouts(tmp_path: Path) -> None:
    """Rewards and attempts per prompt repeat from run to run, whatever the scheduling."""

    def outcome(result: Any) -> list[tuple[int, int, float | None, int]]:
        return sorted((r.prompt_id, r.target_step, r.reward, r.attempts) for r in result.rollouts)

    first = run_demo(tmp_path / "a", steps=2, prompts=8)
    second = run_demo(tmp_path / "b", steps=2, prompts=8, max_inflight=8)
    assert outcome(first) == outcome(second)
    assert len(outcome(first)) == 16


def _cli(*argv: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``asynctrace ARGV`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "asynctrace", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("stp", "span_groups: unknown name 'stp' in 'stp'; known presets:"),
        ("all,-step", "span_groups: '-step': there is no subtraction syntax"),
    ],
)
def test_a_bad_span_group_spec_fails_before_anything_runs(
    tmp_path: Path, spec: str, problem: str
) -> None:
    """A typo or a malformed spec is one line and status 2, before the demo runs and
    before the previous run's files are removed."""
    stale = tmp_path / "traces-driver-r0.jsonl"
    stale.write_text("previous run\n")
    done = _cli("demo", "--span-groups", spec, "--out", tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"asynctrace demo: error: {problem}")
    assert "internal error" not in line
    assert [p.name for p in tmp_path.iterdir()] == [stale.name]
    assert stale.read_text() == "previous run\n"


def test_configuration_errors_are_user_errors(tmp_path: Path) -> None:
    """--out naming a file or an unwritable place, a bad ASYNCTRACE_EXPORTERS, a bad
    --steps: one line naming the problem, status 2, nothing run."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        (("--out", afile), {}, f"out: '{afile}' is not accepted; accepted: a directory"),
        (("--out", "/proc/nope"), {}, "output_dir: '/proc/nope' is not a writable directory"),
        (
            ("--out", tmp_path / "o"),
            {"ASYNCTRACE_EXPORTERS": "bogus"},
            "ASYNCTRACE_EXPORTERS: unknown exporter 'bogus'",
        ),
        (("--steps", "abc"), {}, "argument --steps: expected an integer >= 1, got 'abc'"),
        (("--prompts", "0"), {}, "argument --prompts: expected an integer >= 1, got '0'"),
    ]
    for argv, env, problem in cases:
        done = _cli("demo", *argv, env=env)
        assert done.returncode == 2, argv
        (line,) = [line for line in done.stderr.splitlines() if not line.startswith("usage")]
        assert line.startswith(f"asynctrace demo: error: {problem}"), (argv, line)
        assert "internal error" not in line
        assert "_positive" not in line
    assert afile.read_text() == "x"
    assert not (tmp_path / "o").exists()


def test_run_demo_checks_its_arguments_first(tmp_path: Path) -> None:
    """run_demo raises ConfigurationError naming the argument, and removes nothing."""
    stale = tmp_path / "traces-driver-r0.jsonl"
    stale.write_text("previous run\n")
    with pytest.raises(ConfigurationError, match=r"^steps: 0 is not accepted; accepted: an"):
        run_demo(tmp_path, steps=0)
    with pytest.raises(ConfigurationError, match=r"^span_groups: unknown name 'stp'"):
        run_demo(tmp_path, span_groups="stp")
    assert stale.read_text() == "previous run\n"


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "asynctrace_contrib.demo"],
        [sys.executable, str(Path(__file__).parents[2] / "examples" / "rollout_pump.py")],
    ],
    ids=["module", "example"],
)
def test_demo_scripts_validate_counts(tmp_path: Path, command: list[str]) -> None:
    """``python -m asynctrace_contrib.demo`` and the example refuse a bad --steps or
    --prompts with argparse's usage error, and a file as OUT with one line."""
    for argv, problem in (
        (["--steps", "abc"], "argument --steps: expected an integer >= 1, got 'abc'"),
        (["--prompts", "0"], "argument --prompts: expected an integer >= 1, got '0'"),
    ):
        done = subprocess.run(  # in tmp_path: a parser that took --steps for OUT writes there
            [*command, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
        )
        assert done.returncode == 2
        assert done.stderr.splitlines()[-1].endswith(f"error: {problem}")
    afile = tmp_path / "afile"
    afile.write_text("x")
    done = subprocess.run(
        [*command, str(afile)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        f"error: out: '{afile}' is not accepted; accepted: a directory (it is a file)"
    )
