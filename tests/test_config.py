"""TelemetryConfig and its resolution: mappings, environment variables, validation."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from typing import Any

import pytest

from asynctrace import ConfigurationError
from asynctrace._config import SessionTracerConfig, TelemetryConfig
from asynctrace._config_env import ENV_VARS
from asynctrace._goodput_settings import GoodputSettings
from asynctrace._ranks import parse_export_ranks
from asynctrace._settings import new_run_id, resolve


def test_defaults_follow_the_spec() -> None:
    """Field names and defaults are the contract (SPEC §8)."""
    config = TelemetryConfig()
    assert config.enabled is False
    assert config.span_groups == "default"
    assert config.exporters == ["chrome"]
    assert config.handle_sigterm is False
    assert config.session_tracer == SessionTracerConfig(enabled=False, flush_threshold=100)
    assert config.max_queue_size >= config.max_export_batch_size >= 1


def test_from_mapping_accepts_a_yaml_block() -> None:
    """A ``telemetry:`` block with nested session_tracer and a comma-separated exporter list."""
    config = TelemetryConfig.from_mapping(
        {
            "enabled": True,
            "span_groups": "per_step,per_prompt",
            "exporters": "chrome, OTLP",
            "output_dir": "/tmp/traces/{run_id}",
            "service_name": "trainer",
            "run_id": "exp-1",
            "session_tracer": {"enabled": True, "flush_threshold": 10},
            "resource_attributes": {"team": "rl", "gpus": [0, 1]},
            "handle_sigterm": "yes",
            "max_queue_size": 100,
            "max_export_batch_size": "10",
            "schedule_delay_millis": 50,
            "shutdown_timeout_s": 2,
        }
    )
    assert config.enabled is True
    assert config.exporters == ["chrome", "otlp"]
    assert config.session_tracer == SessionTracerConfig(enabled=True, flush_threshold=10)
    assert config.resource_attributes == {"team": "rl", "gpus": (0, 1)}
    assert config.handle_sigterm is True
    assert config.max_export_batch_size == 10
    assert config.schedule_delay_millis == 50.0


def test_from_mapping_rejects_unknown_keys_listing_the_accepted_ones() -> None:
    """A typo is an error that names the key and every accepted key."""
    with pytest.raises(ConfigurationError) as info:
        TelemetryConfig.from_mapping({"enabled": True, "exporter": ["chrome"]})
    message = str(info.value)
    assert "'exporter'" in message
    for field in dataclasses.fields(TelemetryConfig):
        assert field.name in message


def test_session_tracer_mapping_rejects_unknown_keys() -> None:
    """The nested block is checked too."""
    with pytest.raises(ConfigurationError, match="flush_treshold.*accepted keys: enabled"):
        TelemetryConfig.from_mapping({"session_tracer": {"flush_treshold": 3}})


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("enabled", "maybe", "true/false"),
        ("propagate_scopes", "sometimes", "true/false"),
        ("propagate_scopes", 2, "true/false"),
        ("max_queue_size", -1, "an integer >= 1"),
        ("max_queue_size", True, "an integer >= 1"),
        ("max_export_batch_size", 0, "an integer >= 1"),
        ("schedule_delay_millis", 0, "a finite number of milliseconds >= 1"),
        ("schedule_delay_millis", 1e-300, "a finite number of milliseconds >= 1"),
        ("shutdown_timeout_s", float("nan"), "a finite number >= 0"),
        ("exporters", ["chrome", "jaeger"], "chrome, otlp, console, memory"),
        ("exporters", 3, "exporter names"),
        ("span_groups", "default,-job", "no subtraction syntax"),
        ("span_groups", 5, "comma-separated string"),
        ("resource_attributes", {"a": {"b": 1}}, "str, bool, int, float"),
        ("output_dir", "", "non-empty directory path"),
        ("loop_stall_threshold_ms", 0.05, "milliseconds from 1 to 60000"),
    ],
)
def test_bad_values_name_key_value_and_accepted(key: str, value: Any, accepted: str) -> None:
    """Every rejected value says which key, what was given and what is accepted."""
    with pytest.raises(ConfigurationError) as info:
        TelemetryConfig.from_mapping({key: value})
    message = str(info.value)
    assert message.startswith(key)
    assert accepted in message


def test_from_env_reads_every_variable() -> None:
    """Each ASYNCTRACE_* variable sets its field."""
    env = {
        "ASYNCTRACE_ENABLED": "true",
        "ASYNCTRACE_SPAN_GROUPS": "all",
        "ASYNCTRACE_EXPORTERS": "memory,console",
        "ASYNCTRACE_OUTPUT_DIR": "/data/{run_id}",
        "ASYNCTRACE_SERVICE_NAME": "svc",
        "ASYNCTRACE_RUN_ID": "run-7",
        "ASYNCTRACE_RESOURCE_ATTRIBUTES": "team=rl,cluster=a%20b",
        "ASYNCTRACE_HANDLE_SIGTERM": "1",
        "ASYNCTRACE_SESSION_TRACER_ENABLED": "on",
        "ASYNCTRACE_SESSION_TRACER_FLUSH_THRESHOLD": "5",
        "ASYNCTRACE_SESSION_TRACER_MAX_PENDING": "900",
        "ASYNCTRACE_MAX_QUEUE_SIZE": "64",
        "ASYNCTRACE_MAX_EXPORT_BATCH_SIZE": "8",
        "ASYNCTRACE_SCHEDULE_DELAY_MILLIS": "20",
        "ASYNCTRACE_SHUTDOWN_TIMEOUT_S": "1.5",
        "ASYNCTRACE_PROVIDER": "SDK",
        "ASYNCTRACE_SAMPLING_RATIO": "0.25",
        "ASYNCTRACE_PROPAGATE_SCOPES": "yes",
        "ASYNCTRACE_LOOP_STALL_THRESHOLD_MS": "20",
        "ASYNCTRACE_OTLP_PROTOCOL": "grpc",
        "ASYNCTRACE_EXPORT_RANKS": "first",
        "ASYNCTRACE_SAMPLE_RATE": "0.25",
        "ASYNCTRACE_RETRY_BUFFER_SPANS": "100",
        "ASYNCTRACE_RETRY_BUFFER_BYTES": "4096",
        "ASYNCTRACE_GOODPUT": "true",
    }
    assert set(env) == set(ENV_VARS)
    config = TelemetryConfig.from_env(env)
    assert config == TelemetryConfig(
        enabled=True,
        span_groups="all",
        exporters=["memory", "console"],
        output_dir="/data/{run_id}",
        service_name="svc",
        run_id="run-7",
        session_tracer=SessionTracerConfig(enabled=True, flush_threshold=5, max_pending=900),
        resource_attributes={"team": "rl", "cluster": "a b"},
        handle_sigterm=True,
        max_queue_size=64,
        max_export_batch_size=8,
        schedule_delay_millis=20.0,
        shutdown_timeout_s=1.5,
        provider="sdk",
        sampling_ratio=0.25,
        propagate_scopes=True,
        loop_stall_threshold_ms=20.0,
        otlp_protocol="grpc",
        export_ranks=parse_export_ranks("export_ranks", "first"),
        sample_rate=0.25,
        retry_buffer_spans=100,
        retry_buffer_bytes=4096,
        goodput=GoodputSettings(),
    )


def test_from_env_overlays_a_base_without_mutating_it() -> None:
    """Unset and empty variables keep the base's values; the base object is unchanged."""
    base = TelemetryConfig(enabled=True, exporters=["memory"], run_id="base")
    snapshot = dataclasses.replace(base)
    config = TelemetryConfig.from_env(
        {"ASYNCTRACE_RUN_ID": "", "ASYNCTRACE_SPAN_GROUPS": "all"}, base=base
    )
    assert config.run_id == "base"
    assert config.span_groups == "all"
    assert config.exporters == ["memory"]
    assert base == snapshot


