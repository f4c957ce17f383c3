"""OTLP variables that would fail every request fail ``configure()`` instead; the
exporters' own logs are redacted; a request that cannot be made is refused, not held.

Each test runs the real pipeline against a real receiver: ``tests/_otlp_receiver.py``
(OTLP/HTTP on ``http.server``, OTLP/gRPC on ``grpcio``), or a gRPC servicer here
that answers with a malformed ``RetryInfo``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

import asynctrace as at
from asynctrace import ConfigurationError
from asynctrace.export import _otlp_vars

sys.path.insert(0, str(Path(__file__).parent))
from _otlp_receiver import OtlpReceiver, free_port

CONFIG = {
    "enabled": True,
    "exporters": ["otlp"],
    "span_groups": "all",
    "schedule_delay_millis": 20,
}
HELD_WARNING = "failed batches are held"


@pytest.fixture(autouse=True)
def _no_otlp_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the variables a test sets are in force; what is logged once is logged again."""
    for name in list(os.environ):
        kept = name in ("ASYNCTRACE_STRICT", "ASYNCTRACE_PROVIDER")
        if name.startswith(("OTEL_EXPORTER_OTLP_", "ASYNCTRACE_")) and not kept:
            monkeypatch.delenv(name)
    _otlp_vars._told.clear()


@pytest.fixture
def _fresh_log_filters() -> None:
    """OpenTelemetry's loggers as in a new process: no redacting filter installed yet."""
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and logger.name.startswith("opentelemetry."):
            for item in list(logger.filters):
                if type(item).__name__ == "_RedactingFilter":
                    logger.removeFilter(item)


