"""The chrome file's edges: names after a full disk or a new file, values no encoder takes."""

from __future__ import annotations

import asyncio
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _tmpfs import mounted_tmpfs

import asynctrace
from asynctrace.export import read_chrome_trace
from asynctrace.export._tracks import TrackAssigner

PROVIDERS = ["fast", "sdk"]


def start(out: Path, provider: str, **extra: Any) -> Any:
    """A configured handle writing chrome lines (and memory spans) under *out*."""
    return asynctrace.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome", "memory"],
            "output_dir": str(out),
            "provider": provider,
            **extra,
        }
    )


def track_names(events: list[dict[str, Any]]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}


def spans_by_name(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in events if e["ph"] == "X"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted on a fresh directory (root only; else the test is skipped)."""
    with mounted_tmpfs(tmp_path / "disk", "1m") as mount:
        yield mount


def fill(disk: Path) -> Path:
    """Take every block left on *disk*; the file that holds them."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("provider", PROVIDERS)
def test_names_a_full_disk_refused_are_written_once_space_returns(
    small_disk: Path, provider: str
) -> None:
    """The process's and the tasks' names, refused by a full disk, precede the later spans."""
    filler = fill(small_disk)
    telemetry = start(small_disk / "run", provider)  # the process's names: refused
    tracer = asynctrace.get_tracer()

    async def worker(k: int, freed: asyncio.Event) -> None:
        with tracer.start_as_current_span(f"w{k}-first"):  # its track's name: refused
            pass
        await freed.wait()
        with tracer.start_as_current_span(f"w{k}-second"):
            pass

    async def main() -> None:
        freed = asyncio.Event()
        tasks = [asyncio.create_task(worker(k, freed), name=f"worker-{k}") for k in range(3)]
        await asyncio.sleep(0.01)
        assert await asyncio.to_thread(telemetry.flush, 5.0) is False
        filler.unlink()
        freed.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert telemetry.flush(5.0)
    path = telemetry.trace_file
    stats = telemetry.stats()["chrome"]
    telemetry.shutdown()

    events = read_chrome_trace(path).events
    spans = spans_by_name(events)
    assert sorted(spans) == ["w0-second", "w1-second", "w2-second"]
    assert (stats.exported, stats.failed) == (3, 3)
    names = track_names(events)
    assert {names.get(e["tid"]) for e in spans.values()} == {
        f"task: worker-{k} [MainThread]" for k in range(3)
    }
    assert [e["name"] for e in events if e["ph"] == "M"][:3] == [
        "process_name",
        "process_sort_index",
        "process_labels",
    ]
    first = {e["tid"]: i for i, e in reversed(list(enumerate(events))) if e["ph"] == "X"}
    named_at = {e["tid"]: i for i, e in enumerate(events) if e.get("name") == "thread_name"}
    assert all(named_at[tid] < at for tid, at in first.items())  # a name precedes its spans


@pytest.mark.parametrize("provider", PROVIDERS)
def test_overflow_tracks_are_named_again_in_a_file_made_again(
    tmp_path: Path, provider: str
) -> None:
    """rm -rf of the output directory: the new file names the overflow tracks too."""
    telemetry = start(tmp_path / "run", provider)
    tracer = asynctrace.get_tracer()
    path = telemetry.trace_file
    a, b = tracer.start_span("a"), tracer.start_span("b")
    a.end()
    b.end()  # overlaps a without nesting: an overflow track
    assert telemetry.flush(5.0)
    shutil.rmtree(path.parent)
    a, b = tracer.start_span("a2"), tracer.start_span("b2")
    a.end()
    b.end()  # the same two tracks
    assert telemetry.flush(5.0)
    stats = telemetry.stats()["chrome"]
    telemetry.shutdown()

    events = read_chrome_trace(path).events
    spans = spans_by_name(events)
    names = track_names(events)
    assert stats.lost == 2
    assert names[spans["a2"]["tid"]] == "thread: MainThread"
    assert names[spans["b2"]["tid"]] == "thread: MainThread (overflow 1)"
    assert any(e.get("name") == "process_name" for e in events)


def test_every_live_track_has_a_name_to_write_again() -> None:
    """Primary tracks, their overflow tracks and the late spans' overflow tracks."""
    tracks = TrackAssigner(iter(range(100, 200)).__next__, lambda tid, name: None)
    tracks.open(1, "task: a")
    tracks.open(2, "task: b")
    assert tracks.place(1, 0, 10) == 1
    assert tracks.place(1, 5, 20) == 100
    tracks.retire(2)
    assert tracks.place(2, 0, 5) == 101  # a span of a track already retired
    assert tracks.place(2, 3, 8) == 102
    assert tracks.names() == [
        (1, "task: a"),
        (100, "task: a (overflow 1)"),
        (101, "late spans (overflow 1)"),
        (102, "late spans (overflow 2)"),
    ]


def test_a_file_truncated_in_place_gets_its_names_again_and_the_loss_counted(
    tmp_path: Path,
) -> None:
    """logrotate's copytruncate: the names are written again; the span it held is lost."""
    telemetry = start(tmp_path / "run", "fast")
    tracer = asynctrace.get_tracer()
    path = telemetry.trace_file
    with tracer.start_as_current_span("before"):
        pass
    assert telemetry.flush(5.0)
    shutil.copy(path, f"{path}.1")
    os.truncate(path, 0)
    with tracer.start_as_current_span("after"):
        pass
    assert telemetry.flush(5.0)
    stats = telemetry.stats()["chrome"]
    telemetry.shutdown()

    events = read_chrome_trace(path).events
    assert [e["name"] for e in events if e["ph"] == "X"] == ["after"]
    assert any(e.get("name") == "process_name" for e in events)
    assert track_names(events)[spans_by_name(events)["after"]["tid"]] == "thread: MainThread"
    assert (stats.exported, stats.lost) == (2, 1)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_non_finite_floats_inside_a_mapping_are_written_as_text(
    tmp_path: Path, provider: str
) -> None:
    """NaN and infinity in a mapping value (at any depth): their text, never null."""
    telemetry = start(tmp_path / "run", provider)
    tracer = asynctrace.get_tracer()
    with tracer.start_as_current_span("s") as span:
        span.set_attribute("v", {"a": math.nan, "b": [1, {"c": -math.inf}]})  # type: ignore[arg-type]
    assert telemetry.flush(5.0)
    path = telemetry.trace_file
    telemetry.shutdown()
    args = spans_by_name(read_chrome_trace(path).events)["s"]["args"]
    assert args["v"] == {"a": "nan", "b": [1, {"c": "-inf"}]}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_max_attribute_length_cuts_strings_inside_mappings_as_the_sdk_does(
    tmp_path: Path, provider: str
) -> None:
    """The chrome file holds what the in-memory exporter holds: strings cut at any depth."""
    telemetry = start(tmp_path / "run", provider, span_limits={"max_attribute_length": 5})
    tracer = asynctrace.get_tracer()
    with tracer.start_as_current_span("s") as span:
        span.set_attribute("d", {"k": "abcdefghij", "n": ["abcdefghij"]})  # type: ignore[arg-type]
        span.set_attribute("l", ["abcdefghij"])
        span.add_event("e", {"d": {"k": "abcdefghij"}})  # type: ignore[dict-item]
    assert telemetry.flush(5.0)
    path = telemetry.trace_file
    memory = telemetry.memory_exporter.get_finished_spans()[0]
    telemetry.shutdown()

    assert memory.attributes["d"] == {"k": "abcde", "n": ("abcde",)}
    events = read_chrome_trace(path).events
    args = spans_by_name(events)["s"]["args"]
    assert (args["d"], args["l"]) == ({"k": "abcde", "n": ["abcde"]}, ["abcde"])
    [event] = [e for e in events if e["ph"] == "i"]
    assert event["args"]["d"] == {"k": "abcde"}


class BadStr:
    """An attribute value whose text cannot be made."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_value_no_encoder_takes_is_left_out_alone_and_counted(
    tmp_path: Path, provider: str
) -> None:
    """An int too long for text, in a span and in a span event: that value only is lost."""
    telemetry = start(tmp_path / "run", provider)
    tracer = asynctrace.get_tracer()
    with tracer.start_as_current_span("huge") as span:
        span.set_attribute("ok", 1)
        span.set_attribute("n", 10**5000)
    with tracer.start_as_current_span("event") as span:
        span.add_event("ev", {"n": 10**5000, "ok": "yes"})
    with tracer.start_as_current_span("fine"):
        pass
    assert telemetry.flush(5.0)
    path = telemetry.trace_file
    stats = telemetry.stats()["chrome"]
    telemetry.shutdown()

    events = read_chrome_trace(path).events
    spans = spans_by_name(events)
    assert sorted(spans) == ["event", "fine", "huge"]
    huge = spans["huge"]["args"]
    assert "n" not in huge
    assert (huge["ok"], huge["otel.dropped_attributes_count"]) == (1, 1)
    assert "otel.dropped_attributes_count" not in spans["fine"]["args"]
    [event] = [e for e in events if e["ph"] == "i"]
    assert event["name"] == "ev"
    assert event["tid"] == spans["event"]["tid"]
    assert "n" not in event["args"]
    assert (event["args"]["ok"], event["args"]["otel.dropped_attributes_count"]) == ("yes", 1)
    assert (stats.exported, stats.failed) == (3, 0)


def test_a_value_whose_text_raises_is_left_out_alone_and_counted(tmp_path: Path) -> None:
    """The fast provider keeps any object: one whose str() raises costs only itself."""
    telemetry = start(tmp_path / "run", "fast")
    tracer = asynctrace.get_tracer()
    with tracer.start_as_current_span("bad") as span:
        span.set_attribute("ok", 1)
        span.set_attribute("b", [BadStr()])  # type: ignore[list-item]
        span.set_attribute("c", BadStr())  # type: ignore[arg-type]
    assert telemetry.flush(5.0)
    path = telemetry.trace_file
    stats = telemetry.stats()["chrome"]
    telemetry.shutdown()

    args = spans_by_name(read_chrome_trace(path).events)["bad"]["args"]
    assert "b" not in args
    assert "c" not in args
    assert (args["ok"], args["otel.dropped_attributes_count"]) == (1, 2)
    assert (stats.exported, stats.failed) == (1, 0)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_ids_in_args_are_always_the_spans_own(tmp_path: Path, provider: str) -> None:
    """Attributes named after the ids do not replace them in the file; memory keeps them."""
    telemetry = start(tmp_path / "run", provider)
    tracer = asynctrace.get_tracer()
    with tracer.start_as_current_span("root") as root:
        root.set_attribute("parent_span_id", "upstream-7")
        with tracer.start_as_current_span("child") as child:
            child.set_attribute("trace_id", "app-trace-123")
            child.set_attribute("span_id", "app-span-9")
    assert telemetry.flush(5.0)
    path = telemetry.trace_file
    memory = {s.name: s for s in telemetry.memory_exporter.get_finished_spans()}
    telemetry.shutdown()

    spans = spans_by_name(read_chrome_trace(path).events)
    context = memory["child"].get_span_context()
    assert context is not None
    assert spans["child"]["args"]["trace_id"] == f"{context.trace_id:032x}"
    assert spans["child"]["args"]["span_id"] == f"{context.span_id:016x}"
    assert spans["child"]["args"]["parent_span_id"] == spans["root"]["args"]["span_id"]
    assert "parent_span_id" not in spans["root"]["args"]
    assert memory["child"].attributes["trace_id"] == "app-trace-123"