def test_from_env_falls_back_to_otel_bsp_variables() -> None:
    """Queue limits honour the standard OTEL_BSP_* variables unless ASYNCTRACE_* are set."""
    env = {
        "OTEL_BSP_MAX_QUEUE_SIZE": "300",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "30",
        "OTEL_BSP_SCHEDULE_DELAY": "250",
        "ASYNCTRACE_MAX_QUEUE_SIZE": "400",
    }
    config = TelemetryConfig.from_env(env)
    assert (config.max_queue_size, config.max_export_batch_size) == (400, 30)
    assert config.schedule_delay_millis == 250.0


def test_from_env_falls_back_to_otel_traces_exporter() -> None:
    """OTEL_TRACES_EXPORTER picks the exporters unless ASYNCTRACE_EXPORTERS is set; leniently."""
    assert TelemetryConfig.from_env({"OTEL_TRACES_EXPORTER": "otlp, console"}).exporters == [
        "otlp",
        "console",
    ]
    assert TelemetryConfig.from_env({"OTEL_TRACES_EXPORTER": "none"}).exporters == []
    env = {"OTEL_TRACES_EXPORTER": "zipkin", "ASYNCTRACE_EXPORTERS": "chrome"}
    assert TelemetryConfig.from_env(env).exporters == ["chrome"]
    # Set for other tools: names asynctrace lacks are ignored, with a warning.
    with pytest.warns(UserWarning, match=r"OTEL_TRACES_EXPORTER: ignoring 'jaeger'"):
        env = {"OTEL_TRACES_EXPORTER": "jaeger", "ASYNCTRACE_ENABLED": "1"}
        assert TelemetryConfig.from_env(env).exporters == ["chrome"]
    with pytest.warns(UserWarning, match="'zipkin'"):
        env = {"OTEL_TRACES_EXPORTER": "otlp,zipkin,none", "ASYNCTRACE_ENABLED": "1"}
        assert TelemetryConfig.from_env(env).exporters == ["otlp"]
    # Telemetry off: nothing to say (filterwarnings=error turns a warning into a failure).
    assert TelemetryConfig.from_env({"OTEL_TRACES_EXPORTER": "jaeger"}).enabled is False


