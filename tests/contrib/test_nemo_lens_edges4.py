"""asynctrace_contrib.nemo_lens: lens's OTLP transport, async Ray methods, explicit buckets,
redaction, scopes across processes, lens's resource, groups before setup, strategies."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lens_state import forget_setup, forget_unknown_bucket_told
from asynctrace_contrib import nemo_lens
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace as at

sys.path.insert(0, str(Path(__file__).parent.parent))
from _otlp_receiver import OtlpReceiver

HAVE_LENS = importlib.util.find_spec("nemo") is not None and (
    importlib.util.find_spec("nemo.lens") is not None
)
PROTOCOL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "ASYNCTRACE_OTLP_PROTOCOL",
)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts as a process that never called setup_telemetry."""
    forget_setup(monkeypatch)
    for name in list(os.environ):
        if name.startswith("NEMO_LENS_") or name == "ASYNCTRACE_PROPAGATE_SCOPES":
            monkeypatch.delenv(name)
    yield
    at.shutdown()


def start(exporter: InMemorySpanExporter, **kwargs: Any) -> nemo_lens.TelemetryHandle:
    """setup_telemetry with every group on, recording into *exporter*."""
    config = nemo_lens.NemoLensConfig(enabled=True, span_groups="all", run_id="r1")
    return nemo_lens.setup_telemetry(config, span_exporter=exporter, **kwargs)


def finished(handle: nemo_lens.TelemetryHandle, exporter: InMemorySpanExporter) -> dict[str, Any]:
    assert handle.telemetry is not None
    assert handle.telemetry.flush()
    return {span.name: span for span in exporter.get_finished_spans()}


# --- OTLP transport ----------------------------------------------------------------------


def one_step_to(receiver: OtlpReceiver) -> None:
    """A lens setup exporting over OTLP (the variables set by the caller) sends one step
    span that *receiver* gets."""
    config = nemo_lens.NemoLensConfig(enabled=True, span_groups="all", exporter="otlp")
    handle = nemo_lens.setup_telemetry(config)
    with nemo_lens.managed_span("step", "rl.step"):
        pass
    assert handle.telemetry is not None
    assert handle.telemetry.flush()
    assert receiver.wait_for(1, timeout_s=20)
    handle.shutdown()
    assert [span.name for span in receiver.spans] == ["rl.step"]


def test_otlp_without_a_protocol_variable_goes_over_grpc_as_lens_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No protocol variable: lens sends gRPC, so a collector's gRPC port receives the spans."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    for name in PROTOCOL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with OtlpReceiver("grpc") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        one_step_to(receiver)


def test_a_protocol_variable_still_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: the spans go over HTTP, as under lens."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    for name in PROTOCOL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with OtlpReceiver("http/protobuf") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        one_step_to(receiver)


# --- traced_remote_call on an async def ---------------------------------------------------


class Actor:
    @nemo_lens.traced_remote_call
    async def work(self) -> int:
        await asyncio.sleep(0.01)
        with nemo_lens.managed_span("optimizer", "rl.inner"):
            await asyncio.sleep(0)
        return 1


def test_traced_remote_call_keeps_an_async_def_async_and_spans_its_body() -> None:
    """An async actor method stays a coroutine function (Ray runs it as async); its span
    covers the awaited body, whose spans are its children, under the caller's trace."""
    assert inspect.iscoroutinefunction(Actor.work)
    assert "_otel_carrier" in inspect.signature(Actor.work).parameters
    exporter = InMemorySpanExporter()
    handle = start(exporter)
    with nemo_lens.managed_span("job", "rl.job"):
        carrier = nemo_lens.inject_ray_context()
    result = asyncio.run(Actor().work(_otel_carrier=carrier))  # type: ignore[call-arg]
    assert result == 1
    spans = finished(handle, exporter)
    work, inner, job = spans["Actor.work"], spans["rl.inner"], spans["rl.job"]
    assert work.parent is not None
    assert work.parent.span_id == job.context.span_id
    assert inner.parent is not None
    assert inner.parent.span_id == work.context.span_id
    assert work.end_time >= inner.end_time


def test_traced_remote_call_refuses_generators() -> None:
    """A generator's span would end before its first item: refused, naming it."""

    def numbers() -> Iterator[int]:
        yield 1

    async def stream() -> Any:
        yield 1

    for fn in (numbers, stream):
        with pytest.raises(at.ConfigurationError, match=fn.__name__):
            nemo_lens.traced_remote_call(fn)


# --- an explicit rl.bucket ----------------------------------------------------------------


def bucket(name: str) -> dict[str, Any]:
    """The attribute a lens signature gives a bucket with."""
    return {"rl.bucket": name}


