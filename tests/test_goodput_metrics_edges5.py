"""Goodput metrics at their edges: the gRPC metric endpoint's checks, the global provider
set after configure(), a provider that is no provider, the Prometheus endpoint's host,
port and connections, and the end line's counts with a callback stuck at shutdown."""

from __future__ import annotations

import asyncio
import glob
import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import asynctrace as at
from asynctrace import ConfigurationError
from asynctrace._step_goodput import StepGoodput
from asynctrace.export import _goodput_sink

sys.path.insert(0, str(Path(__file__).parent))
from _otlp_receiver import free_port

BASE: dict[str, Any] = {"enabled": True, "span_groups": "all", "exporters": ["memory"]}


async def _steps(count: int, start: int = 1) -> None:
    for i in range(start, start + count):
        with at.iteration_scope(i), at.umbrella_span("step", "rl.step"):
            with at.managed_span("policy_update", "rl.policy_update"):
                await asyncio.sleep(0.002)
            with at.managed_span("data_processing", "rl.data_processing"):
                await asyncio.sleep(0.001)


def _configure(**goodput: Any) -> at.Telemetry:
    return at.configure({**BASE, "goodput": {"file": False, "grace_s": 0, **goodput}})


def _scrape(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
        text: str = reply.read().decode()
        return text


# -- the gRPC metric exporter's endpoint -------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "shown", "problem"),
    [
        ("http://user:PASSW0RD@127.0.0.1:{port}", "REDACTED@127.0.0.1:{port}", "user name"),
        ("user:PASSW0RD@127.0.0.1:{port}", "REDACTED@127.0.0.1:{port}", "user name"),
        ("http://127.0.0.1:{port}?token=PASSW0RD", "?REDACTED", "query string"),
    ],
)
def test_a_grpc_metrics_endpoint_with_a_secret_fails_configure(
    endpoint: str,
    shown: str,
    problem: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """gRPC cannot send a user name, password or query: the metric exporter's endpoint is
    refused at configure() as the trace exporter's is, naming the variable, the secret
    REDACTED, never logged by OpenTelemetry's retries."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    port = free_port()
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", endpoint.format(port=port))
    caplog.set_level(logging.DEBUG)
    threads = set(threading.enumerate())
    with pytest.raises(ConfigurationError) as raised:
        _configure(metrics="otlp", export_interval_s=0.1)
    message = str(raised.value)
    assert message.startswith("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: "), message
    assert shown.format(port=port) in message, message
    assert problem in message, message
    assert "accepted: host:port or http(s)://host:port" in message, message
    assert "OTEL_EXPORTER_OTLP_METRICS_HEADERS" in message, message
    assert "PASSW0RD" not in message
    assert "PASSW0RD" not in caplog.text
    assert not [t for t in set(threading.enumerate()) - threads if t.is_alive()]


# -- goodput metrics: global, the program's provider set after configure() --------------

_GLOBAL_LATER = textwrap.dedent(
    """
    import asyncio, json
    import asynctrace as at
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    async def _steps(count, start=1):
        for i in range(start, start + count):
            with at.iteration_scope(i), at.umbrella_span("step", "rl.step"):
                with at.managed_span("policy_update", "rl.policy_update"):
                    await asyncio.sleep(0.002)

    def productive(reader):
        for resource in reader.get_metrics_data().resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "rl.bucket.duration":
                        for point in metric.data.data_points:
                            if point.attributes["rl.bucket"] == "productive":
                                return point.value
        return 0.0

    records = []
    at.on_step_goodput(lambda record: records.append(record.productive_s))
    config = {"enabled": True, "span_groups": "all", "exporters": ["memory"],
              "goodput": {"metrics": "global", "file": False, "grace_s": 0}}
    telemetry = at.configure(config)  # the global provider is still the API's proxy
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    asyncio.run(_steps(3))
    telemetry.flush()
    first = productive(reader)
    telemetry = at.configure(config)  # now the program's provider itself
    asyncio.run(_steps(6, start=10))
    telemetry.shutdown()
    print(json.dumps({"first": first, "counted": productive(reader), "records": records}))
    """
)


def test_global_metrics_keep_counting_when_configured_again_after_the_program_set_its_provider(
    tmp_path: Path,
) -> None:
    """configure() with metrics: global before the program set its provider, then again
    after: rl.bucket.duration goes on counting the second telemetry's steps (it read the
    first telemetry's totals for ever): in the end, the seconds of every step record."""
    script = tmp_path / "global_later.py"
    script.write_text(_GLOBAL_LATER)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out["records"]) == 9, out  # both telemetries' steps, all delivered
    assert out["first"] > 0
    assert out["counted"] == pytest.approx(sum(out["records"]), rel=1e-9), out


