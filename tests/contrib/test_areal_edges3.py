"""asynctrace_contrib.areal against AReaL 1.0.4 at more edges: sessions never finalized,
numeric session ids, the ``perf_tracer:`` block given as a mapping, sessions asynctrace
evicts, a ``fileroot`` that cannot be a directory, and ``asynctrace goodput`` on AReaL's
microsecond rounding."""

from __future__ import annotations

import getpass
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from _areal_loader import (
    AnchorMissing,
    PerfTracerConfig,
    SessionTracerConfig,
    load_tool,
)
from asynctrace_contrib import areal as ours

import asynctrace as at
from asynctrace.cli import main

pytestmark = pytest.mark.usefixtures("areal_reset")


def config(root: Path, *, enabled: bool = True) -> PerfTracerConfig:
    return PerfTracerConfig(
        experiment_name="e",
        trial_name="t",
        fileroot=str(root),
        enabled=enabled,
        session_tracer=SessionTracerConfig(enabled=True, flush_threshold=1),
    )


def trial(root: Path) -> Path:
    return root / "logs" / getpass.getuser() / "e" / "t"


def records(root: Path) -> list[dict[str, Any]]:
    path = trial(root) / "session_tracer" / "sessions-r0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def in_flight_at_the_end(mod: Any, root: Path) -> list[int]:
    """Three sessions: one finalized, two still in flight when training ends (one with a
    reward that ended and a generate still running); the ids register_session gave."""
    mod.configure(config(root), rank=0)
    done, running, idle = (mod.register_session(task) for task in (0, 1, 2))
    mod.trace_session_event("mark_reward_start", session_id=running)
    mod.trace_session_event("mark_reward_end", session_id=running)
    mod.trace_session_event("mark_generate_start", session_id=running)
    mod.trace_session_event("mark_finalized", session_id=done, status="accepted")
    mod.save(force=True)
    mod.reset()  # AReaL writes its pending sessions here; asynctrace at its shutdown
    return [done, running, idle]


def test_sessions_never_finalized_have_no_end_as_in_areal(areal: Any, tmp_path: Path) -> None:
    """A session still pending when training ends is written as AReaL writes it: no
    finalized_ts, no total_s, an open phase with end_ts null and no <phase>_s for it; so
    AReaL's plot_session_trace counts only the finalized session's latency, as on AReaL's file."""
    pd = pytest.importorskip("pandas")
    try:
        plot = load_tool("plot_session_trace")
    except AnchorMissing as exc:
        pytest.skip(str(exc))
    latencies = {}
    for label, mod in (("areal", areal), ("ours", ours)):
        root = tmp_path / label
        in_flight_at_the_end(mod, root)
        by_task = {r["task_id"]: r for r in records(root)}
        assert sorted(by_task) == [0, 1, 2], label
        for task in (1, 2):
            record = by_task[task]
            assert record["status"] == "pending", label
            assert "finalized_ts" not in record, (label, record)
            assert "total_s" not in record, (label, record)
            assert "generate_s" not in record, (label, record)
        running = by_task[1]
        assert running["reward_s"] >= 0, label
        assert [e["end_ts"] for e in running["phases"]["generate"]] == [None], label
        assert running["phases"]["reward"][0]["end_ts"] is not None, label
        assert by_task[0]["total_s"] >= 0, label
        assert by_task[0]["finalized_ts"] > 0, label
        df = pd.DataFrame(records(root))
        plot._ensure_numeric(df)
        plot._maybe_compute_durations(df)
        plot._compute_offsets(df)
        # what the tool's latency scatter and its percentiles are computed from
        kept = df.dropna(subset=["finalized_ts_offset", "total_s"])
        latencies[label] = sorted(kept["task_id"].tolist())
    assert latencies == {"areal": [0], "ours": [0]}


def test_evicted_sessions_have_no_end(tmp_path: Path) -> None:
    """A session asynctrace evicts past max_pending is written pending with no
    finalized_ts or total_s, as AReaL writes a session that did not end."""
    logging.disable(logging.WARNING)
    try:
        ours.configure(config(tmp_path), rank=0, telemetry={"session_tracer": {"max_pending": 2}})
        for task in range(6):
            ours.register_session(task)
        ours.save(force=True)
        evicted = [r for r in records(tmp_path) if r["reason"] == "evicted"]
    finally:
        logging.disable(logging.NOTSET)
    assert evicted
    for record in evicted:
        assert record["status"] == "pending"
        assert "finalized_ts" not in record
        assert "total_s" not in record


