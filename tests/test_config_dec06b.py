"""Configuration checks: limits past a deque's length, keys a provider handed in ignores,
OTLP variables the exporter reads as written, int64 resource values, variables named in
messages, one rule for numbers written as text, and enable_telemetry's own checks."""

from __future__ import annotations

import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import asynctrace as at
from asynctrace import ConfigurationError, TelemetryConfig, _config_env, _provider_keys
from asynctrace._settings import resolve
from asynctrace._state import GATE

sys.path.insert(0, str(Path(__file__).parent))
from _otlp_receiver import OtlpReceiver


@pytest.fixture(autouse=True)
def _nothing_told_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warnings these tests expect are told once a process: each test starts as if
    none had been (a rerun in the same worker sees them again)."""
    monkeypatch.setattr(_provider_keys, "_told_ignored", set())
    monkeypatch.setattr(_config_env, "_warned_vars", set())


PROVIDERS = ["fast", "sdk"]


def _memory(**config: Any) -> dict[str, Any]:
    return {"enabled": True, "exporters": ["memory"], "span_groups": "all", **config}


def _one_span(telemetry: at.Telemetry) -> list[Any]:
    """Record one span with three attributes and an event; the spans the memory exporter got."""
    with at.managed_span("step", "s") as span:
        span.set_attribute("a", 1)
        span.set_attribute("b", 2)
        span.set_attribute("c", 3)
        span.add_event("e")
    assert telemetry.flush(5.0)
    assert telemetry.memory_exporter is not None
    return list(telemetry.memory_exporter.get_finished_spans())


# -- span limits past sys.maxsize ------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_span_limit_past_sys_maxsize_is_refused_naming_the_key(provider: str) -> None:
    """span_limits.max_events=2**63 fails configure (every span would be lost), null offered."""
    with pytest.raises(ConfigurationError) as raised:
        at.configure(_memory(provider=provider, span_limits={"max_events": 2**63}))
    message = str(raised.value)
    assert message.startswith("span_limits.max_events: 9223372036854775808 is not accepted")
    assert f"from 0 to {sys.maxsize}" in message
    assert "null for no limit" in message


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_limit_variable_past_sys_maxsize_is_refused_naming_it(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_SPAN_EVENT_COUNT_LIMIT=2**63 fails configure, naming the variable and its text."""
    monkeypatch.setenv("OTEL_SPAN_EVENT_COUNT_LIMIT", str(2**63))
    with pytest.raises(ConfigurationError, match="^OTEL_SPAN_EVENT_COUNT_LIMIT: '9223372036"):
        at.configure(_memory(provider=provider))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_limits_of_sys_maxsize_record_every_span(provider: str) -> None:
    """The largest limit accepted works on both providers: the span is recorded whole."""
    limits = {"max_events": sys.maxsize, "max_links": sys.maxsize, "max_attributes": sys.maxsize}
    telemetry = at.configure(_memory(provider=provider, span_limits=limits))
    try:
        (span,) = _one_span(telemetry)
    finally:
        assert telemetry.shutdown(5.0)
    assert {"a", "b", "c"} <= set(span.attributes or {})
    assert [event.name for event in span.events] == ["e"]


# -- keys beside a TracerProvider handed in --------------------------------------------

_OWN_PROVIDER_KEYS = [
    ("sampling_ratio", 0.0, "sampler"),
    ("sample_rate", 0.0, "sampler"),
    ("span_limits", {"max_attributes": 1}, "span limits"),
    ("resource_attributes", {"team": "rl"}, "resource"),
    ("service_name", "svc", "resource"),
]


@pytest.mark.parametrize(("key", "value", "owns"), _OWN_PROVIDER_KEYS)
def test_a_key_the_handed_in_provider_ignores_is_refused(key: str, value: Any, owns: str) -> None:
    """sampling_ratio=0.0 beside provider=TracerProvider() is an error naming it, not ignored."""
    provider = TracerProvider()
    with pytest.raises(ConfigurationError) as raised:
        at.configure(_memory(provider=provider, **{key: value}))
    message = str(raised.value)
    assert message.startswith(f"{key}={value!r}: not accepted with provider=")
    assert f"its own {owns}" in message
    assert "configure the provider" in message
    assert GATE.provider is not provider  # nothing installed