# -- goodput.metrics that is no provider -------------------------------------------------


def _still_running(telemetry: at.Telemetry) -> None:
    asyncio.run(_steps(2))
    assert telemetry.flush()
    exporter = telemetry.memory_exporter
    assert exporter is not None
    assert len(exporter.get_finished_spans()) >= 6


def test_a_meter_provider_class_is_refused_and_the_running_telemetry_kept() -> None:
    """The MeterProvider class, not an instance: a ConfigurationError naming goodput.metrics,
    with nothing swapped (the running telemetry still records)."""
    from opentelemetry.sdk.metrics import MeterProvider

    first = _configure(metrics="none")
    try:
        with pytest.raises(ConfigurationError) as raised:
            _configure(metrics=MeterProvider)
        message = str(raised.value)
        assert message.startswith("goodput.metrics: "), message
        assert "is a class" in message, message
        assert "MeterProvider(...)" in message, message
        _still_running(first)
    finally:
        first.shutdown()


class _Broken:
    """Looks like a provider, but cannot give a meter."""

    def get_meter(self, name: str, version: str | None = None, **_: Any) -> Any:
        raise RuntimeError("closed for good")


def test_a_provider_that_cannot_give_a_meter_fails_before_anything_is_swapped() -> None:
    first = _configure(metrics="none")
    try:
        with pytest.raises(ConfigurationError) as raised:
            _configure(metrics=_Broken())
        message = str(raised.value)
        assert message.startswith("goodput.metrics: "), message
        assert "closed for good" in message, message
        _still_running(first)
    finally:
        first.shutdown()


# -- the Prometheus endpoint's host and port ---------------------------------------------


@pytest.mark.parametrize("any_port", [True, False])
def test_a_prometheus_host_not_of_this_machine_fails_configure(any_port: bool) -> None:
    """An address of no interface here fails configure() naming goodput.prometheus_host,
    with port 0 (any free port) too, which tried nothing and ran without metrics."""
    port = 0 if any_port else free_port()
    with pytest.raises(ConfigurationError) as raised:
        _configure(metrics="prometheus", prometheus_host="192.0.2.1", prometheus_port=port)
    message = str(raised.value)
    assert message.startswith("goodput.prometheus_host: '192.0.2.1'"), message
    assert "accepted: a host name or address of this machine" in message, message


def test_a_local_rank_past_every_port_says_only_0_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "70000")
    with pytest.raises(ConfigurationError) as raised:
        _configure(metrics="prometheus", prometheus_port=9464)
    message = str(raised.value)
    assert message.startswith("goodput.prometheus_port: 9464 + LOCAL_RANK 70000"), message
    assert "only 0 (any free port) with LOCAL_RANK=70000" in message, message
    assert "1 to 1" not in message, message


@pytest.mark.parametrize(
    ("first", "then"), [("localhost", "127.0.0.1"), ("127.0.0.1", "localhost")]
)
def test_configuring_again_on_the_running_port_under_another_host_spelling(
    first: str, then: str
) -> None:
    """The running endpoint is stopped before the new one starts: its port is free then,
    whichever spelling of its address either configure() names (a wildcard over a specific
    address is refused: tests/test_goodput_port_edges5.py)."""
    port = free_port()
    running = _configure(metrics="prometheus", prometheus_host=first, prometheus_port=port)
    try:
        telemetry = _configure(metrics="prometheus", prometheus_host=then, prometheus_port=port)
    except BaseException:
        running.shutdown()
        raise
    try:
        asyncio.run(_steps(3))
        assert telemetry.flush()
        assert "rl_goodput" in _scrape("127.0.0.1", port)
    finally:
        telemetry.shutdown()