def test_an_rl_bucket_attribute_is_the_explicit_bucket() -> None:
    """``**{"rl.bucket": "idle"}`` wins over the group's bucket and the bucket scope; an
    umbrella drops it as asynctrace.managed_span(bucket=) does."""
    exporter = InMemorySpanExporter()
    handle = start(exporter)
    with nemo_lens.managed_span("reward", "rl.idle", **bucket("idle")):
        pass
    with at.bucket_scope(at.Bucket.OVERHEAD):
        with nemo_lens.managed_span("generation", "rl.scoped", **bucket("Productive")):
            pass
    with nemo_lens.managed_span("job", "rl.umbrella", **bucket("productive")):
        pass
    spans = finished(handle, exporter)
    assert spans["rl.idle"].attributes["rl.bucket"] == "idle"
    assert spans["rl.scoped"].attributes["rl.bucket"] == "productive"
    assert "rl.bucket" not in spans["rl.umbrella"].attributes


def test_an_unknown_rl_bucket_is_told_once_and_the_span_recorded(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lens has no buckets: its code may use the key for a label of its own. The span is
    recorded with its group's bucket, the value left out, told once; never a raise."""
    exporter = InMemorySpanExporter()
    handle = start(exporter)
    forget_unknown_bucket_told(monkeypatch)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            with nemo_lens.managed_span("reward", "rl.x", **bucket("compute")):
                pass
    assert handle.telemetry is not None
    assert handle.telemetry.flush()
    spans = [s for s in exporter.get_finished_spans() if s.name == "rl.x"]
    assert [dict(s.attributes or {}).get("rl.bucket") for s in spans] == ["productive"] * 3
    told = [r for r in caplog.records if "names no bucket" in r.getMessage()]
    assert len(told) == 1, told


# --- redaction ----------------------------------------------------------------------------

CREDENTIALS: dict[str, Any] = {
    "authorization": "Bearer abc.def",
    "cookie": "session=s3cr3t",
    "passwd": "hunter2",
    "credentials": "user:pw",
    "client_secret": "cs",
}


def test_redaction_covers_asynctrace_credentials_and_secrets_in_values() -> None:
    """asynctrace's credential names are redacted too, and a URL's userinfo or a token in
    a query inside any string value; data keys stay as given."""
    exporter = InMemorySpanExporter()
    handle = start(exporter)
    given: dict[str, Any] = {
        **CREDENTIALS,
        "endpoint": "http://user:pw@h:1/x?token=abc",
        "urls": ["http://u:hunter3@h/", "plain"],
        "max_tokens": 5,
    }
    with nemo_lens.managed_span("step", "rl.step", **given):
        pass
    with nemo_lens.span_cm("rl.cm", **given):
        pass
    spans = finished(handle, exporter)
    for name in ("rl.step", "rl.cm"):
        attributes = spans[name].attributes
        for key in CREDENTIALS:
            assert attributes[key] == "[REDACTED]", (name, key)
        recorded = json.dumps([attributes["endpoint"], list(attributes["urls"])])
        for secret in ("pw@", "token=abc", "hunter3"):
            assert secret not in recorded, (name, recorded)
        assert list(attributes["urls"])[1] == "plain"
        assert attributes["max_tokens"] == 5
    assert nemo_lens.redact_value("Authorization", "Bearer x") == "[REDACTED]"
    assert "pw" not in nemo_lens.redact_value("url", "http://u:pw@h/")
    assert "abc" not in nemo_lens.redact_value("header", "Bearer abc")


def test_text_that_is_data_is_recorded_as_given() -> None:
    """Only a URL or a ``Bearer``/``Basic`` value is redacted inside text: configuration
    text that merely looks like ``key=value`` is data."""
    for text in (
        "max_new_tokens=64, temperature=0.7",
        "vllm serve --max-num-batched-tokens 8192 --tokenizer llama",
        "sort_key=length",
    ):
        assert nemo_lens.redact_value("args", text) == text


# --- scopes across processes ------------------------------------------------------------


def test_propagate_scopes_keyword_and_variable_send_the_scopes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``propagate_scopes=True`` (or ASYNCTRACE_PROPAGATE_SCOPES=1) puts the iteration in
    the carrier; by default it is not there, as in asynctrace."""

    def carrier(**kwargs: Any) -> dict[str, str]:
        start(InMemorySpanExporter(), _allow_reinit=True, **kwargs)
        with at.iteration_scope(3), nemo_lens.managed_span("step", "rl.step"):
            return nemo_lens.inject_ray_context()

    assert "baggage" not in carrier()
    assert "asynctrace.iteration=3" in carrier(propagate_scopes=True).get("baggage", "")
    monkeypatch.setenv("ASYNCTRACE_PROPAGATE_SCOPES", "1")
    assert "asynctrace.iteration=3" in carrier().get("baggage", "")
    assert "baggage" not in carrier(propagate_scopes=False)


# --- lens's resource ----------------------------------------------------------------------


def test_the_resource_has_lens_attributes_and_the_caller_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEPLOYMENT_ENV", "staging")
    exporter = InMemorySpanExporter()
    config = nemo_lens.NemoLensConfig(
        enabled=True, span_groups="all", run_id="r1", user="alice", export_strategy="all_ranks"
    )
    handle = nemo_lens.setup_telemetry(
        config,
        rank=2,
        world_size=4,
        span_exporter=exporter,
        resource_attributes={"deployment.environment": "prod", "team": "rl"},
    )
    with nemo_lens.managed_span("step", "rl.step"):
        pass
    resource = finished(handle, exporter)["rl.step"].resource.attributes
    assert resource["nemo.run.id"] == "r1"
    assert resource["service.instance.id"] == "r1-rank2"
    assert (resource["dl.rank"], resource["dl.world_size"]) == (2, 4)
    assert resource["nemo.user.id"] == "alice"
    assert resource["deployment.environment"] == "prod"
    assert resource["team"] == "rl"


# --- set_enabled_span_groups before setup_telemetry -------------------------------------

BEFORE_SETUP = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from {module} import set_enabled_span_groups, is_span_group_enabled, managed_span
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
set_enabled_span_groups(frozenset({{"step"}}))
print(is_span_group_enabled("step"), is_span_group_enabled("job"))
with managed_span("step", "rl.grpo.step"):
    pass
with managed_span("job", "rl.job"):
    pass
print(",".join(span.name for span in exporter.get_finished_spans()))
"""


def run_script(source: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_LENS_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_set_enabled_span_groups_before_setup_records_through_the_global_provider() -> None:
    """lens's test pattern (a global SDK provider, then set_enabled_span_groups) records."""
    ported = run_script(BEFORE_SETUP.format(module="asynctrace_contrib.nemo_lens"))
    assert ported == ["True", "False", "rl.grpo.step"]
    if HAVE_LENS:
        assert run_script(BEFORE_SETUP.format(module="nemo.lens")) == ported


def test_set_enabled_span_groups_then_setup_telemetry_takes_over() -> None:
    """A later setup_telemetry replaces what set_enabled_span_groups started, without the
    second-call RuntimeError, and its groups apply."""
    exporter = InMemorySpanExporter()
    nemo_lens.set_enabled_span_groups({"step"})  # no SDK provider globally here: a warning
    handle = start(exporter)
    assert nemo_lens.is_span_group_enabled("job")
    with nemo_lens.managed_span("job", "rl.job"):
        pass
    assert list(finished(handle, exporter)) == ["rl.job"]


# --- export strategies, linked spans -----------------------------------------------------


def test_an_unknown_strategy_raises_even_when_disabled_as_in_lens() -> None:
    config = nemo_lens.NemoLensConfig(enabled=False, export_strategy="bogus")
    with pytest.raises(ValueError, match="bogus"):
        nemo_lens.setup_telemetry(config)
    assert not nemo_lens.setup_telemetry(config, export_strategy=lambda *_: True).is_exporting


def test_a_registered_strategy_decides_which_ranks_export() -> None:
    nemo_lens.register_export_strategy("even", lambda config, rank, size: rank % 2 == 0)
    try:
        assert "even" in nemo_lens.registered_strategies()
        with pytest.raises(ValueError, match="already registered"):
            nemo_lens.register_export_strategy("even", lambda *_: True)
        config = nemo_lens.NemoLensConfig(enabled=True, span_groups="all", export_strategy="even")
        exporter = InMemorySpanExporter()
        off = nemo_lens.setup_telemetry(config, rank=1, world_size=2, span_exporter=exporter)
        on = nemo_lens.setup_telemetry(
            config, rank=2, world_size=4, span_exporter=exporter, _allow_reinit=True
        )
        assert (off.is_exporting, on.is_exporting) == (False, True)
    finally:
        nemo_lens.unregister_export_strategy("even")
    assert "even" not in nemo_lens.registered_strategies()
    with pytest.raises(ValueError, match="built-in"):
        nemo_lens.unregister_export_strategy("single_rank")


def test_create_linked_span_links_to_the_remote_span() -> None:
    exporter = InMemorySpanExporter()
    handle = start(exporter)
    with nemo_lens.managed_span("step", "rl.stage0") as stage0:
        carrier = nemo_lens.inject_ray_context()
    span = nemo_lens.create_linked_span(
        handle.tracer, "rl.stage1", remote_carrier=carrier, stage=1, token="t"
    )
    span.end()
    spans = finished(handle, exporter)
    linked = spans["rl.stage1"]
    assert [link.context.span_id for link in linked.links] == [stage0.get_span_context().span_id]
    assert linked.parent is None
    assert linked.attributes["stage"] == 1
    assert linked.attributes["token"] == "[REDACTED]"


_BROKEN_GRPC = """
import json, os, sys
sys.modules["grpc"] = None  # grpcio missing, or a wheel that will not load on this host
os.environ.pop("OTEL_EXPORTER_OTLP_PROTOCOL", None)
os.environ.pop("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", None)
import asynctrace as at
from asynctrace_contrib import nemo_lens
handle = nemo_lens.setup_telemetry(nemo_lens.NemoLensConfig(enabled=True, exporter="otlp"))
print(json.dumps({"protocol": at.current_telemetry().settings.otlp_protocol}))
at.shutdown(timeout_s=0.1)
"""


def test_a_grpc_exporter_that_cannot_load_falls_back_to_http_as_lens_does() -> None:
    """lens tries the gRPC exporter's import and falls back to HTTP when it fails; so does
    the port (the package present, grpcio not importable)."""
    done = subprocess.run(
        [sys.executable, "-c", _BROKEN_GRPC], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["protocol"] != "grpc"
