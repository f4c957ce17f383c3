"""Live goodput as OpenTelemetry metrics: a real MeterProvider, a real Prometheus endpoint."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import asynctrace as at
from asynctrace._goodput_metrics import MAX_SPAN_INSTRUMENTS, GoodputMetrics
from asynctrace._step_goodput import StepGoodput


def _metrics(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, Any] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "asynctrace"
            for metric in scope.metrics:
                out[metric.name] = metric
    return out


async def _steps(count: int) -> None:
    for i in range(1, count + 1):
        with at.iteration_scope(i), at.umbrella_span("step", "rl.step"):
            with at.managed_span("policy_update", "rl.policy_update"):
                await asyncio.sleep(0.01)
            with at.managed_span("data_processing", "rl.data_processing"):
                await asyncio.sleep(0.005)


def _length(span: Any) -> float:
    return float((span.end_time - span.start_time) / 1e9)


def test_metrics_reach_a_meter_provider_with_names_units_and_attributes(tmp_path: Path) -> None:
    """rl.goodput, rl.bucket.duration by rl.bucket, rl.step.duration and per-leaf histograms."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "goodput": {"metrics": provider, "file": False, "grace_s": 0},
        }
    )
    asyncio.run(_steps(3))
    assert telemetry.flush()
    assert telemetry.memory_exporter is not None
    spans = list(telemetry.memory_exporter.get_finished_spans())
    telemetry.shutdown()
    metrics = _metrics(reader)
    assert set(metrics) == {
        "rl.goodput",
        "rl.bucket.duration",
        "rl.step.duration",
        "rl.policy_update",
        "rl.data_processing",
    }
    units = {name: metric.unit for name, metric in metrics.items()}
    assert units == {"rl.goodput": "1", **{n: "s" for n in metrics if n != "rl.goodput"}}
    # The gauge is the last step's goodput: its policy update's share of its wall
    # clock (the spans as recorded, however long a loaded machine made them).
    last_step = max((s for s in spans if s.name == "rl.step"), key=lambda s: s.start_time or 0)
    (last_update,) = [
        s
        for s in spans
        if s.name == "rl.policy_update"
        and s.parent is not None
        and s.parent.span_id == last_step.context.span_id
    ]
    (gauge,) = metrics["rl.goodput"].data.data_points
    assert gauge.value == pytest.approx(_length(last_update) / _length(last_step), abs=0.01)
    assert dict(gauge.attributes) == {}
    buckets = {
        p.attributes["rl.bucket"]: p.value for p in metrics["rl.bucket.duration"].data.data_points
    }
    assert set(buckets) == {"productive", "overhead", "unattributed"}
    assert buckets["productive"] >= 0.03
    (step,) = metrics["rl.step.duration"].data.data_points
    assert step.count == 3
    assert dict(step.attributes) == {}
    (leaf,) = metrics["rl.policy_update"].data.data_points
    assert leaf.count == 3
    updates = [_length(s) for s in spans if s.name == "rl.policy_update"]
    assert leaf.sum == pytest.approx(sum(updates), abs=1e-3)
    assert buckets["productive"] == pytest.approx(sum(updates), abs=1e-3)
    assert leaf.sum >= 0.03
    for metric in metrics.values():  # never the step number as an attribute
        for point in metric.data.data_points:
            assert "rl.iteration" not in point.attributes
    provider.shutdown()


