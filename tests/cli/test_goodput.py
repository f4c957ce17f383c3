"""``asynctrace goodput``: per-step buckets, goodput, invariants, unreadable inputs."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _fuzz
import pytest
from _budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace._rollup import Rollup

from ._helpers import GOLDEN, VIOLATIONS, Result, one_line, read_lines, write_lines

Run = Callable[..., Result]

# The golden inputs, by hand (µs; tests/cli/data/golden/traces-r*.jsonl):
#
# rank 0 (driver), one trace: rl.job [0.8 s, 2.7 s] (no rl.iteration)
#   rl.data_processing, overhead [0.90, 0.95] under the job, outside any step: never counts
#   rl.idle.refit_event_wait [1.2, 1.4] unbucketed collector wait under the job: never counts
#   rl.step it=1 [1.0, 2.0]                                       wall 1.0
#     rl.idle.buffer_starvation idle         [1.00, 1.10]        idle 0.10
#     rl.generate_and_push x2 (per-prompt, concurrent tasks, unbucketed, rl.iteration=1),
#       with unbucketed per-prompt children (rl.vllm.generate, rl.data_plane.put): 0
#     <script>alert(1)</script> productive   [1.55, 1.75]        productive 0.20
#     rl.policy_training productive          [1.75, 1.90]        productive 0.15
#     rl.checkpointing overhead (staging)    [1.90, 1.98]        overhead 0.08
#       rl.checkpoint.finalize, detached, unbucketed, rl.iteration=1 [1.95, 2.60]: 0
#     rl.data_plane.flush overhead, outlives the step [1.98, 2.04], clipped: overhead 0.02
#     (rank 1) rl.logprob overhead           [1.20, 1.30]        overhead 0.10
#   rl.step it=2 [2.0, 2.5]                                       wall 0.5
#     rl.idle.refit_bubble idle              [2.00, 2.05]        idle 0.05
#     rl.generate productive                 [2.05, 2.25]        productive 0.20
#     rl.wasted.failed_trajectory wasted     [2.25, 2.30]        wasted 0.05
#     rl.policy_training productive          [2.30, 2.45]        productive 0.15
#     rl.generate_and_push (per-prompt) [2.40, 2.55], ends after the step: 0
# rank 1 (worker, same pid 100 on another host): rl.policy.load_model, its own trace root
STEP1 = {
    "wall_s": 1.0,
    "productive_s": 0.20 + 0.15,
    "overhead_s": 0.08 + 0.02 + 0.10,
    "idle_s": 0.10,
    "wasted_s": 0.0,
}
STEP2 = {
    "wall_s": 0.5,
    "productive_s": 0.20 + 0.15,
    "overhead_s": 0.0,
    "idle_s": 0.05,
    "wasted_s": 0.05,
}
BUCKET_KEYS = ["productive_s", "overhead_s", "idle_s", "wasted_s"]


def _expected(step: dict[str, float]) -> dict[str, float]:
    out = dict(step)
    out["unattributed_s"] = step["wall_s"] - sum(step[k] for k in BUCKET_KEYS)
    out["goodput"] = step["productive_s"] / step["wall_s"]
    return out


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: row[k] for k in ["wall_s", *BUCKET_KEYS, "unattributed_s", "goodput"]}


def _goodput(run: Run, *inputs: object) -> dict[str, Any]:
    result = run("goodput", *inputs, "--json")
    assert result.code == 0, result.err
    document: dict[str, Any] = result.json()
    return document


def test_golden_numbers(run: Run) -> None:
    """Two ranks, concurrent tasks, per-prompt, finalize, efficiency spans: exact buckets."""
    document = _goodput(run, GOLDEN)
    steps = document["steps"]
    assert [(s["name"], s["iteration"], s["process"]) for s in steps] == [
        ("rl.step", 1, "r0"),
        ("rl.step", 2, "r0"),
    ]
    assert _numbers(steps[0]) == pytest.approx(_expected(STEP1), abs=1e-9)
    assert _numbers(steps[1]) == pytest.approx(_expected(STEP2), abs=1e-9)
    assert steps[0]["span_id"] == "000000000000b001"
    assert steps[0]["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    total = document["total"]
    assert total["steps"] == 2
    assert total["wall_s"] == pytest.approx(1.5)
    for key in BUCKET_KEYS:
        assert total[key] == pytest.approx(STEP1[key] + STEP2[key], abs=1e-9)
    assert total["unattributed_s"] == pytest.approx(0.35 + 0.05, abs=1e-9)
    assert total["goodput"] == pytest.approx(0.7 / 1.5, abs=1e-6)
    assert document["violations"] == []
    assert document["inputs"]["malformed_lines"] == 0


def test_text_output(run: Run) -> None:
    """The text table has a row per step, the total, and the invariant summary."""
    result = run("goodput", GOLDEN)
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].split()[:4] == ["process", "iter", "step", "wall"]
    assert any(line.startswith("r0") and "35.0%" in line for line in lines)
    assert any(line.startswith("r0") and "70.0%" in line for line in lines)
    assert any(line.startswith("total") and "46.7%" in line for line in lines)
    assert "invariants: ok" in result.out
    assert result.err == ""


def test_csv_output(run: Run) -> None:
    """CSV: a header, one row per step and a total row; stdout stays pure CSV."""
    result = run("goodput", GOLDEN, "--csv")
    assert result.code == 0
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert [r["process"] for r in rows] == ["r0", "r0", "total"]
    assert float(rows[0]["overhead_s"]) == pytest.approx(0.2)
    assert float(rows[2]["goodput"]) == pytest.approx(0.7 / 1.5, abs=1e-6)


def _replace(path: Path, name: str, **changes: Any) -> None:
    events = read_lines(path)
    for event in events:
        if event.get("name") == name:
            event.update(changes)
    write_lines(path, events)


def _drop(path: Path, *names: str) -> None:
    write_lines(path, [e for e in read_lines(path) if e.get("name") not in names])


def test_finalize_and_per_prompt_spans_never_count(run: Run, golden: Path) -> None:
    """A much longer finalize, or no per-prompt spans at all, leaves every number unchanged."""
    before = _goodput(run, golden)
    _replace(golden / "traces-r0.jsonl", "rl.checkpoint.finalize", dur=50_000_000)
    _drop(
        golden / "traces-r0.jsonl", "rl.generate_and_push", "rl.vllm.generate", "rl.data_plane.put"
    )
    after = _goodput(run, golden)
    assert [_numbers(s) for s in after["steps"]] == [_numbers(s) for s in before["steps"]]


def test_staging_checkpoint_counts_as_overhead(run: Run, golden: Path) -> None:
    """Twice as long a staging span adds exactly its extra 0.01 s to the step's overhead."""
    _replace(golden / "traces-r0.jsonl", "rl.checkpointing", ts=1_890_000, dur=90_000)
    _replace(golden / "traces-r0.jsonl", "rl.policy_training", dur=140_000)
    step = _goodput(run, golden)["steps"][0]
    assert step["overhead_s"] == pytest.approx(STEP1["overhead_s"] + 0.01, abs=1e-9)
    assert step["productive_s"] == pytest.approx(STEP1["productive_s"] - 0.01, abs=1e-9)