def _point_at(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for name, value in {**receiver.env(), **env}.items():
        monkeypatch.setenv(name, value)


def _spans(count: int) -> None:
    for index in range(count):
        with at.umbrella_span("step", f"rl.step{index}"):
            pass


def _processor(telemetry: Any) -> Any:
    return telemetry._pipeline.queued[0]


def _eventually(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Whether *condition* holds within *timeout_s* (a generous bound, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _settled(stats: Any) -> bool:
    """The batch was attempted and its failure counted: held or failed."""
    settled: bool = (
        stats.queued == 0 and stats.in_flight == 0 and stats.buffered + stats.failed > 0
    )
    return settled


# -- configure() refuses what every request would fail with -------------------------------

REFUSED = [
    # (protocol, variable, value, what the message must say)
    ("http/protobuf", "OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%0AHDRSECRET", "HTTP"),
    ("http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-key=a%0D%0Ab", "HTTP"),
    ("grpc", "OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%0AHDRSECRET", "gRPC"),
    ("grpc", "OTEL_EXPORTER_OTLP_HEADERS", "x-token-bin=HDRSECRET", "-bin"),
    ("grpc", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-name=caf%C3%A9HDRSECRET", "ASCII"),
    ("http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "localhost:4318", "http://"),
    ("http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://host/v1/traces", "http://"),
    ("http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT", "-1", "0 for no limit"),
    ("http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT", "abc", "seconds"),
    ("http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT", "10000ms", "seconds"),
    ("grpc", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "nan", "0 for no limit"),
    ("grpc", "OTEL_EXPORTER_OTLP_TIMEOUT", "-0.5", "0 for no limit"),
    ("http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT", "1e-9", ">= 0.001"),  # every request fails
    ("grpc", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.0005", "0 for no limit"),
    ("http/protobuf", "OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "none, gzip, deflate"),
    ("grpc", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "deflate", "none, gzip"),
]


@pytest.mark.parametrize(("protocol", "variable", "value", "accepted"), REFUSED)
def test_a_variable_every_request_would_fail_with_fails_configure(
    protocol: str, variable: str, value: str, accepted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configure() raises ConfigurationError naming the variable, the value (a header's
    value as REDACTED) and what is accepted; no exporter thread is left behind."""
    with OtlpReceiver(protocol) as receiver:
        _point_at(receiver, monkeypatch)
        if protocol == "grpc":  # the receiver's own INSECURE=true would win over the general one
            monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE")
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        monkeypatch.setenv(variable, value)
        threads = set(threading.enumerate())
        with pytest.raises(ConfigurationError) as raised:
            at.configure(CONFIG)
        message = str(raised.value)
        assert variable in message, message
        assert "accepted:" in message, message
        assert accepted in message, message
        assert "HDRSECRET" not in message, message
        if "HEADERS" in variable:
            assert "REDACTED" in message, message
            assert value.partition("=")[0] in message, message
        else:
            assert repr(value) in message, message
        assert receiver.requests == 0
        assert not [t for t in set(threading.enumerate()) - threads if t.is_alive()]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_missing_certificate_file_fails_configure(
    protocol: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With TLS, a ..._CERTIFICATE that is not there is a ConfigurationError (it would fail
    every request over http/protobuf, and fall back to the system's roots over grpc)."""
    missing = str(tmp_path / "missing-ca.pem")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
    port = free_port()
    path = "/v1/traces" if protocol == "http/protobuf" else ""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{port}{path}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", missing)
    with pytest.raises(ConfigurationError) as raised:
        at.configure(CONFIG)
    message = str(raised.value)
    assert "OTEL_EXPORTER_OTLP_CERTIFICATE" in message, message
    assert repr(missing) in message, message
    assert "accepted: the path of a PEM file" in message, message


def test_a_grpc_endpoint_with_a_query_string_fails_configure(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """gRPC cannot send a query string: the token in it is refused, not logged with every
    failure (nor the connection silently made over TLS)."""
    with OtlpReceiver("grpc") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
        for endpoint in (
            f"127.0.0.1:{receiver.port}?token=PWSECRET",
            f"{receiver.endpoint}?token=PWSECRET",
        ):
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
            with pytest.raises(ConfigurationError) as raised:
                at.configure(CONFIG)
            message = str(raised.value)
            assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in message, message
            assert "query string" in message, message
            assert "PWSECRET" not in message, message
            assert "?REDACTED" in message, message
        assert receiver.requests == 0
    assert "PWSECRET" not in caplog.text


def test_a_timeout_of_a_millisecond_is_the_least_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The boundary of the refused rows above: 0.001 s configures (under it, refused)."""
    with OtlpReceiver("http/protobuf") as receiver:
        _point_at(receiver, monkeypatch, OTEL_EXPORTER_OTLP_TIMEOUT="0.001")
        at.configure(CONFIG).shutdown(1.0)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_values_that_work_still_work(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers with spaces and '=' in values, a fractional timeout, compression in any case,
    INSECURE in any case (grpc), and compression 'none' over grpc too: spans arrive, with
    the headers."""
    with OtlpReceiver(protocol) as receiver:
        _point_at(
            receiver,
            monkeypatch,
            OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20tok%3D%3D,x-team=rl",
            OTEL_EXPORTER_OTLP_TIMEOUT="2.5",
            OTEL_EXPORTER_OTLP_COMPRESSION="GZIP",
            # over grpc OpenTelemetry's exporter itself refuses 'none'
            OTEL_EXPORTER_OTLP_TRACES_COMPRESSION="none" if protocol == "grpc" else " Deflate",
        )
        if protocol == "grpc":
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "TRUE")
        telemetry = at.configure(CONFIG)
        try:
            _spans(2)
            assert telemetry.flush(10.0)
        finally:
            telemetry.shutdown(2.0)
        assert sorted(span.name for span in receiver.spans) == ["rl.step0", "rl.step1"]
        assert receiver.headers[0]["authorization"] == "Bearer tok=="
        assert receiver.headers[0]["x-team"] == "rl"
        if protocol == "http/protobuf":
            assert receiver.headers[0]["content-encoding"] == "deflate"


# -- what OpenTelemetry's exporters log is redacted --------------------------------------


def test_a_token_in_the_query_string_is_not_logged_when_the_collector_is_down(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """requests quotes the URL in its connection errors, and OpenTelemetry logs them on its
    own logger: the query's token is REDACTED there, the rest of the message kept."""
    port = free_port()  # nothing listens: connection refused
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        f"http://127.0.0.1:{port}/v1/traces?api_key=QUERYSECRET",
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1.5")  # room for one logged retry
    caplog.set_level(logging.DEBUG, logger="opentelemetry")
    telemetry = at.configure(CONFIG)
    try:
        _spans(1)
        assert _eventually(lambda: "Transient error" in caplog.text)  # it names the URL
    finally:
        telemetry.shutdown(0.2)
    logged = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter.otlp")]
    assert any("api_key=REDACTED" in r.getMessage() for r in logged), caplog.text
    assert "QUERYSECRET" not in caplog.text


GOODPUT_OVER_OTLP = {
    "enabled": True,
    "exporters": [],
    "span_groups": "per_step",
    "schedule_delay_millis": 20,
    "goodput": {"metrics": "otlp", "export_interval_s": 0.1, "grace_s": 0, "file": False},
}


@pytest.mark.usefixtures("_fresh_log_filters")
def test_a_token_in_the_query_string_is_not_logged_by_the_goodput_metric_exporter(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Goodput metrics over OTLP/HTTP with no trace exporter, the collector down: the metric
    exporter's connection errors name the URL, its query's token REDACTED."""
    port = free_port()  # nothing listens: connection refused
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_ENDPOINT", f"http://user:pw@127.0.0.1:{port}/base?token=QUERYSECRET"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "1.5")
    caplog.set_level(logging.DEBUG, logger="opentelemetry")
    telemetry = at.configure(GOODPUT_OVER_OTLP)
    try:
        for step in range(3):  # a step is finished (and measured) once the next one ends
            with at.iteration_scope(step), at.umbrella_span("step", "rl.step"):
                pass
        logger = "opentelemetry.exporter.otlp.proto.http.metric_exporter"
        assert _eventually(lambda: any(r.name == logger for r in caplog.records)), caplog.text
    finally:
        telemetry.shutdown(0.2)
    logged = [r.getMessage() for r in caplog.records if r.name == logger]
    assert any("token=REDACTED" in m for m in logged), logged
    assert "QUERYSECRET" not in caplog.text
    assert "pw@" not in caplog.text


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "authorization=Bearer%0AHDRSECRET", "HTTP"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "localhost:4318",
            "http://collector:4318/v1/metrics",
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "-1", "0 for no limit"),
        ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "zstd", "none, gzip, deflate"),
    ],
)
def test_the_metric_exporter_variables_are_checked_too(
    variable: str, value: str, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goodput metrics over OTLP read OTEL_EXPORTER_OTLP_METRICS_*: a value every request
    would fail with fails configure(), naming the variable, as for traces."""
    monkeypatch.setenv(variable, value)
    threads = set(threading.enumerate())
    with pytest.raises(ConfigurationError) as raised:
        at.configure(GOODPUT_OVER_OTLP)
    message = str(raised.value)
    assert variable in message, message
    assert named in message, message
    assert "HDRSECRET" not in message, message
    assert not [t for t in set(threading.enumerate()) - threads if t.is_alive()]


@pytest.mark.parametrize(
    ("protocol", "variable", "value"),
    [
        ("http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
        ("http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0"),
        ("grpc", "OTEL_EXPORTER_OTLP_TIMEOUT", "0.0"),
        ("grpc", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0"),
    ],
)
def test_a_timeout_of_0_means_the_default(
    protocol: str,
    variable: str,
    value: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """0 is 'no limit' in OpenTelemetry's specification; its Python exporters cannot wait
    without one, so their default applies, said once: spans arrive."""
    with OtlpReceiver(protocol) as receiver:
        _point_at(receiver, monkeypatch, OTEL_EXPORTER_OTLP_TIMEOUT="2")  # hidden as well
        monkeypatch.setenv(variable, value)
        caplog.set_level(logging.INFO, logger="asynctrace")
        for _ in range(2):
            telemetry = at.configure(CONFIG)
            try:
                _spans(1)
                assert telemetry.flush(10.0)
            finally:
                telemetry.shutdown(2.0)
        assert len(receiver.spans) == 2
    told = [r.getMessage() for r in caplog.records if "means no limit" in r.getMessage()]
    assert len(told) == 1, told
    assert f"{variable}={value!r}" in told[0], told
    assert "10 s" in told[0], told


def test_an_insecure_that_is_not_a_boolean_is_false_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OTEL_EXPORTER_OTLP_INSECURE=1 is false, as the specification says of a boolean: a
    warning names it once, and the connection uses TLS (a plaintext collector gets nothing)."""
    with OtlpReceiver("grpc") as receiver:
        _point_at(receiver, monkeypatch, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="0.5")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "1")
        caplog.set_level(logging.INFO, logger="asynctrace")
        at.configure(CONFIG).shutdown(1.0)
        telemetry = at.configure(CONFIG)
        try:
            _spans(1)
            assert _eventually(lambda: _settled(telemetry.stats()["otlp"]))
        finally:
            telemetry.shutdown(0.2)
        assert receiver.requests == 0
    warned = [r for r in caplog.records if "is not true or false" in r.getMessage()]
    assert len(warned) == 1, caplog.text
    assert warned[0].levelno == logging.WARNING
    assert "OTEL_EXPORTER_OTLP_INSECURE='1'" in warned[0].getMessage()


# -- at export -----------------------------------------------------------------------------


def test_a_request_that_cannot_be_made_is_refused_not_held(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """The CA file went away after configure(): requests fails before connecting, every
    time. The batch counts as failed once, with one warning; nothing is held for retries."""
    certificate = tmp_path / "ca.pem"
    certificate.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    with OtlpReceiver("http/protobuf") as receiver:
        endpoint = receiver.traces_endpoint.replace("http://", "https://")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", str(certificate))
        caplog.set_level(logging.INFO, logger="asynctrace")
        telemetry = at.configure(CONFIG)
        try:
            certificate.unlink()
            _spans(2)
            assert not telemetry.flush(5.0)
            stats = telemetry.stats()["otlp"]
        finally:
            telemetry.shutdown(1.0)
        assert (stats.failed, stats.buffered, stats.exported, stats.retried) == (2, 0, 0, 0)
        assert receiver.requests == 0
    refusals = [r.getMessage() for r in caplog.records if "refused a batch" in r.getMessage()]
    assert len(refusals) == 1, refusals
    assert "could not be made: OSError" in refusals[0], refusals
    assert HELD_WARNING not in caplog.text


class _MalformedRetryInfo:
    """An OTLP/gRPC receiver that fails calls with UNAVAILABLE and an unparsable RetryInfo."""

    def __init__(self) -> None:
        import grpc  # type: ignore[import-untyped]
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as service

        outer = self
        self.failing = True
        self.calls = 0
        self.spans = 0

        class Servicer(service.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceResponse,
                )

                outer.calls += 1
                if outer.failing:
                    context.set_trailing_metadata((("google.rpc.retryinfo-bin", b"\xff\xff\xff"),))
                    context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
                outer.spans += sum(
                    len(s.spans) for r in request.resource_spans for s in r.scope_spans
                )
                return ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service.add_TraceServiceServicer_to_server(Servicer(), self.server)  # type: ignore[no-untyped-call]
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None).wait(5)


def test_a_malformed_retry_info_holds_the_batch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """UNAVAILABLE with a RetryInfo trailer that does not parse: the batch is held (the
    collector asked for a retry) and delivered once the collector takes it, not failed."""
    receiver = _MalformedRetryInfo()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
        monkeypatch.setenv(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{receiver.port}"
        )
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")  # one call per attempt
        telemetry = at.configure(CONFIG)
        try:
            _spans(3)
            assert _eventually(lambda: _settled(telemetry.stats()["otlp"]))
            held = telemetry.stats()["otlp"]
            receiver.failing = False
            assert telemetry.flush(10.0)
            stats = telemetry.stats()["otlp"]
        finally:
            telemetry.shutdown(2.0)
        assert (held.failed, held.buffered) == (0, 3), held
        assert (stats.exported, stats.failed, stats.buffered) == (3, 0, 0), stats
        assert receiver.spans == 3
        assert receiver.calls >= 2
        assert "DecodeError" not in caplog.text
    finally:
        receiver.stop()


def test_no_promise_of_retries_after_shutdown_gave_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An attempt still running when shutdown() gives up (a 503 retried inside it) fails
    after the shutdown's summary: no 'held and retried with backoff' warning follows it."""
    with OtlpReceiver("http/protobuf") as receiver:
        receiver.refuse_with = 503
        _point_at(receiver, monkeypatch, OTEL_EXPORTER_OTLP_TIMEOUT="30")
        caplog.set_level(logging.INFO, logger="asynctrace")
        telemetry = at.configure(CONFIG)
        processor = _processor(telemetry)
        _spans(3)
        assert _eventually(lambda: receiver.requests >= 1)
        telemetry.shutdown(0.2)  # the attempt waits out its backoff: abandoned
        processor._thread.join(10.0)
        assert not processor._thread.is_alive()
    messages = [r.getMessage() for r in caplog.records if r.name == "asynctrace"]
    summary = next(i for i, m in enumerate(messages) if "did not finish" in m)
    assert not [m for m in messages[summary:] if HELD_WARNING in m], messages
    assert telemetry.stats()["otlp"].dropped == 3