def test_cardinality_stays_bounded_over_10000_steps() -> None:
    """10,000 steps (many leaf names) make a bounded number of series."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = GoodputMetrics(provider)
    for i in range(10_000):
        metrics.record(
            StepGoodput(
                name="rl.step",
                iteration=i,
                wall_s=1.0,
                productive_s=0.5,
                overhead_s=0.2,
                unattributed_s=0.3,
                goodput=0.5,
                spans={"rl.policy_update": 0.5, f"rl.phase_{i % 400}": 0.2},
            )
        )
    found = _metrics(reader)
    series = sum(len(m.data.data_points) for m in found.values())
    assert len(found) == 3 + MAX_SPAN_INSTRUMENTS
    assert series == 1 + 3 + 1 + MAX_SPAN_INSTRUMENTS  # gauge, 3 buckets, step, the leaves
    assert metrics.untracked > 0  # the names past the limit: counted, not recorded
    (step,) = found["rl.step.duration"].data.data_points
    assert step.count == 10_000
    provider.shutdown()


def test_a_value_that_cannot_be_recorded_costs_only_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A histogram that raises on one leaf name: reported once; the batch's other values land."""
    from asynctrace import _errors

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = GoodputMetrics(provider)

    class Refusing:
        def record(self, value: float) -> None:
            raise ValueError("refused")

    for i in range(3):
        metrics.queue(
            StepGoodput(
                name="rl.step",
                iteration=i,
                wall_s=1.0,
                productive_s=0.5,
                overhead_s=0.2,
                unattributed_s=0.3,
                goodput=0.5,
                spans={"rl.a": 0.1, "rl.refused": 0.2, "rl.b": 0.3},
            )
        )
    metrics._spans["rl.refused"] = Refusing()
    strict = _errors.set_strict(False)
    try:
        metrics.commit()
    finally:
        _errors.set_strict(strict)
    found = _metrics(reader)
    assert found["rl.step.duration"].data.data_points[0].count == 3
    for name in ("rl.a", "rl.b"):
        (point,) = next(m for key, m in found.items() if name in key).data.data_points
        assert point.count == 3
    assert not [key for key in found if "refused" in key]
    reports = [r for r in caplog.records if "span histogram" in r.getMessage()]
    assert len(reports) == 1  # once, not once a value
    provider.shutdown()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_prometheus_endpoint_is_scraped_over_loopback(tmp_path: Path) -> None:
    """metrics: prometheus serves the goodput metrics on 127.0.0.1, in Prometheus names."""
    pytest.importorskip("opentelemetry.exporter.prometheus")
    port = _free_port()
    telemetry = at.configure(_prometheus_config(port))
    try:
        asyncio.run(_steps(3))  # the third finishes when a later span ends, or at shutdown
        assert telemetry.flush()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        telemetry.shutdown()
    samples = {
        line.split("{")[0].split(" ")[0]: line
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert re.search(r"^rl_goodput\{", text, re.M)  # the name docs/live-goodput.md gives
    assert re.search(r'^rl_bucket_duration_seconds_total\{[^}]*rl_bucket="productive"', text, re.M)
    assert samples["rl_step_duration_seconds_count"].endswith(" 2.0")
    assert samples["rl_policy_update_seconds_count"].endswith(" 2.0")
    assert "rl_iteration" not in text
    with pytest.raises(OSError):  # the endpoint is gone with the telemetry
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1)


def test_a_taken_prometheus_port_is_a_configuration_error() -> None:
    """The port is checked before anything changes; the error names key, value and accepted."""
    pytest.importorskip("opentelemetry.exporter.prometheus")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(at.ConfigurationError, match="goodput.prometheus_port: cannot listen"):
            at.configure(
                {
                    "enabled": True,
                    "exporters": ["memory"],
                    "goodput": {"metrics": "prometheus", "prometheus_host": "127.0.0.1",
                                "prometheus_port": port},
                }
            )  # fmt: skip


def test_console_metrics_are_set_up_and_shut_down(capsys: pytest.CaptureFixture[str]) -> None:
    """metrics: console exports through asynctrace's own MeterProvider at shutdown."""
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "goodput": {"metrics": "console", "file": False, "grace_s": 0},
        }
    )
    asyncio.run(_steps(1))
    telemetry.shutdown()
    assert '"name": "rl.step.duration"' in capsys.readouterr().out


def _prometheus_config(port: int) -> dict[str, Any]:
    return {
        "enabled": True,
        "span_groups": "all",
        "exporters": ["memory"],
        "goodput": {
            "metrics": "prometheus",
            "prometheus_host": "127.0.0.1",
            "prometheus_port": port,
            "file": False,
            "grace_s": 0,
        },
    }


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
        return text


