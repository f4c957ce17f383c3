"""The chrome file as its readers see it: no line they skip, no track named twice."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from opentelemetry import trace

import asynctrace as at
from asynctrace._jsonl import MAX_LINE_BYTES
from asynctrace.export import read_chrome_trace


def _convert(directory: Path) -> list[dict[str, Any]]:
    out = directory / "converted.json"
    subprocess.run(
        [sys.executable, "-m", "asynctrace", "convert", str(directory), "-o", str(out)],
        check=True,
        capture_output=True,
    )
    events: list[dict[str, Any]] = json.loads(out.read_text())["traceEvents"]
    return events


def test_a_span_whose_line_is_over_64_mib_is_cut_and_read_back(tmp_path: Path) -> None:
    """A 65 MiB attribute: the span is cut to the readers' limit, its child's parent found."""
    telemetry = at.configure(
        {"enabled": True, "exporters": ["chrome"], "span_groups": "all", "output_dir": tmp_path}
    )
    tracer = trace.get_tracer("edges4")
    try:
        with tracer.start_as_current_span("huge", attributes={"blob": "y" * (65 << 20), "k": 1}):
            with tracer.start_as_current_span("child"):
                pass
        assert telemetry.flush()
        stats = telemetry.stats()["chrome"]
        assert (stats.exported, stats.failed, stats.shortened) == (2, 0, 1)
    finally:
        telemetry.shutdown()
    (path,) = tmp_path.glob("traces*.jsonl")
    with path.open("rb") as lines:
        assert max(len(line) for line in lines) <= MAX_LINE_BYTES
    read = read_chrome_trace(path)
    assert read.skipped == 0
    spans = {e["name"]: e for e in read.complete_events()}
    assert set(spans) == {"huge", "child"}
    root = spans["huge"]["args"]
    assert spans["child"]["args"]["parent_span_id"] == root["span_id"]
    assert root["k"] == 1
    blob = root["blob"]
    assert blob.startswith("yyyy")
    assert blob.endswith(" chars>")
    dropped = int(blob.rsplit("...<truncated ", 1)[1].split()[0])
    assert len(blob) < (65 << 20)
    assert blob.count("y") + dropped == 65 << 20


def test_a_reconfiguration_appending_to_the_same_file_names_each_track_once(
    tmp_path: Path,
) -> None:
    """Two configurations, one run id: their writers share the file and pid, not track ids."""
    config = {
        "enabled": True,
        "exporters": ["chrome"],
        "span_groups": "all",
        "output_dir": tmp_path,
        "run_id": "run1",
    }
    tracer = trace.get_tracer("edges4")
    first = at.configure(config)
    with tracer.start_as_current_span("first-outer"):
        pass
    second = at.configure(dict(config, service_name="svc"))
    assert first is not second

    async def job(i: int) -> None:
        with tracer.start_as_current_span(f"second-task{i}"):
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(job(i) for i in range(3)))

    try:
        with tracer.start_as_current_span("second-outer"):
            asyncio.run(main())
    finally:
        second.shutdown()
    (path,) = tmp_path.rglob("traces*.jsonl")
    names: defaultdict[tuple[int, int], set[str]] = defaultdict(set)
    for event in read_chrome_trace(path).events:
        if event.get("name") == "thread_name":
            names[(event["pid"], event["tid"])].add(event["args"]["name"])
    assert all(len(named) == 1 for named in names.values()), names
    converted = _convert(path.parent)
    tracks = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in converted
        if e.get("name") == "thread_name"
    }
    placed = {e["name"]: tracks[(e["pid"], e["tid"])] for e in converted if e.get("ph") == "X"}
    assert placed["first-outer"].startswith("thread: MainThread"), placed
    assert placed["second-outer"].startswith("thread: MainThread"), placed
    for i in range(3):
        assert placed[f"second-task{i}"].startswith("task: "), placed


def test_the_commands_read_every_line_the_writers_write() -> None:
    """The command line's reader keeps its own limit (it imports no private module):
    it must be the one the writers keep to."""
    from asynctrace.cli import _records

    assert _records._MAX_LINE == MAX_LINE_BYTES
