"""Span and trace ids: unique across seeded processes and across ``os.fork()``.

Every rank of a training job calls ``random.seed(0)``; the OpenTelemetry
SDK's default id generator draws from that global generator, so every rank
repeats the same ids. asynctrace's generator (``asynctrace._fast.IDS``) is
seeded from the operating system, independent of ``random``, and reseeded in
a forked child. These tests run real pipelines in real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from _forks import exit_code

import asynctrace
from asynctrace._fast import IDS
from asynctrace.export import read_chrome_trace

CHILD = Path(__file__).parent / "_ids_child.py"
PROCESSES = 8
CHILDREN = 4  # _ids_child.py: each root has this many children


def _run_children(mode: str, count: int, tmp_path: Path) -> list[tuple[bytes, bytes]]:
    """Run PROCESSES children of *mode* (as many at once as there are cores); their ids."""
    outs = [tmp_path / f"{mode}-{i}" for i in range(PROCESSES)]

    def run(out: Path) -> None:
        done = subprocess.run(
            [sys.executable, str(CHILD), mode, str(count), str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(run, outs))
    return [(Path(f"{out}.span").read_bytes(), Path(f"{out}.trace").read_bytes()) for out in outs]


def _ids(blobs: Sequence[bytes], size: int) -> list[bytes]:
    """The ids of *size* bytes packed in *blobs*, in order."""
    return [blob[i : i + size] for blob in blobs for i in range(0, len(blob), size)]


def _distinct(ids: Sequence[bytes]) -> int:
    """How many different ids there are."""
    return len(set(ids))


@pytest.mark.slow
def test_fast_ids_never_collide_across_seeded_processes(tmp_path: Path) -> None:
    """10^6 spans from 8 processes that all called random.seed(0): no id is repeated."""
    per_process = 125_000
    results = _run_children("fast", per_process, tmp_path)
    span_ids = _ids([spans for spans, _ in results], 8)
    trace_ids = _ids([traces for _, traces in results], 16)
    assert len(span_ids) == PROCESSES * per_process == 10**6
    assert len(trace_ids) == PROCESSES * per_process // (1 + CHILDREN)
    assert _distinct(span_ids) == len(span_ids), "span ids repeated"
    assert _distinct(trace_ids) == len(trace_ids), "root trace ids repeated"
    assert bytes(8) not in set(span_ids)
    assert bytes(16) not in set(trace_ids)


@pytest.mark.slow
def test_sdk_default_generator_repeats_ids_under_the_seed(tmp_path: Path) -> None:
    """Baseline: the SDK's own generator gives every seeded process the same ids.

    The same check as above, on a bare SDK provider: it finds the collisions,
    so the test above would catch a generator that reads ``random``.
    """
    per_process = 1_250
    results = _run_children("sdk-default", per_process, tmp_path)
    span_ids = _ids([spans for spans, _ in results], 8)
    trace_ids = _ids([traces for _, traces in results], 16)
    # Not a few collisions: every process repeats the first one's ids exactly.
    assert _distinct(span_ids) == per_process
    assert _distinct(trace_ids) == per_process // (1 + CHILDREN)
    assert all(result == results[0] for result in results)


@pytest.mark.slow
def test_configured_sdk_provider_ids_never_collide(tmp_path: Path) -> None:
    """configure(provider="sdk") draws from asynctrace's generator: no repeats either."""
    per_process = 6_250  # the SDK's spans cost more; 5 x 10^4 of them keep the test short
    results = _run_children("sdk", per_process, tmp_path)
    span_ids = _ids([spans for spans, _ in results], 8)
    trace_ids = _ids([traces for _, traces in results], 16)
    assert len(span_ids) == PROCESSES * per_process
    assert _distinct(span_ids) == len(span_ids), "span ids repeated"
    assert _distinct(trace_ids) == len(trace_ids), "root trace ids repeated"


def _draw(tracer: Any) -> dict[str, list[int]]:
    """Ids drawn straight from the generator and through the provider's spans."""
    drawn: dict[str, list[int]] = {"span": [], "trace": []}
    for _ in range(32):
        drawn["span"].append(IDS.generate_span_id())
        drawn["trace"].append(IDS.generate_trace_id())
    for _ in range(32):
        span = tracer.start_span("after-fork")
        context = span.get_span_context()
        span.end()
        drawn["span"].append(context.span_id)
        drawn["trace"].append(context.trace_id)
    return drawn


def _child_after_fork(tracer: Any, out: Path, output_dir: Path) -> None:
    """In the forked child: draw ids at once, then export one span through a new pipeline."""
    drawn = _draw(tracer)
    telemetry = asynctrace.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(output_dir),
            "shutdown_timeout_s": 10,
        }
    )
    with asynctrace.managed_span("generation", "in-child") as span:
        context = span.get_span_context()
    ok = telemetry.shutdown()
    out.write_text(
        json.dumps(
            {
                **drawn,
                "shutdown_ok": ok,
                "trace_file": str(telemetry.trace_file),
                "in_child": [context.trace_id, context.span_id],
            }
        )
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_draws_new_ids_and_exports(tmp_path: Path) -> None:
    """After os.fork() child and parent draw different ids; the child's own pipeline exports.

    The parent has a running pipeline when it forks (as a trainer has before
    it forks data-loader workers); both sides draw ids right after the fork.
    """
    telemetry = asynctrace.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path / "parent"),
        }
    )  # the provider ASYNCTRACE_PROVIDER selects (fast unless set): both draw from IDS
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("fork")
    out = tmp_path / "child.json"
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a process with threads (the export
        # threads) may deadlock; asynctrace handles it, which is what is tested.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            _child_after_fork(tracer, out, tmp_path / "child")
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    parent = _draw(tracer)
    assert exit_code(pid, 60) == 0, "the forked child failed (its traceback is on stderr)"
    child = json.loads(out.read_text())

    repeated = set(child["span"]) & set(parent["span"])
    assert not repeated, f"the child repeated {len(repeated)} of the parent's 64 span ids"
    repeated = set(child["trace"]) & set(parent["trace"])
    assert not repeated, f"the child repeated {len(repeated)} of the parent's 64 trace ids"

    assert child["shutdown_ok"] is True
    events = read_chrome_trace(child["trace_file"]).complete_events()
    (event,) = [e for e in events if e["name"] == "in-child"]
    trace_id, span_id = child["in_child"]
    assert event["pid"] == pid
    assert event["args"]["trace_id"] == f"{trace_id:032x}"
    assert event["args"]["span_id"] == f"{span_id:016x}"

    # The parent's pipeline is untouched by the fork: its spans are exported, the child's not.
    with asynctrace.managed_span("generation", "in-parent"):
        pass
    assert telemetry.shutdown()
    assert telemetry.trace_file is not None
    names = [e["name"] for e in read_chrome_trace(telemetry.trace_file).complete_events()]
    assert "in-parent" in names
    assert names.count("after-fork") == 32  # the parent's own, not the child's
    assert "in-child" not in names