def test_order_of_lines_does_not_matter(run: Run, golden: Path) -> None:
    """Parents before children (a reversed file) give the same steps and buckets."""
    before = _goodput(run, golden)
    for path in golden.glob("traces-*.jsonl"):
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(reversed(lines)))
    after = _goodput(run, golden)
    assert len(after["steps"]) == 2
    for new, old in zip(after["steps"], before["steps"], strict=True):
        assert _numbers(new) == pytest.approx(_numbers(old), abs=1e-9)


def test_converted_json_reads_back(run: Run, tmp_path: Path) -> None:
    """The output of ``convert`` is a valid input: the same numbers come out."""
    out = tmp_path / "trace.json"
    assert run("convert", GOLDEN, "-o", out).code == 0
    before = _goodput(run, GOLDEN)
    after = _goodput(run, out)
    assert [_numbers(s) for s in after["steps"]] == [_numbers(s) for s in before["steps"]]


def test_violations(run: Run) -> None:
    """Nested buckets (also across a late child), over-wall and unknown buckets: exit 1."""
    result = run("goodput", VIOLATIONS, "--json")
    assert result.code == 1
    document = result.json()
    kinds = sorted(v["kind"] for v in document["violations"])
    assert kinds == ["nested-bucket", "nested-bucket", "over-wall", "unknown-bucket"]
    by_kind = {v["kind"]: v for v in reversed(document["violations"])}
    nested = [v for v in document["violations"] if v["kind"] == "nested-bucket"]
    assert [[s["name"] for s in v["spans"]] for v in nested] == [
        ["rl.outer", "rl.inner"],
        ["rl.stage", "rl.late"],
    ]
    assert nested[0]["spans"][0]["span_id"] == "0000000000000102"
    over = by_kind["over-wall"]
    assert {s["name"] for s in over["spans"]} == {"rl.step", "rl.gen.a", "rl.gen.b"}
    assert "1.320000 s in buckets exceed its wall time 1.000000 s" in over["message"]
    assert by_kind["unknown-bucket"]["spans"][0]["name"] == "rl.weird"
    # Inner leaves count, the outer never does, the late nested child is not added twice.
    (step,) = document["steps"]
    assert step["productive_s"] == pytest.approx(0.1 + 0.6 + 0.6)
    assert step["overhead_s"] == pytest.approx(0.02)


