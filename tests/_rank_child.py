"""One rank of a four-rank job, or the worker process one rank hands work to.

``python _rank_child.py driver TRACES``: the rank's driver (``RANK`` and
``WORLD_SIZE`` from the environment). It opens a job span, starts the worker
under it through the env carrier (``TRACEPARENT``), then starts TRACES
root traces (a step and a dispatch span each) and sends each dispatch's
carrier to the worker as one JSON line. It prints one JSON line: whether
this rank records, and every root trace id it started.

``python _rank_child.py worker``: the worker, started with the driver's
environment (so the same rank). It opens a span under the env carrier, then
two spans under each carrier it reads.

Both configure OTLP from the ``OTEL_EXPORTER_OTLP_*`` variables, with
``export_ranks=first`` and ``sample_rate=0.25``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import asynctrace as at

CONFIG = {
    "enabled": True,
    "exporters": ["otlp"],
    "span_groups": "all",
    "export_ranks": "first",
    "sample_rate": 0.25,
    "schedule_delay_millis": 100,
}


def driver(traces: int) -> None:
    """Run the rank's driver."""
    telemetry = at.init_worker(CONFIG)
    trace_ids: list[str] = []
    with at.umbrella_span("job", "rl.job") as job:
        worker = subprocess.Popen(
            [sys.executable, __file__, "worker"],
            env=at.inject_env(),
            stdin=subprocess.PIPE,
            text=True,
        )
        if job.is_recording() or job.get_span_context().is_valid:
            trace_ids.append(f"{job.get_span_context().trace_id:032x}")
    assert worker.stdin is not None
    for _ in range(traces):
        with at.umbrella_span("step", "rl.step") as step:
            if step.get_span_context().is_valid:
                trace_ids.append(f"{step.get_span_context().trace_id:032x}")
            with at.managed_span("generation", "rl.dispatch", bucket=at.Bucket.PRODUCTIVE):
                worker.stdin.write(json.dumps(at.current_trace_carrier()) + "\n")
    worker.stdin.close()
    code = worker.wait(60)
    flushed = telemetry.flush(10.0)
    print(
        json.dumps(
            {
                "recording": telemetry.enabled,
                "exporting": telemetry.settings.exporting,
                "trace_ids": trace_ids,
                "worker_exit": code,
                "flushed": flushed,
            }
        ),
        flush=True,
    )


def worker() -> None:
    """Run the worker: spans under the env carrier, then under each carrier on stdin."""
    telemetry = at.init_worker(CONFIG)
    with at.extract_env(), at.managed_span("generation", "rl.worker.start"):
        pass
    for line in sys.stdin:
        with (
            at.remote_trace_context(json.loads(line)),
            at.umbrella_span("rollout", "rl.worker.handle"),
            at.managed_span("reward", "rl.worker.score", bucket=at.Bucket.PRODUCTIVE),
        ):
            pass
    if not telemetry.flush(10.0):
        sys.exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "driver":
        driver(int(sys.argv[2]))
    else:
        worker()