def _listenable(port: int) -> bool:
    """Whether a server (SO_REUSEADDR, as Prometheus's) could listen on *port* now."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError:
            return False
        return True


def test_reconfiguring_with_the_same_prometheus_port_keeps_serving() -> None:
    """The running telemetry's own endpoint holds the port: configure() again takes it over."""
    pytest.importorskip("opentelemetry.exporter.prometheus")
    port = _free_port()
    first = at.configure(_prometheus_config(port))
    try:
        _scrape(port)
        second = at.configure(_prometheus_config(port))
        try:
            asyncio.run(_steps(2))
            assert second.flush()
            assert "rl_step_duration_seconds_count" in _scrape(port)
        finally:
            second.shutdown()
    finally:
        first.shutdown()


def test_a_port_whose_connections_linger_can_be_listened_on() -> None:
    """A port left in TIME_WAIT by the last run's scrapes is not taken (SO_REUSEADDR)."""
    pytest.importorskip("opentelemetry.exporter.prometheus")
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the server side closes first: its end lingers in TIME_WAIT
            client.recv(1)
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the check did: refused
    telemetry = at.configure(_prometheus_config(port))
    try:
        _scrape(port)
    finally:
        telemetry.shutdown()


def test_a_port_past_65535_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """prometheus_port + LOCAL_RANK must be a port: the error names key, value and range."""
    pytest.importorskip("opentelemetry.exporter.prometheus")
    monkeypatch.setenv("LOCAL_RANK", "3")
    with pytest.raises(at.ConfigurationError) as caught:
        at.configure(_prometheus_config(65534))
    message = str(caught.value)
    assert message.startswith("goodput.prometheus_port: 65534 + LOCAL_RANK 3 = 65537")
    assert "accepted: 1 to 65532 with LOCAL_RANK=3" in message


def test_a_forked_child_does_not_keep_the_endpoint_port() -> None:
    """After the parent shuts down, a forked child still running holds no listening socket."""
    pytest.importorskip("opentelemetry.exporter.prometheus")
    port = _free_port()
    telemetry = at.configure(_prometheus_config(port))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait until the parent has looked, then leave
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    try:
        telemetry.shutdown()
        assert _listenable(port)
    finally:
        os.close(write)
        os.waitpid(pid, 0)


LEAF_NAMES = [
    "rl.phase",
    "RL.Phase",  # case
    "rl_phase",  # . _ / - are one to Prometheus
    "rl/phase",
    "rl-phase",
    "rl..phase",  # a run of them too
    "rl.phase_seconds",  # the unit suffix Prometheus adds
    "rl.step.duration",  # the built-in instruments' names
    "rl.goodput",
    "rl.bucket.duration",
    "Rl.Step.Duration",
    "a" * 255 + "x",  # equal in their first 255 characters
    "a" * 255 + "y",
]


