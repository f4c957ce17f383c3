"""The core's answers to input a careless or unlucky program gives it.

Registrations that would break later ones, names that can never match, a
warnings filter set to "error", waits given odd timeouts, efficiency spans
given odd attributes, names made up per call, and steps given as numpy or
enum integers: each gets a clear error at the call that is wrong, or is
absorbed and counted, never a failure somewhere else later.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import warnings
from pathlib import Path

import pytest

import asynctrace as at
from asynctrace import Bucket, ConfigurationError, _group_audit, register_span_groups
from asynctrace.testing import capture_spans


def test_a_preset_cycle_is_refused_where_it_is_made_and_changes_nothing() -> None:
    """The registration that closes a cycle of presets raises and registers nothing;
    later registrations, and the presets' listing, keep working."""
    register_span_groups("edges_lib1", {}, presets={"edges_pa": ["edges_pb"]})
    with pytest.raises(ConfigurationError, match="preset cycle"):
        register_span_groups(
            "edges_lib2", {"edges_g2": Bucket.OVERHEAD}, presets={"edges_pb": ["edges_pa"]}
        )
    assert "edges_g2" not in at.registered_span_groups()
    with pytest.raises(ConfigurationError, match="preset cycle edges_self -> edges_self"):
        register_span_groups("edges_lib3", {}, presets={"edges_self": ["edges_self"]})
    register_span_groups("edges_lib4", {"edges_unrelated": Bucket.PRODUCTIVE})
    assert "edges_pa" in at.registered_presets()
    assert "edges_unrelated" in at.registered_span_groups()


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"Edges_Tokenize": Bucket.OVERHEAD}, "register 'edges_tokenize'"),
        ({" edges_pad": Bucket.OVERHEAD}, "register 'edges_pad'"),
        (["edges_a", "edges_b"], "is not a group"),
        ([("edges_a", Bucket.IDLE, "x")], "is not a group"),
    ],
)
def test_a_group_that_could_never_match_or_is_malformed_is_refused(
    groups: object, message: str
) -> None:
    """Span helpers match names exactly: a name not in normal form would register and
    then never be recorded; items of the wrong shape get a clear error, not a raw one."""
    with pytest.raises(ConfigurationError, match=message):
        register_span_groups("edges_names", groups)  # type: ignore[arg-type]


def test_preset_members_must_be_a_list() -> None:
    """A preset whose members are not a list of names is refused with its name."""
    with pytest.raises(ConfigurationError, match="edges_p.*members must be a list"):
        register_span_groups("edges_members", {}, presets={"edges_p": None})  # type: ignore[dict-item]


