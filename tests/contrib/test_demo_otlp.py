"""``asynctrace demo`` pointed at a collector by environment variables alone, both transports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

sys.path.insert(0, str(Path(__file__).parent.parent))
from _otlp_receiver import OtlpReceiver


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_whole_demo_reaches_the_receiver(protocol: str, tmp_path: Path) -> None:
    """Every span of the demo, Gym server included, arrives with parents, resource and rl.*."""
    with OtlpReceiver(protocol) as receiver:
        env = {
            **os.environ,
            **receiver.env(timeout_s=5),
            "OTEL_TRACES_EXPORTER": "otlp",
            "ASYNCTRACE_RUN_ID": "demo-otlp",
        }
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        out = tmp_path / "demo"
        command = [sys.executable, "-m", "asynctrace", "demo", "--steps", "2", "--prompts", "4"]
        process = subprocess.run(
            [*command, "--out", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert process.returncode in (0, 1), process.stderr  # 1: a goodput invariant note
        received = {span.span_id: span for span in receiver.spans}
    events = [
        json.loads(line)
        for path in out.glob("traces-*.jsonl")
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    complete = [e for e in events if e.get("ph") == "X"]
    assert len(complete) > 50
    assert len(received) == len(receiver.spans) == len(complete)  # each span once
    names = {span.name for span in received.values()}
    assert {"rl.job", "rl.step", "POST /score/{prompt_id}", "gym.score"} <= names
    for event in complete:
        args = event["args"]
        span = received[args["span_id"]]
        assert span.name == event["name"]
        assert span.trace_id == args["trace_id"]
        assert span.parent_span_id == args.get("parent_span_id", "")
        rl = {k: v for k, v in args.items() if k.startswith("rl.")}
        assert {k: v for k, v in span.attributes.items() if k.startswith("rl.")} == rl
        assert span.resource["asynctrace.run_id"] == "demo-otlp"
        assert span.resource["asynctrace.role"] == "driver"
        assert span.resource["service.name"]