def test_violations_text_and_csv(run: Run) -> None:
    """Text lists every violation on stdout; CSV keeps them on stderr."""
    text = run("goodput", VIOLATIONS)
    assert text.code == 1
    assert "invariants: 4 violations" in text.out
    assert "'rl.outer' (span 0000000000000102) has bucketed descendants: 'rl.inner'" in text.out
    csv_result = run("goodput", VIOLATIONS, "--csv")
    assert csv_result.code == 1
    assert csv_result.err.count("violation [") == 4
    assert "violation" not in csv_result.out


def _span(
    name: str, ts: int, end: int, sid: str, parent: str | None, **attrs: Any
) -> dict[str, Any]:
    args = dict(attrs, trace_id="00000000000000000000000000000001", span_id=sid)
    if parent:
        args["parent_span_id"] = parent
    return {"ph": "X", "name": name, "ts": ts, "dur": end - ts, "pid": 1, "tid": 1, "args": args}


def test_step_marked_by_group_and_step_name_filter(run: Run, tmp_path: Path) -> None:
    """``asynctrace.group=step`` makes a step; --step-name narrows the candidates."""
    path = write_lines(
        tmp_path / "traces-r0.jsonl",
        [
            _span(
                "gen",
                10,
                30,
                "0000000000000003",
                "0000000000000002",
                **{"rl.bucket": "productive"},
            ),
            _span(
                "train.step",
                0,
                100,
                "0000000000000002",
                "0000000000000001",
                **{"asynctrace.group": "step"},
            ),
            _span("eval", 100, 150, "0000000000000004", "0000000000000001", **{"rl.iteration": 0}),
            _span("job", 0, 200, "0000000000000001", None),
        ],
    )
    steps = _goodput(run, path)["steps"]
    assert [(s["name"], s["iteration"], s["productive_s"]) for s in steps] == [
        ("train.step", None, 0.00002),
        ("eval", 0, 0.0),
    ]
    steps = _goodput(run, path, "--step-name", r"\.step$")["steps"]
    assert [s["name"] for s in steps] == ["train.step"]


def test_missing_parent_file_still_finds_steps(run: Run, tmp_path: Path) -> None:
    """A stamped span whose parent is in a file not given is still a step (with a note)."""
    path = write_lines(
        tmp_path / "traces-r3.jsonl",
        [
            _span(
                "gen",
                10,
                30,
                "0000000000000003",
                "0000000000000002",
                **{"rl.bucket": "productive"},
            ),
            _span("step", 0, 100, "0000000000000002", "00000000000000ff", **{"rl.iteration": 4}),
        ],
    )
    result = run("goodput", path, "--json")
    assert result.code == 0
    (step,) = result.json()["steps"]
    assert (step["iteration"], step["process"], step["parent_missing"]) == (4, "r3", True)
    assert "1 parent span referenced but not found" in result.err