def test_otel_sdk_disabled_wins() -> None:
    """OTEL_SDK_DISABLED=true turns telemetry off whatever ASYNCTRACE_ENABLED says."""
    env = {"ASYNCTRACE_ENABLED": "1", "OTEL_SDK_DISABLED": "true"}
    assert TelemetryConfig.from_env(env).enabled is False
    settings = resolve(TelemetryConfig(enabled=True), environ={"OTEL_SDK_DISABLED": "TRUE"})
    assert settings.enabled is False


def test_exporters_none_in_env_means_no_exporter() -> None:
    """``ASYNCTRACE_EXPORTERS=none`` is the way to ask for no exporter from the environment."""
    assert TelemetryConfig.from_env({"ASYNCTRACE_EXPORTERS": "none"}).exporters == []


def test_bad_env_values_name_the_variable() -> None:
    """A malformed variable is reported by its name."""
    with pytest.raises(ConfigurationError, match="^ASYNCTRACE_MAX_QUEUE_SIZE: 'lots'"):
        TelemetryConfig.from_env({"ASYNCTRACE_MAX_QUEUE_SIZE": "lots"})
    with pytest.raises(ConfigurationError, match="^ASYNCTRACE_RESOURCE_ATTRIBUTES: malformed"):
        TelemetryConfig.from_env({"ASYNCTRACE_RESOURCE_ATTRIBUTES": "novalue"})
    with pytest.raises(ConfigurationError, match="^ASYNCTRACE_EXPORTERS: unknown exporter"):
        TelemetryConfig.from_env({"ASYNCTRACE_EXPORTERS": "chrome,zipkin"})


def test_resolve_generates_a_run_id_on_a_copy() -> None:
    """An empty run_id is generated; the caller's object keeps its empty value."""
    config = TelemetryConfig(enabled=True)
    first = resolve(config, environ={})
    second = resolve(config, environ={})
    assert config.run_id == ""
    assert first.run_id
    assert first.run_id != second.run_id
    assert first.output_dir == f"asynctrace-traces/{first.run_id}"


def test_resolve_takes_the_run_id_from_the_environment() -> None:
    """ASYNCTRACE_RUN_ID (set by the driver) is used when the config has none."""
    settings = resolve(TelemetryConfig(enabled=True), environ={"ASYNCTRACE_RUN_ID": "shared"})
    assert settings.run_id == "shared"
    explicit = resolve(TelemetryConfig(run_id="own"), environ={"ASYNCTRACE_RUN_ID": "shared"})
    assert explicit.run_id == "own"


def test_resource_attributes() -> None:
    """service.name, run id, rank, world size, local rank, role, host, pid, then the user's."""
    settings = resolve(
        TelemetryConfig(
            enabled=True,
            service_name="trainer",
            run_id="r1",
            resource_attributes={"team": "rl", "host.name": "override"},
        ),
        rank=2,
        world_size=4,
        role="rollout",
        environ={"LOCAL_RANK": "1"},
    )
    assert dict(settings.resource_attributes) == {
        "service.name": "trainer",
        "asynctrace.run_id": "r1",
        "asynctrace.rank": 2,
        "asynctrace.world_size": 4,
        "asynctrace.local_rank": 1,
        "asynctrace.role": "rollout",
        "host.name": "override",
        "process.pid": os.getpid(),
        "team": "rl",
    }
    plain = resolve(TelemetryConfig(), environ={})
    assert "asynctrace.local_rank" not in plain.resource_attributes
    assert "asynctrace.role" not in plain.resource_attributes
    assert plain.resource_attributes["host.name"] == socket.gethostname()


def test_service_name_precedence() -> None:
    """Config, OTEL_SERVICE_NAME, service.name in OTEL_RESOURCE_ATTRIBUTES, then the default."""
    env = {"OTEL_SERVICE_NAME": "from-env", "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs"}
    assert resolve(TelemetryConfig(service_name="mine"), environ=env).service_name == "mine"
    assert resolve(TelemetryConfig(), environ=env).service_name == "from-env"
    env.pop("OTEL_SERVICE_NAME")
    assert resolve(TelemetryConfig(), environ=env).service_name == "from-attrs"
    assert resolve(TelemetryConfig(), environ={}).service_name == "asynctrace"