def test_plain_asynctrace_keeps_its_own_record_format(tmp_path: Path) -> None:
    """asynctrace's own session tracer (not the drop-in) still writes a pending session
    with finalized_ts and total_s, and sequential ids as strings, as documented."""
    telemetry = at.configure(
        {
            "output_dir": str(tmp_path),
            "session_tracer": {"enabled": True, "ids": "sequential"},
        }
    )
    with at.task_scope(1), at.session_scope():
        pass
    assert telemetry.sessions is not None
    path = Path(telemetry.sessions.path)
    at.shutdown()
    (record,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["status"] == "pending"
    assert isinstance(record["session_id"], str)
    assert record["total_s"] >= 0
    assert record["finalized_ts"] >= record["submit_ts"]


def test_session_ids_are_json_integers_as_in_areal(areal: Any, tmp_path: Path) -> None:
    """The record's session_id is the integer register_session returned, as AReaL writes
    it (AReaL numbers from 0, asynctrace from 1: the numbers differ, not the type)."""
    for label, mod in (("areal", areal), ("ours", ours)):
        root = tmp_path / label
        ids = in_flight_at_the_end(mod, root)
        written = {r["task_id"]: r["session_id"] for r in records(root)}
        assert all(type(v) is int for v in written.values()), (label, written)
        assert [written[task] for task in (0, 1, 2)] == ids, label


@pytest.mark.parametrize(
    ("block", "named"),
    [
        ({"enable": True}, "perf_tracer: unknown key 'enable'"),
        ({"sessions_tracer": {"enabled": True}}, "did you mean 'session_tracer'?"),
        ({"session_tracer": {"enable": True}}, "perf_tracer.session_tracer: unknown key 'enable'"),
        ({"enabled": "maybe"}, "perf_tracer.enabled: 'maybe' is not a boolean"),
        ({"enabled": 2}, "perf_tracer.enabled: 2 is not a boolean"),
        ({"session_tracer": {"enabled": "sometimes"}}, "perf_tracer.session_tracer.enabled"),
    ],
)
def test_a_mapping_block_is_checked(tmp_path: Path, block: dict[str, Any], named: str) -> None:
    """A misspelled key or a value that is not a boolean raises ConfigurationError naming
    the key (and the near one), before anything is configured."""
    with pytest.raises(at.ConfigurationError, match="accepted") as caught:
        ours.configure({"fileroot": str(tmp_path), **block}, rank=0)
    assert named in str(caught.value)
    assert not ours.is_configured()
    assert at.current_telemetry() is None


def test_string_booleans_read_as_asynctrace_reads_them(tmp_path: Path) -> None:
    """``enabled: "false"`` (a value from an environment variable) is off, not on;
    ``"true"`` is on: the strings asynctrace accepts for a boolean."""
    tracer = ours.configure(
        {"fileroot": str(tmp_path), "enabled": "false", "session_tracer": {"enabled": "False"}},
        rank=0,
    )
    assert not tracer.enabled
    assert ours.get_session_tracer() is None
    assert at.current_telemetry() is None  # nothing to record: asynctrace left alone
    ours.reset()
    tracer = ours.configure(
        {"fileroot": str(tmp_path), "enabled": "true", "session_tracer": {"enabled": "on"}},
        rank=0,
    )
    assert tracer.enabled
    assert tracer.telemetry is not None
    assert tracer.telemetry.enabled
    assert isinstance(ours.register_session(0), int)  # the session tracer is on


def test_integer_booleans_read_as_areal_reads_them(tmp_path: Path) -> None:
    """A YAML ``enabled: 1`` (AReaL takes any truthy value) is on, ``0`` off."""
    tracer = ours.configure({"fileroot": str(tmp_path), "enabled": 0}, rank=0)
    assert not tracer.enabled
    ours.reset()
    tracer = ours.configure(
        {"fileroot": str(tmp_path), "enabled": 1, "session_tracer": {"enabled": 1}}, rank=0
    )
    assert tracer.enabled
    assert isinstance(ours.register_session(0), int)


def test_evicted_sessions_leave_the_task_maps(tmp_path: Path) -> None:
    """Sessions asynctrace evicts (never finalized, past max_pending) are dropped from the
    drop-in's task maps too: they stay bounded, and get_session_ids no longer lists them."""
    logging.disable(logging.WARNING)
    try:
        ours.configure(config(tmp_path), rank=0, telemetry={"session_tracer": {"max_pending": 50}})
        tracer = ours.get_session_tracer()
        assert tracer is not None
        first = ours.register_session(7)
        for task in range(8, 5008):
            ours.register_session(task)
        assert tracer.stats()["evicted"] > 4000
        assert tracer.get_session_ids(7) == []  # evicted: written, no longer pending
        assert len(tracer._task_of) <= 2100
        assert len(tracer._tasks) <= 2100
        last = ours.register_session(7)
        assert tracer.get_session_ids(7) == [last]
        assert first != last
    finally:
        logging.disable(logging.NOTSET)


def test_a_fileroot_that_is_a_file_names_fileroot(tmp_path: Path) -> None:
    """configure fails at once, naming perf_tracer.fileroot and the directory it gives,
    not an asynctrace key the user never set."""
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(at.ConfigurationError) as caught:
        ours.configure(config(afile), rank=0)
    message = str(caught.value)
    assert message.startswith(f"perf_tracer.fileroot: {str(afile)!r}")
    assert str(trial(afile)) in message
    assert not ours.is_configured()


def test_goodput_takes_areal_rounding_for_nesting(
    areal: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """AReaL floors ts and dur to µs: a compute scope that ends with its step can be
    written ending 1 µs after it. goodput still counts it in the step (clipped to it)."""
    areal.configure(
        PerfTracerConfig(
            experiment_name="e", trial_name="t", fileroot=str(tmp_path), enabled=True
        ),
        rank=0,
    )
    tracer = areal.get_tracer()
    origin = tracer._origin_ns
    # AReaL's own writer, with the times AReaL would measure: the inner scope ends
    # first; step [0.999, 11.599] µs -> ts 0 dur 10; inner [1.5, 11.5] -> ts 1 dur 10.
    tracer._record_complete("train_batch", origin + 1_500, 10_000, category="compute")
    tracer._record_complete(
        "train.step", origin + 999, 10_600, category="misc", args={"global_step": 3}
    )
    areal.save(force=True)
    areal.reset()
    path = trial(tmp_path) / "perf_tracer" / "traces-r0.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    spans = {e["name"]: e for e in events if e["ph"] == "X"}
    inner, step = spans["train_batch"], spans["train.step"]
    assert inner["ts"] + inner["dur"] == step["ts"] + step["dur"] + 1  # AReaL's rounding
    capsys.readouterr()
    code = main(["goodput", "--json", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    (row,) = json.loads(out)["steps"]
    assert row["iteration"] == 3
    assert row["productive_s"] == pytest.approx(9e-6)  # clipped to the step
    assert "under no step" not in err


def test_areal_category_is_in_args_where_cat_holds_the_bucket(areal: Any, tmp_path: Path) -> None:
    """The same scopes and instant on AReaL and on the module: ``cat`` differs (the bucket
    or group here, as documented), and ``args["areal.category"]`` is AReaL's ``cat``."""
    written: dict[str, dict[str, Any]] = {}
    for label, mod in (("areal", areal), ("ours", ours)):
        root = tmp_path / label
        mod.configure(config(root), rank=0)
        with mod.trace_scope("train.step", args={"global_step": 1}):
            with mod.trace_scope("rollout", category="scheduling"):
                mod.instant("submitted", category="instr")
            with mod.trace_scope("update", category=mod.Category.COMPUTE):
                pass
        mod.save(force=True)
        mod.reset()
        path = trial(root) / "perf_tracer" / "traces-r0.jsonl"
        events = [json.loads(line) for line in path.read_text().splitlines()]
        written[label] = {e["name"]: e for e in events if e["ph"] in ("X", "i")}
    assert set(written["ours"]) == set(written["areal"])
    for name, theirs in written["areal"].items():
        assert written["ours"][name]["args"]["areal.category"] == theirs["cat"], name
    assert written["ours"]["rollout"]["cat"] == "overhead"  # the bucket (documented)
    assert written["ours"]["submitted"]["ph"] == "i"  # an event on the open scope