def test_leaf_names_that_meet_in_prometheus_share_one_family(tmp_path: Path) -> None:
    """Leaf names equal to Prometheus (or to a built-in's) give one valid OpenMetrics family.

    The scrape is read by prometheus_client's OpenMetrics parser, which
    rejects a family that appears twice.
    """
    pytest.importorskip("opentelemetry.exporter.prometheus")
    from opentelemetry import trace
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    port = _free_port()
    telemetry = at.configure(_prometheus_config(port))
    assert telemetry.provider is not None
    tracer = telemetry.provider.get_tracer("test")
    try:
        t0 = time.time_ns()
        for i in range(2):
            base = t0 + i * 1_000_000_000
            step = tracer.start_span(
                "rl.step",
                attributes={"rl.iteration": i, "asynctrace.group": "step"},
                start_time=base,
            )
            for k, name in enumerate(LEAF_NAMES):
                tracer.start_span(
                    name,
                    context=trace.set_span_in_context(step),
                    attributes={"rl.bucket": "productive"},
                    start_time=base + k * 1_000_000,
                ).end(base + (k + 1) * 1_000_000)
            step.end(base + 500_000_000)
        assert telemetry.flush()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            text = response.read().decode()
    finally:
        telemetry.shutdown()
    families = {f.name: f for f in text_string_to_metric_families(text)}  # no clash
    assert families["rl_step_duration_seconds"].type == "histogram"
    assert families["rl_bucket_duration_seconds"].type == "counter"
    assert families["rl_goodput"].type == "gauge"

    def count(family: str) -> float:
        (value,) = [s.value for s in families[family].samples if s.name == f"{family}_count"]
        return value

    assert count("rl_step_duration_seconds") == 1.0  # the built-in: the steps only
    assert count("rl_phase_seconds") == 7.0  # seven names, one step finished
    assert count("span_rl_step_duration_seconds") == 2.0  # moved under span.
    assert count("span_rl_goodput_seconds") == 1.0
    assert count("span_rl_bucket_duration_seconds") == 1.0
    assert count("a" * 255 + "_seconds") == 2.0


def test_a_second_telemetry_on_the_same_meter_provider_is_read(tmp_path: Path) -> None:
    """configure() again on the program's provider: the gauge and counter read the new steps."""
    from opentelemetry import trace

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    for productive in (0.2, 0.9):
        telemetry = at.configure(
            {
                "enabled": True,
                "exporters": ["memory"],
                "goodput": {"metrics": provider, "file": False},
            }
        )
        assert telemetry.provider is not None
        tracer = telemetry.provider.get_tracer("test")
        t0 = time.time_ns()
        step = tracer.start_span(
            "rl.step", start_time=t0, attributes={"asynctrace.group": "step", "rl.iteration": 1}
        )
        tracer.start_span(
            "gen",
            context=trace.set_span_in_context(step),
            start_time=t0,
            attributes={"rl.bucket": "productive"},
        ).end(t0 + int(productive * 1e9))
        step.end(t0 + 1_000_000_000)
        assert telemetry.shutdown()
    found = _metrics(reader)
    (gauge,) = found["rl.goodput"].data.data_points
    assert gauge.value == pytest.approx(0.9)
    buckets = {
        p.attributes["rl.bucket"]: p.value for p in found["rl.bucket.duration"].data.data_points
    }
    assert buckets["productive"] == pytest.approx(1.1)
    assert buckets["unattributed"] == pytest.approx(0.9)
    provider.shutdown()


_FORKED_METRICS = """
import os, sys, tempfile, time
import asynctrace as at
out = tempfile.mkdtemp()
telemetry = at.configure({"enabled": True, "output_dir": out, "exporters": ["chrome"],
    "goodput": {"metrics": "console", "export_interval_s": 0.2}})
tracer = telemetry.provider.get_tracer("x")
now = time.time_ns()
step = tracer.start_span("rl.step", start_time=now,
                         attributes={"asynctrace.group": "step", "rl.iteration": 1})
step.end(now + 10**9)
tracer.start_span("later", start_time=now + 3 * 10**9).end(now + 3 * 10**9 + 1)
telemetry.flush()
time.sleep(0.3)
sys.stdout.flush()
child = os.fork()
if child == 0:
    time.sleep(1.2)  # six export intervals of the reader the SDK restarts in a child
    sys.stdout.flush()
    os._exit(0)
time.sleep(0.1)
telemetry.shutdown()
print("PARENT SHUT DOWN", flush=True)
os.waitpid(child, 0)
"""


def test_a_forked_child_does_not_export_the_parents_metrics() -> None:
    """A child forked while console (or OTLP) metrics run exports nothing of the parent's:
    no frozen values under the parent's identity after the parent shut down."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _FORKED_METRICS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    before, marker, after = done.stdout.partition("PARENT SHUT DOWN")
    assert marker
    assert "rl.step.duration" in before  # the parent's own exports
    assert "resource_metrics" not in after