def test_trace_file_name_per_rank_and_role() -> None:
    """traces-r{rank}.jsonl for workers; other roles get their own name, so they never collide."""
    config = TelemetryConfig(enabled=True, run_id="r")
    assert resolve(config, rank=3, world_size=4).chrome_filename == "traces-r3.jsonl"
    assert resolve(config, rank=3, world_size=4, role="worker").chrome_filename == (
        "traces-r3.jsonl"
    )
    assert resolve(config, role="driver").chrome_filename == "traces-driver-r0.jsonl"


def test_output_dir_only_when_something_writes_files() -> None:
    """Without chrome or the session tracer, no directory is involved."""
    assert resolve(TelemetryConfig(exporters=["memory"]), environ={}).output_dir is None
    session = TelemetryConfig(exporters=["memory"], session_tracer={"enabled": True}, run_id="x")
    assert resolve(session, environ={}).output_dir == "asynctrace-traces/x"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 2, "world_size": 2}, "^rank: 2 is not accepted with world_size=2"),
        ({"rank": -1}, "^rank: -1"),
        ({"world_size": 0}, "^world_size: 0"),
        ({"role": "a/b"}, "^role: 'a/b'"),
    ],
)
def test_bad_process_identity(kwargs: dict[str, Any], match: str) -> None:
    """Rank, world size and role are validated like config keys."""
    with pytest.raises(ConfigurationError, match=match):
        resolve(TelemetryConfig(), **kwargs)


def test_batch_larger_than_queue_is_rejected() -> None:
    """max_export_batch_size cannot exceed max_queue_size."""
    config = TelemetryConfig(max_queue_size=10, max_export_batch_size=20)
    with pytest.raises(ConfigurationError, match=r"^max_export_batch_size: 20 .* \(10\)"):
        resolve(config)


def test_bad_run_id_and_local_rank() -> None:
    """A run id ends up in paths; LOCAL_RANK must be an integer."""
    with pytest.raises(ConfigurationError, match="^run_id: '../x'"):
        resolve(TelemetryConfig(run_id="../x"))
    with pytest.raises(ConfigurationError, match="^LOCAL_RANK: 'x'"):
        resolve(TelemetryConfig(), environ={"LOCAL_RANK": "x"})


def test_exporter_objects_are_accepted() -> None:
    """Anything with export() and shutdown() can be listed next to the names."""

    class Sink:
        def export(self, spans: Any) -> None:
            pass

        def shutdown(self) -> None:
            pass

    sink = Sink()
    settings = resolve(TelemetryConfig(exporters=["memory", sink, "memory"]))
    assert settings.exporters == ("memory", sink)
    assert settings.exporter_names == ("memory",)


def test_new_run_ids_are_path_safe_and_unique() -> None:
    """Generated run ids can be used in file names."""
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(resolve(TelemetryConfig(run_id=i)).run_id == i for i in ids)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("schedule_delay_millis", 1e13),  # past threading.TIMEOUT_MAX: the export thread died
        ("shutdown_timeout_s", 1e10),  # shutdown() raised OverflowError
    ],
)
def test_a_wait_no_thread_can_make_is_refused(key: str, value: float) -> None:
    """A timeout longer than a thread can wait fails at configure time, naming key and bound."""
    with pytest.raises(ConfigurationError) as caught:
        TelemetryConfig.from_mapping({key: value})
    message = str(caught.value)
    assert key in message
    assert repr(value) in message
    assert "the longest wait" in message


@pytest.mark.parametrize("raw", ["traces\x00here", "~no_such_user_anywhere/x"])
def test_an_output_dir_that_cannot_be_a_path_is_a_configuration_error(
    tmp_path: Any, raw: str
) -> None:
    """A NUL byte or an unknown user's home: ConfigurationError, not ValueError/RuntimeError."""
    from asynctrace._runtime import configure

    with pytest.raises(ConfigurationError) as caught:
        configure({"enabled": False, "output_dir": raw, "session_tracer": {"enabled": True}})
    assert "output_dir" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "strict", "warned"),
    [("1", True, False), (" On ", True, False), ("YES", True, False), ("off", False, False),
     ("0", False, False), ("", False, False), ("2", False, True), ("enabled", False, True)],
)  # fmt: skip
def test_asynctrace_strict_values(value: str, strict: bool, warned: bool) -> None:
    """``ASYNCTRACE_STRICT`` turns strict mode on for 1/true/yes/on only; a value that is
    neither on nor off leaves it off and says so, naming the value."""
    env = {**os.environ, "ASYNCTRACE_STRICT": value}
    done = subprocess.run(
        [sys.executable, "-c", "import asynctrace._errors as e; print(e.is_strict())"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == str(strict)
    assert ("ASYNCTRACE_STRICT=" in done.stderr) is warned, done.stderr
    if warned:
        assert repr(value) in done.stderr
        assert "strict mode stays off" in done.stderr