def test_torn_last_line_is_skipped_and_counted(run: Run, golden: Path) -> None:
    """A torn last line: one stderr line counts it, the numbers stand, exit 0."""
    path = golden / "traces-r1.jsonl"
    with open(path, "a") as stream:
        stream.write('{"ph":"X","name":"rl.log')
    result = run("goodput", golden, "--json")
    assert result.code == 0
    assert one_line(result.err) == (
        "asynctrace goodput: skipped 1 malformed line (traces-r1.jsonl:7)"
    )
    assert result.json()["total"]["overhead_s"] == pytest.approx(0.2)


def test_empty_file(run: Run, tmp_path: Path) -> None:
    """An empty file: one line, exit 2."""
    path = tmp_path / "traces-r0.jsonl"
    path.write_text("")
    result = run("goodput", path)
    assert result.code == 2
    assert (
        one_line(result.err) == f"asynctrace goodput: error: {path}: empty file, no trace events"
    )
    assert result.out == ""


def test_directory_without_traces(run: Run, tmp_path: Path) -> None:
    """A directory with no traces-*.jsonl: one line naming it, exit 2."""
    (tmp_path / "notes.txt").write_text("hello\n")
    result = run("goodput", tmp_path)
    assert result.code == 2
    line = one_line(result.err)
    assert line.startswith(f"asynctrace goodput: error: {tmp_path}: no trace files")


def test_non_json_file(run: Run, tmp_path: Path) -> None:
    """A file that is not JSON lines: one line, exit 2."""
    path = tmp_path / "traces-r0.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary\nnot json either\n")
    result = run("goodput", path)
    assert result.code == 2
    assert "not a JSON-lines trace" in one_line(result.err)


def test_missing_inputs(run: Run, tmp_path: Path) -> None:
    """A missing path and a glob that matches nothing: one line each, exit 2."""
    missing = run("goodput", tmp_path / "nope.jsonl")
    assert missing.code == 2
    assert one_line(missing.err).endswith("nope.jsonl: no such file or directory")
    pattern = run("goodput", f"{tmp_path}/traces-*.jsonl")
    assert pattern.code == 2
    assert one_line(pattern.err).endswith("no file matches this pattern")


def test_bad_usage_is_one_line(run: Run) -> None:
    """Usage errors are one line too, exit 2; --json and --csv exclude each other."""
    result = run("goodput", GOLDEN, "--json", "--csv")
    assert result.code == 2
    assert "not allowed with argument" in one_line(result.err)
    assert one_line(run("goodput", "--step-name", "(", GOLDEN).err).endswith(
        "missing ), unterminated subpattern at position 0"
    )


def test_help_has_an_example(run: Run) -> None:
    """--help exits 0 and shows examples."""
    result = run("goodput", "--help")
    assert result.code == 0
    assert "examples:" in result.out
    assert "asynctrace goodput" in result.out