def test_keys_left_at_their_defaults_beside_a_provider_say_nothing() -> None:
    """No key given: no error and no warning; the provider's resource reaches the spans and
    the chrome file alike."""
    provider = TracerProvider(resource=Resource.create({"service.name": "mine", "team": "rl"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        telemetry = at.configure(_memory(provider=provider))
    try:
        (span,) = _one_span(telemetry)
    finally:
        assert telemetry.shutdown(5.0)
    assert span.resource.attributes["service.name"] == "mine"
    assert telemetry.settings.resource_attributes["service.name"] == "mine"
    assert telemetry.settings.resource_attributes["team"] == "rl"  # the goodput metrics' too


def test_the_chrome_file_names_the_handed_in_providers_service(tmp_path: Path) -> None:
    """The chrome file's process says the service the provider's spans carry."""
    provider = TracerProvider(resource=Resource.create({"service.name": "mine"}))
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["chrome"],
            "span_groups": "all",
            "provider": provider,
            "output_dir": str(tmp_path),
        }
    )
    try:
        with at.managed_span("step", "s"):
            pass
    finally:
        assert telemetry.shutdown(5.0)
    assert telemetry.trace_file is not None
    lines = [json.loads(line) for line in Path(telemetry.trace_file).read_text().splitlines()]
    (process,) = [line for line in lines if line.get("name") == "process_name"]
    assert process["args"]["service"] == "mine"
    assert process["args"]["run_id"] == telemetry.run_id  # the run's own attributes stay


def test_a_variable_the_handed_in_provider_ignores_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ASYNCTRACE_SAMPLING_RATIO beside provider=TracerProvider(): one warning naming the
    variable, startup goes on, the provider's sampler records every span."""
    provider = TracerProvider()
    base = TelemetryConfig.from_mapping(_memory(provider=provider))
    env = {"ASYNCTRACE_SAMPLING_RATIO": "0.0", "ASYNCTRACE_SERVICE_NAME": "from-env"}
    config = TelemetryConfig.from_env(env, base=base)
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        with pytest.warns(UserWarning, match="is ignored") as warned:
            telemetry = at.configure(config)
        assert any("ASYNCTRACE_SAMPLING_RATIO=0.0 is ignored" in str(w.message) for w in warned)
        try:
            spans = _one_span(telemetry)
        finally:
            assert telemetry.shutdown(5.0)
        told = [r.getMessage() for r in caplog.records if "is ignored" in r.getMessage()]
        assert len(told) == 2
        assert any("ASYNCTRACE_SERVICE_NAME" in line for line in told)
        caplog.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            again = at.configure(config)  # once: no second warning
        assert again.shutdown(5.0)
    assert not [r for r in caplog.records if "is ignored" in r.getMessage()]
    assert len(spans) == 1
    assert spans[0].resource.attributes["service.name"] != "from-env"


def test_a_variable_changed_in_code_counts_as_given_in_code() -> None:
    """A field from_env set, then set again in code, is the code's: refused beside a provider."""
    config = TelemetryConfig.from_env(
        {"ASYNCTRACE_SAMPLING_RATIO": "0.5"}, base=TelemetryConfig(provider=TracerProvider())
    )
    config.sampling_ratio = 0.25
    with pytest.raises(ConfigurationError, match=r"^sampling_ratio=0\.25: not accepted"):
        resolve(config)


# -- OTLP variables the exporter reads as written --------------------------------------


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318\n"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318 /x"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces "),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "   "),
    ],
)
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_an_endpoint_with_whitespace_around_it_fails_configure(
    var: str, value: str, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exporter keeps the whitespace in the URL (every export would fail): refused."""
    if protocol == "grpc":
        pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigurationError, match=f"^{var}: .* has whitespace after or inside"):
        at.configure(_memory(exporters=["otlp"], otlp_protocol=protocol))


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_an_endpoint_with_whitespace_before_it_is_accepted(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """URL parsing drops leading whitespace, as the exporters' requests do: accepted, and
    the spans reach the collector."""
    if protocol == "grpc":
        pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    with OtlpReceiver(protocol) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "  " + receiver.endpoint)
        telemetry = at.configure(_memory(exporters=["otlp"], otlp_protocol=protocol))
        with at.managed_span("step", "delivered"):
            pass
        assert telemetry.shutdown(timeout_s=10.0)
        assert receiver.wait_for(1, timeout_s=10.0)
        assert [span.name for span in receiver.spans] == ["delivered"]
        assert telemetry.stats()["otlp"].exported == 1


@pytest.mark.parametrize("timeout", ["1e10", "9223372036"])
def test_a_timeout_longer_than_a_thread_can_wait_fails_configure(
    timeout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_TIMEOUT=1e10 would fail every export: refused with the bound."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", timeout)
    with pytest.raises(ConfigurationError) as raised:
        at.configure(_memory(exporters=["otlp"]))
    message = str(raised.value)
    assert message.startswith(f"OTEL_EXPORTER_OTLP_TIMEOUT: {timeout!r} is longer than a thread")
    assert "<= 4.61169e+09" in message


def test_a_timeout_at_the_bound_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long timeout a thread can still wait for passes."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "4e9")
    telemetry = at.configure(_memory(exporters=["otlp"]))
    assert telemetry.shutdown(5.0)


# -- resource attribute integers -------------------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "key"),
    [
        ({"x": 2**63}, "resource_attributes.x"),
        ({"x": -(2**63) - 1}, "resource_attributes.x"),
        ({"x": [1, 2**64]}, r"resource_attributes.x\[1\]"),
    ],
)
def test_a_resource_integer_outside_int64_is_refused(attributes: Any, key: str) -> None:
    """OTLP would leave it out of every export: refused, naming the attribute."""
    with pytest.raises(ConfigurationError, match=f"^{key}: .* 64-bit integers"):
        at.configure(_memory(resource_attributes=attributes))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_resource_integers_at_the_int64_bounds_are_kept(provider: str) -> None:
    """The bounds themselves are accepted and reach the spans."""
    attributes = {"hi": 2**63 - 1, "lo": -(2**63), "both": [-(2**63), 2**63 - 1]}
    telemetry = at.configure(_memory(provider=provider, resource_attributes=attributes))
    try:
        (span,) = _one_span(telemetry)
    finally:
        assert telemetry.shutdown(5.0)
    assert span.resource.attributes["hi"] == 2**63 - 1
    assert tuple(span.resource.attributes["both"]) == (-(2**63), 2**63 - 1)


# -- variables named in messages, typo hints -------------------------------------------


def test_a_rate_conflict_between_variables_names_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """ASYNCTRACE_SAMPLE_RATE vs ASYNCTRACE_SAMPLING_RATIO: the error names the variables."""
    monkeypatch.setenv("ASYNCTRACE_ENABLED", "1")
    monkeypatch.setenv("ASYNCTRACE_EXPORTERS", "memory")
    monkeypatch.setenv("ASYNCTRACE_SAMPLE_RATE", "0.2")
    monkeypatch.setenv("ASYNCTRACE_SAMPLING_RATIO", "0.5")
    with pytest.raises(
        ConfigurationError,
        match=r"^ASYNCTRACE_SAMPLE_RATE: 0\.2 is not accepted with ASYNCTRACE_SAMPLING_RATIO=0\.5",
    ):
        at.configure()
    monkeypatch.delenv("ASYNCTRACE_SAMPLING_RATIO")  # the key in code is named as the key
    config = TelemetryConfig.from_env(base=TelemetryConfig(sampling_ratio=0.5))
    with pytest.raises(ConfigurationError, match=r"with sampling_ratio=0\.5"):
        resolve(config)


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("ASYNCTRACE_enabled", "ASYNCTRACE_ENABLED"),
        ("ASYNCTRACE_Exporters", "ASYNCTRACE_EXPORTERS"),
        ("asynctrace_SPAN_GROUPS", "ASYNCTRACE_SPAN_GROUPS"),
    ],
)
def test_a_variable_in_the_wrong_case_gets_the_name_it_spells(typo: str, meant: str) -> None:
    """The hint compares names in upper case (the test-session variables: the next test)."""
    with pytest.warns(UserWarning, match="did you mean") as told:
        TelemetryConfig.from_env({typo: "1"})
    (message,) = [str(w.message) for w in told if typo in str(w.message)]
    assert message.endswith(f"{typo}; did you mean {meant}? (variable names are case-sensitive)")


def test_no_typo_hint_offers_a_test_sessions_variable() -> None:
    """ASYNCTRACE_FUZZ, _SOAK_SCALE, ... are read quietly but never suggested."""
    typos = ["ASYNCTRACE_FUZ", "ASYNCTRACE_SOAK_SCAL", "ASYNCTRACE_TORCH_REQUIREMEN"]
    with pytest.warns(UserWarning, match="ignoring unknown environment variable") as told:
        TelemetryConfig.from_env(dict.fromkeys(typos, "1"))
    messages = [str(w.message) for w in told]
    assert len(messages) == len(typos)
    for word in ("FUZZ", "SOAK", "TORCH"):
        assert not [m for m in messages if f"did you mean ASYNCTRACE_{word}" in m]


def test_the_export_ranks_variable_is_told_the_syntax_a_variable_takes() -> None:
    """ASYNCTRACE_EXPORT_RANKS='[0, 8]' is refused without offering '[0, 8]' as an example."""
    env = {"ASYNCTRACE_ENABLED": "1", "ASYNCTRACE_EXPORT_RANKS": "[0, 8]"}
    with pytest.raises(ConfigurationError) as raised:
        TelemetryConfig.from_env(env)
    message = str(raised.value)
    assert message.startswith("ASYNCTRACE_EXPORT_RANKS: '[0, 8]' is not accepted")
    assert "[0, 8]" not in message.partition("accepted:")[2]
    assert "0,8" in message.partition("accepted:")[2]


# -- one rule for numbers written as text ----------------------------------------------

_NOT_NUMBERS = ["\uff11\uff12", "\u0663\u0663", "1_000", "0x10", "nan", "inf", " "]


def _refused(mapping: dict[str, Any]) -> str:
    with pytest.raises(ConfigurationError) as raised:
        resolve(TelemetryConfig.from_mapping({"enabled": True, **mapping}), world_size=16)
    return str(raised.value)


@pytest.mark.parametrize("text", _NOT_NUMBERS)
@pytest.mark.parametrize(
    ("key", "where"),
    [
        ("max_queue_size", lambda t: {"max_queue_size": t}),
        ("schedule_delay_millis", lambda t: {"schedule_delay_millis": t}),
        ("shutdown_timeout_s", lambda t: {"shutdown_timeout_s": t}),
        ("sample_rate", lambda t: {"sample_rate": t}),
        ("loop_stall_threshold_ms", lambda t: {"loop_stall_threshold_ms": t}),
        ("retry_buffer_spans", lambda t: {"retry_buffer_spans": t}),
        ("session_tracer.flush_threshold", lambda t: {"session_tracer": {"flush_threshold": t}}),
        ("goodput.prometheus_port", lambda t: {"goodput": {"prometheus_port": t}}),
        ("goodput.grace_s", lambda t: {"goodput": {"grace_s": t}}),
        ("span_limits.max_attributes", lambda t: {"span_limits": {"max_attributes": t}}),
    ],
)
def test_text_that_is_not_an_ascii_number_is_refused_quoted(
    key: str, where: Any, text: str
) -> None:
    """Full-width or Arabic-Indic digits, underscores, hex, nan: refused, the text quoted."""
    assert _refused(where(text)).startswith(f"{key}: {text!r} is not accepted")


@pytest.mark.parametrize("text", ["sampled:\u0660.\u0665", "sampled:1_0", "\uff10", "0,\u0663"])
def test_export_ranks_follow_the_same_rule(text: str) -> None:
    """export_ranks' ranks and rate are read by the same rule as every other number."""
    assert _refused({"export_ranks": text}).startswith(f"export_ranks: {text!r} is not accepted")


@pytest.mark.parametrize(
    ("var", "text"),
    [
        ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1_0"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "\uff11\uff10"),
        ("LOCAL_RANK", "\u0661"),
    ],
)
def test_variables_follow_the_same_rule(
    var: str, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Limits, the OTLP timeout and the launcher's ranks take no other digits either."""
    monkeypatch.setenv(var, text)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(ConfigurationError, match=f"^{var}: {text!r}"):
        at.configure(_memory(exporters=["otlp"]))


def test_ascii_numbers_with_a_sign_exponent_or_spaces_are_read() -> None:
    """What the rule takes: a sign, a decimal point, an exponent, surrounding spaces."""
    settings = resolve(
        TelemetryConfig.from_mapping(
            {
                "enabled": True,
                "max_queue_size": " +5000 ",
                "schedule_delay_millis": "2.5e2",
                "sample_rate": ".5",
                "export_ranks": "+0, 3",
                "goodput": {"prometheus_port": "9464", "grace_s": "1e0"},
                "span_limits": {"max_attributes": "12"},
            }
        ),
        world_size=4,
    )
    assert settings.max_queue_size == 5000
    assert settings.schedule_delay_millis == 250.0
    assert settings.sampling.ratio == 0.5
    assert settings.export_ranks == "0,3"
    assert settings.goodput is not None
    assert settings.goodput.grace_s == 1.0
    assert settings.span_limits.max_attributes == 12


# -- enable_telemetry takes what configure takes ---------------------------------------


def test_enable_telemetry_refuses_a_spec_that_names_no_group() -> None:
    """ " , " is refused by both; "" (a spec built from an empty list) stays "every group off"."""
    with pytest.raises(ConfigurationError, match="span_groups: ' , ' names no group"):
        at.enable_telemetry(TracerProvider(), span_groups=" , ")
    with pytest.raises(ConfigurationError, match="span_groups: ' , ' names no group"):
        at.configure(_memory(span_groups=" , "))
    at.enable_telemetry(TracerProvider(), span_groups="")
    assert at.enabled_span_groups() == frozenset()


@pytest.mark.parametrize(("text", "on"), [("true", True), ("0", False), ("on", True)])
def test_enable_telemetry_takes_propagate_scopes_as_configure_does(text: str, on: bool) -> None:
    """propagate_scopes="true" is accepted by both, as the configuration key's text."""
    at.enable_telemetry(TracerProvider(), span_groups="step", propagate_scopes=text)  # type: ignore[arg-type]
    assert GATE.propagate_scopes is on
    assert resolve(TelemetryConfig.from_mapping({"propagate_scopes": text})).propagate_scopes is on


def test_enable_telemetry_refuses_what_configure_refuses_for_propagate_scopes() -> None:
    """propagate_scopes="maybe" gets the same message from both."""
    with pytest.raises(ConfigurationError) as direct:
        at.enable_telemetry(TracerProvider(), propagate_scopes="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as configured:
        at.configure(_memory(propagate_scopes="maybe"))
    assert str(direct.value) == str(configured.value)


@pytest.mark.parametrize("text", ["\u0660.\u0665", "0_5", "\uff10.5"])
def test_the_sampler_argument_follows_the_number_rule(text: str) -> None:
    """OTEL_TRACES_SAMPLER_ARG is read by the rule of every number read from text: other
    scripts' digits and underscores are warned about and the SDK's 1.0 applies."""
    from asynctrace._fast import sampling_from

    env = {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": text}
    with pytest.warns(UserWarning, match="OTEL_TRACES_SAMPLER_ARG: ignoring"):
        sampling = sampling_from(None, env)
    assert sampling.ratio == 1.0
    env["OTEL_TRACES_SAMPLER_ARG"] = " 0.5 "
    assert sampling_from(None, env).ratio == 0.5


def test_set_span_groups_refuses_a_spec_that_names_no_group() -> None:
    """set_span_groups takes the syntax enable_telemetry takes: " , " names no group."""
    from asynctrace.testing import capture_spans

    with capture_spans("job"):
        with pytest.raises(at.ConfigurationError, match="names no group"):
            at.set_span_groups(" , ")
        assert at.is_span_group_enabled("job")  # the refused spec changed nothing
        assert at.set_span_groups("") == frozenset()  # every group off, as documented


def test_a_copy_of_an_environment_config_keeps_its_variables_warned_not_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """dataclasses.replace() copies a from_env() config without its mark of which fields
    variables set: a value equal to the environment's still counts as the environment's
    (one warning), beside a TracerProvider handed in."""
    import dataclasses

    monkeypatch.setenv("ASYNCTRACE_SERVICE_NAME", "trainer-copy")
    provider = TracerProvider(resource=Resource.create({"service.name": "mine"}))
    config = dataclasses.replace(
        TelemetryConfig.from_env(), enabled=True, exporters=["memory"], provider=provider
    )
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, "asynctrace"):
        warnings.simplefilter("ignore")
        telemetry = at.configure(config)
    try:
        assert "ASYNCTRACE_SERVICE_NAME='trainer-copy' is ignored" in caplog.text
    finally:
        telemetry.shutdown()
    changed = dataclasses.replace(config, service_name="set-in-code")
    with pytest.raises(ConfigurationError, match="service_name='set-in-code'"):
        at.configure(changed)
