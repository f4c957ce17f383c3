"""``asynctrace goodput`` when the driver's job span is missing: every rank's step kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._helpers import Result

Run = Callable[..., Result]
TRACE = "0" * 31 + "7"
JOB = "00000000000000aa"  # the driver's job span: its file is not among the inputs


def _event(name: str, sid: str, parent: str, ts: int, dur: int, rank: int, **args: Any) -> str:
    fields = {"trace_id": TRACE, "span_id": sid, "parent_span_id": parent, **args}
    event = {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": rank, "tid": 1, "args": fields}
    return json.dumps(event) + "\n"


def test_steps_of_one_iteration_under_a_missing_job_span_are_each_reported(
    tmp_path: Path, run: Run
) -> None:
    """Two ranks' overlapping steps of iteration 1 under the job span: two steps, each
    with its productive leaf (neither folded away as if it were a detached span)."""
    for rank, offset in ((1, 0), (2, 200_000)):
        step = f"{rank}00000000000000"
        lines = [
            _event(
                "rl.generate",
                f"{rank}00000000000001",
                step,
                1_000_000 + offset,
                700_000,
                rank,
                **{"rl.iteration": 1, "rl.bucket": "productive"},
            ),
            _event(
                "worker.step",
                step,
                JOB,
                1_000_000 + offset,
                1_000_000,
                rank,
                **{"rl.iteration": 1},
            ),
        ]
        (tmp_path / f"traces-r{rank}.jsonl").write_text("".join(lines))
    result = run("goodput", tmp_path, "--json")
    assert result.code == 0, result.err
    document = result.json()
    steps = document["steps"]
    assert [(s["name"], s["productive_s"], s["parent_missing"]) for s in steps] == [
        ("worker.step", 0.7, True),
        ("worker.step", 0.7, True),
    ]
    assert document["inputs"]["abandoned"] == 1
    assert document["inputs"]["abandoned_leaves"] == 0


def test_per_prompt_spans_of_a_step_never_written_are_one_step(tmp_path: Path, run: Run) -> None:
    """A killed run: the last iteration's step span was never written, its per-prompt
    spans (one rank's file) overlap under it: one step with its parent missing, not one
    per prompt."""
    lines = []
    for i in range(8):
        prompt = f"10000000000001{i:02x}"
        lines.append(
            _event(
                "rl.generate",
                f"10000000000002{i:02x}",
                prompt,
                1000 * i + 10,
                400_000,
                1,
                **{"rl.iteration": 1, "rl.bucket": "productive"},
            )
        )
        lines.append(
            _event(
                "rl.rollout.prompt",
                prompt,
                "1000000000000000",  # rank 1's step span: not in its file
                1000 * i,
                500_000,
                1,
                **{"rl.iteration": 1},
            )
        )
    lines.sort(key=lambda line: json.loads(line)["ts"] + json.loads(line)["dur"])
    (tmp_path / "traces-r1.jsonl").write_text("".join(lines))
    result = run("goodput", tmp_path, "--json")
    # The 8 generations run at once: more productive seconds than wall, as under a
    # step span that was written (exit 1, an over-wall violation).
    assert result.code == 1, result.err
    steps = result.json()["steps"]
    assert [(s["name"], s["wall_s"], s["productive_s"], s["parent_missing"]) for s in steps] == [
        ("rl.rollout.prompt", 0.507, 3.2, True)
    ]
    assert "over-wall" in result.out


def test_per_prompt_spans_of_different_lengths_are_one_step(tmp_path: Path, run: Run) -> None:
    """The per-prompt spans of a step never written end in another order than they
    start (generations of different lengths): one step still, the earliest prompt's."""
    lines = []
    for i, (start, dur) in enumerate([(0, 900_000), (1000, 100_000), (2000, 300_000)]):
        prompt = f"10000000000001{i:02x}"
        leaf = {"rl.iteration": 1, "rl.bucket": "productive"}
        lines.append(
            _event(
                "rl.generate", f"10000000000002{i:02x}", prompt, start + 10, dur - 20, 1, **leaf
            ),
        )
        lines.append(
            _event(
                "rl.rollout.prompt",
                prompt,
                "1000000000000000",  # rank 1's step span: not in its file
                start,
                dur,
                1,
                **{"rl.iteration": 1},
            )
        )
    lines.sort(key=lambda line: json.loads(line)["ts"] + json.loads(line)["dur"])
    (tmp_path / "traces-r1.jsonl").write_text("".join(lines))
    result = run("goodput", tmp_path, "--json")
    assert result.code == 1, result.err  # the generations overlap: over-wall, as above
    steps = result.json()["steps"]
    assert [(s["name"], s["wall_s"], s["parent_missing"]) for s in steps] == [
        ("rl.rollout.prompt", 0.9, True)
    ]


def test_json_inputs_count_the_stamped_spans_dropped(tmp_path: Path, run: Run) -> None:
    """Stamped spans of given-up waits dropped past --max-pending: counted in --json."""
    lines = [
        _event(
            "rl.rollout.prompt",
            f"20000000000{i:05x}",
            f"30000000000{i:05x}",  # never in the inputs
            i * 1000,
            500,
            1,
            **{"rl.iteration": i},
        )
        for i in range(50)
    ]
    (tmp_path / "traces-r1.jsonl").write_text("".join(lines))
    result = run("goodput", tmp_path, "--json", "--max-pending", "10")
    assert result.code == 0, result.err
    inputs = result.json()["inputs"]
    assert (inputs["evicted"], inputs["dropped_stubs"]) == (40, 30)