# -- the Prometheus endpoint's connections -----------------------------------------------


def _idle_connections(port: int, count: int) -> list[socket.socket]:
    """*count* connections that send half a request; served (accepted) once this returns."""
    idle = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", port), timeout=10)
        connection.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finished
        idle.append(connection)
    _scrape("127.0.0.1", port)  # accepted after them: they have their threads
    return idle


def _ended_by_the_server(connection: socket.socket) -> bool:
    connection.settimeout(30)  # far past the wait it takes: a failure is the timeout
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    finally:
        connection.close()


def test_idle_scrape_connections_are_closed_at_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections still open (a client that never finishes its request) end with the
    endpoint, not when their idle timeout comes."""
    from asynctrace import _prometheus_server

    monkeypatch.setattr(_prometheus_server, "SCRAPE_IDLE_S", 600.0)
    port = free_port()
    telemetry = _configure(metrics="prometheus", prometheus_host="127.0.0.1", prometheus_port=port)
    try:
        idle = _idle_connections(port, 3)
    finally:
        telemetry.shutdown()
    ended = [_ended_by_the_server(connection) for connection in idle]  # each one closed
    assert all(ended), ended


def test_an_idle_scrape_connection_is_closed_by_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that never finishes its request does not hold a thread for ever."""
    from asynctrace import _prometheus_server

    monkeypatch.setattr(_prometheus_server, "SCRAPE_IDLE_S", 0.2)
    port = free_port()
    telemetry = _configure(metrics="prometheus", prometheus_host="127.0.0.1", prometheus_port=port)
    try:
        (connection,) = _idle_connections(port, 1)
        assert _ended_by_the_server(connection)  # the endpoint still running
        _scrape("127.0.0.1", port)  # and still serving
    finally:
        telemetry.shutdown()


# -- the end line's counts with a callback stuck at shutdown -----------------------------


def test_the_end_line_counts_the_record_a_stuck_callback_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delivered + dropped is every step: the record in a callback still running when the
    shutdown stops waiting counts as dropped, and as delivered once the callback returns."""
    monkeypatch.setattr(_goodput_sink, "_CALLBACK_DRAIN_S", 0.2)
    gate = threading.Event()
    calls: list[int | None] = []

    def stuck(record: StepGoodput) -> None:
        calls.append(record.iteration)
        gate.wait(30)

    at.on_step_goodput(stuck)
    try:
        telemetry = at.configure(
            {
                **BASE,
                "output_dir": str(tmp_path),
                "goodput": {"metrics": "none", "file": True, "grace_s": 0, "callback_queue": 4},
            }
        )
        asyncio.run(_steps(12))
        assert telemetry.flush()
        deadline = time.monotonic() + 30
        while not calls and time.monotonic() < deadline:
            time.sleep(0.005)
        assert calls
        telemetry.shutdown()
        ended = telemetry.goodput
        assert ended is not None
        assert ended.steps == 12
        assert ended.delivered + ended.dropped == ended.steps, ended
        files = glob.glob(str(tmp_path / "**" / "goodput-*.jsonl"), recursive=True)
        text = "".join(Path(name).read_text() for name in files)
        lines = [json.loads(line) for line in text.splitlines() if line]
        (end,) = [line["goodput"] for line in lines if line.get("kind") == "end"]
        assert (end["steps"], end["delivered"], end["dropped"]) == (12, 0, 12), end
        gate.set()
        deadline = time.monotonic() + 30
        while _delivered(telemetry) == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        after = telemetry.goodput
        assert after is not None
        assert (after.delivered, after.dropped) == (1, 11), after
        assert calls == [calls[0]]
    finally:
        gate.set()
        at.remove_step_goodput(stuck)


def _delivered(telemetry: at.Telemetry) -> int:
    stats = telemetry.goodput
    assert stats is not None
    return stats.delivered