def test_a_group_asked_for_and_never_registered_is_reported_at_shutdown(
    tmp_path: Path, lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    """However short the run (the audit window never closed), ``shutdown()`` names a
    group that spans were asked for and that no library registered."""
    _group_audit.reset_window()  # the worker's window may have closed in earlier tests
    caplog.set_level(logging.WARNING, logger="asynctrace")
    telemetry = at.configure(
        {"enabled": True, "span_groups": "all", "output_dir": str(tmp_path), "exporters": []}
    )
    with at.managed_span("edges_optimiser_typo", "step"):
        pass
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        telemetry.shutdown()
    assert any("'edges_optimiser_typo'" in r.getMessage() for r in caplog.records)


def test_configure_with_warnings_as_errors_installs_whole(tmp_path: Path) -> None:
    """A pending group's warning, under a filter that makes warnings errors, does not
    leave ``configure()`` half done: it returns, owns its pipeline, and shuts down."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        telemetry = at.configure(
            {
                "enabled": True,
                "span_groups": "default,edges_pending_judge",
                "output_dir": str(tmp_path),
                "exporters": ["memory"],
            }
        )
    try:
        assert at.current_telemetry() is telemetry
        with at.umbrella_span("job", "job"):
            pass
    finally:
        assert telemetry.shutdown()
    assert [s.name for s in telemetry.memory_exporter.get_finished_spans()] == ["job"]


def test_wait_until_times_its_first_check_too() -> None:
    """A slow async predicate is within the timeout: the wait raises TimeoutError."""

    async def slow() -> bool:
        await asyncio.sleep(0.3)
        return True

    async def main() -> None:
        await at.wait_until(slow, timeout_s=0.01)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(main())
    assert time.monotonic() - started < 0.25


@pytest.mark.parametrize("bad", [float("nan"), "1", True, -1.0])
def test_wait_until_refuses_a_bad_timeout(bad: object) -> None:
    """``timeout_s`` is seconds >= 0 or None: anything else is a ConfigurationError
    naming it, before any span (``True`` is not one second)."""

    async def main() -> None:
        await at.wait_until(lambda: False, timeout_s=bad)  # type: ignore[arg-type]

    with capture_spans("all") as spans, pytest.raises(ConfigurationError, match="timeout_s"):
        asyncio.run(main())
    assert spans.spans == []


@pytest.mark.parametrize("bad", ["0.01", None])
def test_wait_until_refuses_an_interval_that_is_not_a_number(bad: object) -> None:
    """``interval_s`` that is not a number is a ConfigurationError, not a TypeError."""

    async def main() -> None:
        await at.wait_until(lambda: False, interval_s=bad)  # type: ignore[arg-type]

    with pytest.raises(ConfigurationError, match="interval_s"):
        asyncio.run(main())


@pytest.mark.parametrize("bad", ["abc", 5])
def test_efficiency_span_with_bad_attributes_never_raises(bad: object, lenient: None) -> None:
    """Attributes that are not a mapping cost the span, not the program."""
    with capture_spans("all") as spans, at.efficiency_span("idle/edges", attributes=bad):  # type: ignore[arg-type]
        pass
    assert spans.spans == []


def test_names_made_up_per_call_neither_grow_memory_nor_flood_the_log(
    lenient: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Categories made up per call are cached within a bound; a failure reported from
    one call site is logged once, whatever name or category each call gave."""
    from asynctrace import _efficiency_table

    caplog.set_level(logging.WARNING, logger="asynctrace")
    with capture_spans("all"):
        for i in range(5000):
            with at.efficiency_span(f"idle/edges_{i}"):
                pass
        assert len(_efficiency_table._cache) <= _efficiency_table._CACHE_MAX
        for i in range(200):
            with at.efficiency_span(f"/bad_{i}"):
                pass
    assert sum("efficiency" in r.getMessage() for r in caplog.records) == 1


class Step(enum.IntEnum):
    """A step numbered by an enum."""

    FIRST = 1


def test_steps_may_be_any_integer_type() -> None:
    """numpy integers and ``IntEnum`` members are steps, stamped as plain ints; a value no
    64-bit attribute holds is refused with the argument's name."""
    np = pytest.importorskip("numpy")
    with capture_spans("all") as spans:
        with at.iteration_scope(np.int64(3)):  # type: ignore[arg-type]
            assert at.current_iteration() == 3
            assert type(at.current_iteration()) is int
            with at.dispatch_scope(attempt=np.int64(0), target_step=np.int32(5)):  # type: ignore[arg-type]
                pass
        with at.iteration_scope(Step.FIRST), at.managed_span("generation", "g"):
            assert type(at.current_iteration()) is int
    dispatch = spans.by_name("rl.rollout.dispatch")[0]
    assert dispatch.attributes["rl.target_step"] == 5
    assert type(dispatch.attributes["rl.target_step"]) is int
    assert type(dispatch.attributes["rl.rollout.attempt"]) is int
    assert type(spans.by_name("g")[0].attributes["rl.iteration"]) is int
    with pytest.raises(ConfigurationError, match=r"iteration_scope\(step\)"):
        at.iteration_scope(2**64)
    with pytest.raises(ConfigurationError, match=r"dispatch_scope\(attempt\)"):
        at.dispatch_scope(attempt=-1)
    with pytest.raises(ConfigurationError, match=r"dispatch_scope\(target_step\)"):
        at.dispatch_scope(target_step="5")  # type: ignore[arg-type]


def test_what_asynctrace_logs_is_redacted(lenient: None, caplog: pytest.LogCaptureFixture) -> None:
    """A failure logged with the user's exception in its traceback (a hook that raised,
    an exception being handled) names no token, in the message or the traceback."""
    from asynctrace._errors import report_internal_error

    caplog.set_level(logging.WARNING, logger="asynctrace")
    try:
        raise ValueError("GET http://user:hunter2@h/x?token=abc123")
    except ValueError as exc:
        report_internal_error(("edges", "log"), exc)
    logging.getLogger("asynctrace").warning("calling %s", "http://h/?api_key=sk-SECRET9")
    text = caplog.text
    assert "hunter2" not in text
    assert "abc123" not in text
    assert "sk-SECRET9" not in text
    assert "token=REDACTED" in text
    assert "Traceback" in text  # the traceback is kept, redacted


def test_a_track_names_its_loops_thread_redacted(tmp_path: Path) -> None:
    """A task's track names the thread of its loop: that name is redacted like the task's."""
    import json
    import threading

    telemetry = at.configure({"enabled": True, "span_groups": "all", "output_dir": str(tmp_path)})

    ended, written = threading.Event(), threading.Event()

    async def work() -> None:
        with at.managed_span("generation", "g"):
            pass
        ended.set()
        # The loop runs on (its thread known) while the writer names the track.
        await asyncio.get_running_loop().run_in_executor(None, written.wait, 10)

    def run() -> None:
        asyncio.run(work())

    thread = threading.Thread(target=run, name="loop for http://svc:hunter2@h/?token=abc123")
    thread.start()
    try:
        assert ended.wait(10)
        assert telemetry.flush(10)
    finally:
        written.set()
        thread.join()
    telemetry.shutdown()
    names = [
        event["args"]["name"]
        for path in tmp_path.glob("traces-*.jsonl")
        for event in map(json.loads, path.read_text().splitlines())
        if event.get("name") == "thread_name"
    ]
    assert any("loop for http://h/?token=REDACTED" in name for name in names), names
    assert not any("hunter2" in name or "abc123" in name for name in names)


def test_a_relative_output_dir_stays_where_it_was_when_the_program_changes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The output directory is fixed at configuration: after ``os.chdir`` (as Hydra's
    launcher does) spans go on into the same file, nothing is counted lost."""
    import os

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "output_dir": "traces",
            "session_tracer": {"enabled": True},
        }
    )
    with at.managed_span("generation", "before"):
        pass
    assert telemetry.flush(10)
    os.chdir(tmp_path / "b")
    with at.managed_span("generation", "after"):
        pass
    assert telemetry.flush(10)
    stats = telemetry.stats()
    telemetry.shutdown()
    assert sum(s.lost for s in stats.values()) == 0
    assert not (tmp_path / "b" / "traces").exists()
    (trace,) = (tmp_path / "a" / "traces").glob("traces-*.jsonl")
    text = trace.read_text()
    assert '"before"' in text
    assert '"after"' in text