def test_python_dash_m_and_lazy_import(tmp_path: Path) -> None:
    """``python -m asynctrace`` runs the CLI; ``import asynctrace`` does not import it."""
    done = subprocess.run(
        [sys.executable, "-m", "asynctrace", "goodput", str(GOLDEN), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"]["steps"] == 2
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, asynctrace; print('asynctrace.cli' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "False"


# -- the streaming rollup against a whole-tree reference ---------------------------

_BUCKETS = [None, "productive", "overhead", "idle", "wasted"]


@st.composite
def _runs(draw: st.DrawFn, nest_buckets: bool = True) -> list[dict[str, Any]]:
    """A job with sequential steps; under each, random nested spans, all inside their parent.

    ``rl.iteration`` is inherited like ``iteration_scope``: once a span is unstamped (a
    worker-side span), so is its subtree. With *nest_buckets* false, no bucketed span
    has a bucketed descendant.
    """
    spans: list[dict[str, Any]] = []

    def add(parent: int | None, start: int, end: int, **attrs: Any) -> int:
        sid = len(spans) + 1
        spans.append({"sid": sid, "parent": parent, "start": start, "end": end, **attrs})
        return sid

    def children(
        parent: int, start: int, end: int, iteration: int | None, depth: int, bucketed: bool
    ) -> None:
        for _ in range(draw(st.integers(0, 3 if depth < 3 else 0))):
            a = draw(st.integers(start, end))
            b = draw(st.integers(a, end))
            stamped = iteration if draw(st.integers(0, 4)) else None
            bucket = None if bucketed and not nest_buckets else draw(st.sampled_from(_BUCKETS))
            sid = add(parent, a, b, bucket=bucket, iteration=stamped)
            children(sid, a, b, stamped, depth + 1, bucketed or bucket is not None)

    job = add(None, 0, 10_000, bucket=None, iteration=None)
    t = 0
    for step in range(1, draw(st.integers(1, 3)) + 1):
        a = t + draw(st.integers(0, 100))
        b = a + draw(st.integers(1, 3_000))
        t = b
        sid = add(job, a, b, bucket=None, iteration=step)
        children(sid, a, b, step, 0, False)
    return spans


def _event(span: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"trace_id": "1", "span_id": f"{span['sid']:016x}"}
    if span["parent"]:
        args["parent_span_id"] = f"{span['parent']:016x}"
    if span["bucket"]:
        args["rl.bucket"] = span["bucket"]
    if span["iteration"] is not None:
        args["rl.iteration"] = span["iteration"]
    return {
        "ph": "X",
        "name": f"s{span['sid']}",
        "ts": span["start"],
        "dur": span["end"] - span["start"],
        "args": args,
    }


def _reference(spans: list[dict[str, Any]]) -> tuple[dict[int, list[float]], int]:
    """Steps and bucket sums from the whole tree at once; and the nested-bucket count."""
    by_id = {s["sid"]: s for s in spans}
    kids: dict[int, list[dict[str, Any]]] = {}
    for s in spans:
        if s["parent"]:
            kids.setdefault(s["parent"], []).append(s)

    def subtree(sid: int) -> list[dict[str, Any]]:
        out = []
        for child in kids.get(sid, []):
            out.append(child)
            out.extend(subtree(child["sid"]))
        return out

    def has_bucketed_below(sid: int) -> bool:
        return any(d["bucket"] for d in subtree(sid))

    steps = {}
    for s in spans:
        parent = by_id.get(s["parent"]) if s["parent"] else None
        if (
            s["bucket"] is None
            and s["iteration"] is not None
            and s["end"] > s["start"]
            and (parent is None or (parent["iteration"] is None and parent["bucket"] is None))
        ):
            sums = [0.0] * 4
            for d in subtree(s["sid"]):
                if d["bucket"] and not has_bucketed_below(d["sid"]):
                    overlap = min(d["end"], s["end"]) - max(d["start"], s["start"])
                    sums[_BUCKETS.index(d["bucket"]) - 1] += max(0, overlap)
            steps[s["sid"]] = sums
    nested = sum(1 for s in spans if s["bucket"] and has_bucketed_below(s["sid"]))
    return steps, nested


def _stream(events: list[dict[str, Any]]) -> tuple[dict[int, list[float]], int]:
    rollup = Rollup()
    for event in events:
        rollup.add(event)
    result = rollup.finish()
    steps = {int(row.span_id, 16): row.sums for row in result.steps}
    nested = sum(1 for v in result.violations if v.kind == "nested-bucket")
    return steps, nested


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(60, 1_800), deadline=None)
@given(_runs())
def test_streaming_matches_the_whole_tree_in_end_order(spans: list[dict[str, Any]]) -> None:
    """Fed in end order (children first), the stream finds the reference's steps and sums."""
    depth = {}
    for s in spans:
        depth[s["sid"]] = depth[s["parent"]] + 1 if s["parent"] else 0
    ordered = sorted(spans, key=lambda s: (s["end"], -depth[s["sid"]]))
    assert _stream([_event(s) for s in ordered]) == _reference(spans)


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(40, 2_000), deadline=None)
@given(_runs(nest_buckets=False), st.randoms(use_true_random=False))
def test_streaming_does_not_depend_on_arrival_order(spans: list[dict[str, Any]], rng: Any) -> None:
    """Without nested buckets, any arrival order gives the reference's steps and sums."""
    reference, nested = _reference(spans)
    assert nested == 0  # generated without nested buckets, not filtered
    events = [_event(s) for s in spans]
    rng.shuffle(events)
    steps, _ = _stream(events)
    assert steps.keys() == reference.keys()
    for sid, sums in reference.items():
        assert steps[sid] == pytest.approx(sums)


def test_steps_without_iteration_scope_are_found(run: Run, tmp_path: Path) -> None:
    """A real run whose step umbrellas have no iteration_scope: the group marks them."""
    import time

    import asynctrace as at

    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "job,step,policy_update",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
        }
    )
    try:
        with at.umbrella_span("job", "train"):
            for _ in range(2):
                with at.umbrella_span("step", "train.step"):
                    with at.managed_span("policy_update", "optimizer"):
                        time.sleep(0.02)
                    time.sleep(0.01)
        at.instant("step", "step.marker")  # a zero-length span of group step: no step
    finally:
        telemetry.shutdown()
    document = _goodput(run, *sorted(tmp_path.glob("traces-*.jsonl")))
    steps = document["steps"]
    assert [(s["name"], s["iteration"]) for s in steps] == [("train.step", None)] * 2
    for step in steps:
        assert 0.02 <= step["productive_s"] < step["wall_s"]


