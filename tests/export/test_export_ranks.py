"""Which ranks export, and per-trace sampling that keeps a trace whole across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

import asynctrace as at
from asynctrace._errors import ConfigurationError
from asynctrace._ranks import parse_export_ranks
from asynctrace._settings import resolve

sys.path.insert(0, str(Path(__file__).parent.parent))
from _otlp_receiver import OtlpReceiver

CHILD = Path(__file__).parent.parent / "_rank_child.py"
LOW_64 = (1 << 64) - 1


@pytest.mark.parametrize(
    ("spec", "world", "expected"),
    [
        ("all", 4, [0, 1, 2, 3]),
        ("first", 4, [0]),
        ("last", 4, [3]),
        ("1,3", 4, [1, 3]),
        ([0, 2], 4, [0, 2]),
        (2, 4, [2]),
        ("sampled:1", 4, [0, 1, 2, 3]),
    ],
)
def test_export_ranks_choose_ranks(spec: object, world: int, expected: list[int]) -> None:
    """Each form of export_ranks picks exactly the ranks it names."""
    choice = parse_export_ranks("export_ranks", spec)
    assert [r for r in range(world) if choice.exports(rank=r, world_size=world)] == expected


def test_sampled_ranks_are_reproducible_and_never_none() -> None:
    """sampled:<rate> picks the same ranks every time, about rate of them, and at least one."""
    choice = parse_export_ranks("export_ranks", "sampled:0.25")
    picked = [r for r in range(512) if choice.exports(rank=r, world_size=512)]
    again = [r for r in range(512) if choice.exports(rank=r, world_size=512)]
    assert picked == again
    assert 0.18 * 512 < len(picked) < 0.32 * 512
    tiny = parse_export_ranks("export_ranks", "sampled:0.0001")
    assert len([r for r in range(4) if tiny.exports(rank=r, world_size=4)]) == 1


def test_local_first_reads_local_rank() -> None:
    """local_first exports where LOCAL_RANK (else SLURM_LOCALID) is 0: one rank per node."""
    config = at.TelemetryConfig(enabled=True, exporters=["memory"], export_ranks="local_first")
    for env, exporting in (
        ({"LOCAL_RANK": "0"}, True),
        ({"LOCAL_RANK": "3"}, False),
        ({"SLURM_LOCALID": "1"}, False),
        ({}, True),
    ):
        settings = resolve(config, rank=5, world_size=8, environ=env)
        assert (settings.exporting, settings.enabled) == (exporting, exporting), env
    # A digit to str.isdigit, not a number: refused, naming the launcher's variable.
    with pytest.raises(ConfigurationError, match="SLURM_LOCALID"):
        resolve(config, rank=5, world_size=8, environ={"SLURM_LOCALID": "\u00b2"})


@pytest.mark.parametrize(
    "bad", ["firsts", "sampled:0", "sampled:2", "sampled:x", [-1], [], "1,x", "\u00b2", "1,\u0663"]
)
def test_bad_export_ranks_name_key_value_and_accepted(bad: object) -> None:
    """A bad export_ranks is a ConfigurationError naming the key, the value and the forms."""
    with pytest.raises(ConfigurationError) as info:
        at.configure({"enabled": True, "exporters": ["memory"], "export_ranks": bad})
    message = str(info.value)
    assert message.startswith("export_ranks: ")
    assert repr(bad) in message
    assert "accepted: all, first, last, local_first" in message


def test_a_list_naming_no_rank_of_the_job_is_refused() -> None:
    """A list of ranks none of which is below world_size would leave every rank silent:
    a ConfigurationError naming the key, the ranks and the world size. A list that names
    some rank of the job is fine (one config for jobs of several sizes)."""
    with pytest.raises(ConfigurationError) as info:
        at.configure({"enabled": True, "exporters": ["memory"], "export_ranks": [5, 9]},
                     rank=1, world_size=2)  # fmt: skip
    message = str(info.value)
    assert message.startswith("export_ranks: [5, 9] names no rank of this job (world_size=2)")
    assert "accepted: ranks below world_size" in message
    settings = resolve(
        at.TelemetryConfig(enabled=True, exporters=["memory"], export_ranks="0,8"),
        rank=0,
        world_size=2,
        environ={},
    )
    assert settings.exporting


def test_export_ranks_from_the_environment() -> None:
    """ASYNCTRACE_EXPORT_RANKS and ASYNCTRACE_SAMPLE_RATE set the keys."""
    config = at.TelemetryConfig.from_env(
        {"ASYNCTRACE_EXPORT_RANKS": "0,8", "ASYNCTRACE_SAMPLE_RATE": "0.5"}
    )
    assert str(config.export_ranks) == "0,8"
    assert config.sample_rate == 0.5


def test_a_non_exporting_rank_is_disabled() -> None:
    """A rank export_ranks leaves out gets the inert handle and the shared disabled span."""
    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "export_ranks": "first", "span_groups": "all"},
        rank=1,
        world_size=2,
    )
    try:
        assert not telemetry.enabled
        assert not telemetry.settings.exporting
        with at.managed_span("generation", "rl.generate") as span:
            assert not span.is_recording()
    finally:
        at.shutdown()


def test_sample_rate_decides_from_the_trace_id_and_follows_the_parent() -> None:
    """sample_rate keeps a root by its trace id (the same rule everywhere); children follow."""
    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "span_groups": "all", "sample_rate": 0.25}
    )
    try:
        bound = round(0.25 * (LOW_64 + 1))
        kept = 0
        for _ in range(400):
            with at.umbrella_span("step", "rl.step") as root:
                context = root.get_span_context()
                assert root.is_recording() == ((context.trace_id & LOW_64) < bound)
                with at.managed_span("generation", "rl.generate") as child:
                    assert child.is_recording() == root.is_recording()
                kept += root.is_recording()
        assert 60 < kept < 140
        spans = telemetry.memory_exporter.get_finished_spans()  # type: ignore[union-attr]
        assert len(spans) == 2 * kept
    finally:
        at.shutdown()


def test_sample_rate_and_a_different_sampling_ratio_conflict() -> None:
    """Two different rates are refused, naming both."""
    with pytest.raises(ConfigurationError, match="sample_rate: 0.5 is not accepted with"):
        at.configure(
            {"enabled": True, "exporters": ["memory"], "sample_rate": 0.5, "sampling_ratio": 0.1}
        )


@pytest.mark.slow
def test_four_ranks_first_exports_whole_sampled_traces(tmp_path: Path) -> None:
    """Four rank processes, each handing work to a child: only rank 0 exports; whole traces."""
    traces = 120
    with OtlpReceiver("http/protobuf") as receiver:
        drivers = []
        for rank in range(4):
            env = {
                **os.environ,
                **receiver.env(timeout_s=5),
                "RANK": str(rank),
                "WORLD_SIZE": "4",
                "ASYNCTRACE_RUN_ID": "four-ranks",
                "ASYNCTRACE_PROVIDER": os.environ.get("ASYNCTRACE_PROVIDER", "fast"),
            }
            env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
            drivers.append(
                subprocess.Popen(
                    [sys.executable, str(CHILD), "driver", str(traces)],
                    env=env,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=tmp_path,
                )
            )
        reports = []
        for process in drivers:
            out, _ = process.communicate(timeout=120)
            assert process.returncode == 0
            reports.append(json.loads(out.strip().splitlines()[-1]))
        received = list(receiver.spans)
    assert [r["exporting"] for r in reports] == [True, False, False, False]
    assert all(r["worker_exit"] == 0 and r["flushed"] for r in reports)
    assert all(not r["trace_ids"] for r in reports[1:])  # disabled ranks start no trace
    assert {span.resource["asynctrace.rank"] for span in received} == {0}
    bound = round(0.25 * (LOW_64 + 1))
    started = reports[0]["trace_ids"]
    sampled = {t for t in started if int(t, 16) & LOW_64 < bound}
    by_trace: dict[str, list[object]] = defaultdict(list)
    for span in received:
        by_trace[span.trace_id].append(span)
    assert set(by_trace) == sampled  # every sampled trace arrived, no unsampled one
    assert 0 < len(sampled) < len(started)
    for trace_id, spans in by_trace.items():
        names = sorted(s.name for s in spans)  # type: ignore[attr-defined]
        ids = {s.span_id: s for s in spans}  # type: ignore[attr-defined]
        if names == ["rl.job", "rl.worker.start"]:
            expected = {"rl.worker.start": "rl.job"}
        else:
            assert names == ["rl.dispatch", "rl.step", "rl.worker.handle", "rl.worker.score"]
            expected = {
                "rl.dispatch": "rl.step",
                "rl.worker.handle": "rl.dispatch",
                "rl.worker.score": "rl.worker.handle",
            }
        by_name = {s.name: s for s in spans}  # type: ignore[attr-defined]
        for child, parent in expected.items():
            assert by_name[child].parent_span_id == by_name[parent].span_id, trace_id
        pids = {s.resource["process.pid"] for s in ids.values()}
        assert len(pids) == 2  # the trace crossed from the driver into its worker