def _live_run(
    tmp_path: Path, goodput: dict[str, Any], misc: int, child_end_s: float
) -> list[dict[str, Any]]:
    """Two steps, the first with a leaf and a detached overhead child; the live lines."""
    import time

    from opentelemetry import trace

    import asynctrace as at

    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "goodput": {"metrics": "none", **goodput},
        }
    )
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("test")
    second = 1_000_000_000
    t0 = time.time_ns()
    step = tracer.start_span(
        "rl.step", start_time=t0, attributes={"rl.iteration": 1, "asynctrace.group": "step"}
    )
    inside = trace.set_span_in_context(step)
    tracer.start_span(
        "gen", context=inside, start_time=t0, attributes={"rl.bucket": "productive"}
    ).end(t0 + second // 10)
    child = tracer.start_span(
        "ckpt.upload", context=inside, start_time=t0 + second // 2,
        attributes={"rl.bucket": "overhead"},
    )  # fmt: skip
    step.end(t0 + second)
    for _ in range(misc):  # other spans, outside any step, ending within the grace
        tracer.start_span("misc", start_time=t0 + second + 1000).end(t0 + second + 2000)
    child_end = t0 + int(child_end_s * second)
    if child_end_s < 2.5:
        child.end(child_end)
    step2 = tracer.start_span(
        "rl.step",
        start_time=t0 + 3 * second // 2,
        attributes={"rl.iteration": 2, "asynctrace.group": "step"},
    )
    step2.end(t0 + 5 * second // 2)
    if child_end_s >= 2.5:
        child.end(child_end)
    assert telemetry.shutdown()
    (path,) = tmp_path.glob("goodput-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for line in lines if line["kind"] == "step"]


@pytest.mark.parametrize(
    ("goodput", "misc", "child_end_s", "options"),
    [
        ({"grace_s": 5}, 0, 3.0, ["--grace", "5"]),
        ({"window": 1000}, 1500, 1.5, ["--window", "1000"]),
        ({"max_pending": 1}, 0, 1.5, ["--max-pending", "1"]),
        ({}, 1500, 1.5, []),  # the defaults are the live ones
        ({}, 0, 3.0, []),
    ],
)
def test_the_live_settings_give_the_live_numbers(
    run: Run,
    tmp_path: Path,
    goodput: dict[str, Any],
    misc: int,
    child_end_s: float,
    options: list[str],
) -> None:
    """--grace, --window and --max-pending roll the files up as the live rollup did."""
    live = _live_run(tmp_path, goodput, misc, child_end_s)
    result = run("goodput", tmp_path, "--json", *options)
    keys = ["iteration", "wall_s", "productive_s", "overhead_s", "leaves", "parent_missing"]
    offline = result.json()["steps"]
    assert [{k: s[k] for k in keys} for s in offline] == [
        {k: s[k] for k in keys} for s in sorted(live, key=lambda s: s["start_us"])
    ]
