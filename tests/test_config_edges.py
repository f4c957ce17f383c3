"""Configuration edge cases: a refused configure changes nothing, and every bad value is a
ConfigurationError naming its key (or variable), never a raw error."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace as at
from asynctrace import ConfigurationError, configure, current_telemetry, shutdown
from asynctrace._config import TelemetryConfig
from asynctrace._fast import SpanLimits
from asynctrace._meter_setup import otlp_metric_exporter
from asynctrace._settings import resolve

LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in (*LAUNCH_VARS, "ASYNCTRACE_RUN_ID", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(var, raising=False)
    yield
    shutdown(timeout_s=2.0)


def _first(tmp_path: Path) -> at.Telemetry:
    first = configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "run_id": "r1",
            "output_dir": str(tmp_path / "first"),
        }
    )
    assert first.enabled
    return first


def _still_running(first: at.Telemetry) -> None:
    assert current_telemetry() is first
    assert first.enabled
    with at.managed_span("reward", "after-refusal"):
        pass
    assert first.memory_exporter is not None
    assert "after-refusal" in [s.name for s in first.memory_exporter.get_finished_spans()]


# ---------------------------------------------------------------------------
# 1. A refused reconfigure leaves the previous telemetry running.


def _bad_second(tmp_path: Path, case: str) -> dict[str, Any]:
    out = tmp_path / "second"
    base: dict[str, Any] = {"enabled": True, "run_id": "r2", "output_dir": str(out)}
    if case == "provider_class":
        return {**base, "exporters": ["memory"], "provider": TracerProvider}
    if case == "provider_without_resource":

        class NoResource:
            def add_span_processor(self, processor: Any) -> None: ...

            def get_tracer(self, *args: Any, **kwargs: Any) -> Any: ...

        return {**base, "exporters": ["memory"], "provider": NoResource()}
    if case == "trace_file_is_dir":
        (out / "traces-r0.jsonl").mkdir(parents=True)
        return {**base, "exporters": ["chrome"]}
    if case == "session_file_is_dir":
        (out / "sessions-r0.jsonl").mkdir(parents=True)
        return {**base, "exporters": ["memory"], "session_tracer": {"enabled": True}}
    if case == "session_file_is_dir_disabled":
        (out / "sessions-r0.jsonl").mkdir(parents=True)
        return {**base, "enabled": False, "session_tracer": {"enabled": True}}
    if case == "goodput_file_is_dir":
        (out / "goodput-r0.jsonl").mkdir(parents=True)
        return {**base, "exporters": ["memory"], "goodput": {"metrics": "none"}}
    if case == "exporter_class":
        return {**base, "exporters": [InMemorySpanExporter]}
    raise AssertionError(case)


@pytest.mark.parametrize(
    ("case", "key"),
    [
        ("provider_class", "provider"),
        ("provider_without_resource", "provider"),
        ("trace_file_is_dir", "output_dir"),
        ("session_file_is_dir", "output_dir"),
        ("session_file_is_dir_disabled", "output_dir"),
        ("goodput_file_is_dir", "output_dir"),
        ("exporter_class", "exporters"),
    ],
)
def test_a_refused_reconfigure_leaves_the_first_running(
    tmp_path: Path, case: str, key: str
) -> None:
    first = _first(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        configure(_bad_second(tmp_path, case))
    assert str(info.value).startswith(f"{key}:")
    _still_running(first)


def test_a_session_dir_in_the_session_tracers_own_directory_names_its_key(
    tmp_path: Path,
) -> None:
    first = _first(tmp_path)
    (tmp_path / "second" / "sess" / "sessions-r0.jsonl").mkdir(parents=True)
    with pytest.raises(ConfigurationError, match=r"^session_tracer\.output_dir: the session"):
        configure(
            {
                "enabled": True,
                "exporters": ["memory"],
                "output_dir": str(tmp_path / "second"),
                "session_tracer": {"enabled": True, "output_dir": "sess"},
            }
        )
    _still_running(first)


def test_an_oserror_while_starting_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that fails only when the writer opens it (checked a moment before): a
    ConfigurationError naming the file, never a raw OSError."""
    from asynctrace.export import _pipeline

    def failing_build(plan: Any) -> Any:
        raise IsADirectoryError(21, "Is a directory", str(tmp_path / "x.jsonl"))

    monkeypatch.setattr(_pipeline, "build", failing_build)
    with pytest.raises(ConfigurationError, match=r"^output_dir: .*x\.jsonl.*IsADirectoryError"):
        configure({"enabled": True, "exporters": ["memory"], "output_dir": str(tmp_path)})


def test_tilde_output_dir_is_expanded_once_for_every_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    telemetry = configure(
        {
            "enabled": True,
            "exporters": ["chrome"],
            "output_dir": "~/traces",
            "session_tracer": {"enabled": True},
            "goodput": {"metrics": "none"},
        }
    )
    assert telemetry.settings.output_dir == str(home / "traces")
    telemetry.shutdown()
    assert sorted(p.name for p in (home / "traces").iterdir()) == [
        "goodput-r0.jsonl",
        "sessions-r0.jsonl",
        "traces-r0.jsonl",
    ]
    assert list(cwd.iterdir()) == []


# ---------------------------------------------------------------------------
# 2. Integers past a float's range.


@pytest.mark.parametrize(
    "key",
    [
        "shutdown_timeout_s",
        "schedule_delay_millis",
        "sampling_ratio",
        "sample_rate",
        "loop_stall_threshold_ms",
    ],
)
def test_huge_integers_are_configuration_errors(key: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^{key}: "):
        resolve(TelemetryConfig.from_mapping({key: 10**400}), environ={})


@pytest.mark.parametrize("key", ["grace_s", "export_interval_s"])
def test_huge_goodput_integers_are_configuration_errors(key: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^goodput"):
        TelemetryConfig.from_mapping({"goodput": {key: 10**400}})


# ---------------------------------------------------------------------------
# 3. The driver takes the workers' export_ranks.


def test_the_driver_accepts_the_workers_export_ranks(tmp_path: Path) -> None:
    config = {"enabled": True, "exporters": ["memory"], "export_ranks": [3]}
    assert not at.init_worker(config, rank=0, world_size=4).enabled
    assert at.init_worker(config, rank=3, world_size=4).enabled
    driver = at.init_driver(config)
    assert driver.enabled  # rank 0 of its own process group: it exports
    with pytest.raises(ConfigurationError, match="^export_ranks: "):  # a worker still checks
        at.init_worker(config, rank=0, world_size=2)


# ---------------------------------------------------------------------------
# 4. Ranks from srun and MPI launchers.


def _worker(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], **kw: Any) -> Any:
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    return at.init_worker({"enabled": False}, **kw).settings


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (2, 4, 1)),
        ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}, (3, 4, 1)),
        (
            {
                "OMPI_COMM_WORLD_RANK": "2",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            },
            (2, 4, 0),
        ),
        ({"PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2, None)),
        # torchrun under srun: torchrun's own variables win
        ({"RANK": "5", "WORLD_SIZE": "8", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, (5, 8, None)),
        ({}, (0, 1, None)),
    ],
)
def test_workers_read_their_rank_from_the_launcher(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: tuple[Any, ...]
) -> None:
    settings = _worker(monkeypatch, env)
    assert (settings.rank, settings.world_size, settings.local_rank) == expected
    if expected[2] is not None:
        assert settings.resource_attributes["asynctrace.local_rank"] == expected[2]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SLURM_PROCID": "x", "SLURM_NTASKS": "4"}, r"^SLURM_PROCID: 'x'"),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2.0"}, "^OMPI_COMM_WORLD_SIZE"),
        ({"RANK": "0", "WORLD_SIZE": "2", "SLURM_LOCALID": "a"}, "^SLURM_LOCALID: 'a'"),
        ({"RANK": "2"}, "^WORLD_SIZE: missing while RANK=2"),
        ({"RANK": "-2", "WORLD_SIZE": "4"}, "^RANK: -2"),
    ],
)
def test_a_malformed_launcher_variable_is_named(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _worker(monkeypatch, env)


def test_local_first_and_the_prometheus_port_use_the_same_local_rank() -> None:
    from asynctrace._prometheus_endpoint import prometheus_port

    for env in ({"SLURM_LOCALID": "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK": "1"}):
        settings = resolve(
            TelemetryConfig(
                enabled=True,
                exporters=["memory"],
                export_ranks="local_first",
                goodput={"metrics": "none", "prometheus_port": 9000},
            ),
            rank=1,
            world_size=2,
            environ=env,
        )
        assert settings.local_rank == 1
        assert not settings.exporting
        assert settings.goodput is not None
        assert prometheus_port(settings.goodput, settings.local_rank) == 9001


def test_local_rank_minus_one_means_none() -> None:
    """Set by some launchers outside a distributed run: not an error, even disabled."""
    settings = resolve(TelemetryConfig(), environ={"LOCAL_RANK": "-1"})
    assert settings.local_rank is None
    assert "asynctrace.local_rank" not in settings.resource_attributes


# ---------------------------------------------------------------------------
# 5. The goodput metrics' OTLP protocol.


def test_goodput_metrics_follow_the_configured_otlp_protocol() -> None:
    config = TelemetryConfig(
        enabled=True, exporters=["chrome"], otlp_protocol="grpc", goodput={"metrics": "otlp"}
    )
    assert resolve(config, environ={}).otlp_metrics_protocol == "grpc"
    assert resolve(config, environ={}).otlp_protocol == "grpc"
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    config = TelemetryConfig(enabled=True, exporters=["chrome"], goodput={"metrics": "otlp"})
    assert resolve(config, environ=env).otlp_metrics_protocol == "grpc"
    # the metrics variable first; the traces one is not the metrics'
    env = {
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
    }
    settings = resolve(
        TelemetryConfig(enabled=True, exporters=["otlp"], goodput={"metrics": "otlp"}),
        environ=env,
    )
    assert (settings.otlp_protocol, settings.otlp_metrics_protocol) == ("grpc", "http/protobuf")


def test_a_bad_metrics_protocol_variable_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = TelemetryConfig(enabled=True, exporters=["chrome"], goodput={"metrics": "otlp"})
    with pytest.raises(ConfigurationError, match="^OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: 'udp'"):
        resolve(config, environ={"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "udp"})
    # the exporter follows the resolved protocol alone, not a variable read later
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.metric_exporter")
    exporter = otlp_metric_exporter("http/protobuf")
    assert "http" in type(exporter).__module__


# ---------------------------------------------------------------------------
# 6. Classes are not exporters.


def test_an_exporter_class_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="^exporters: the class InMemorySpanExporter"):
        TelemetryConfig.from_mapping({"exporters": [InMemorySpanExporter]})
    assert TelemetryConfig.from_mapping({"exporters": [InMemorySpanExporter()]}).exporters


# ---------------------------------------------------------------------------
# 7. Messages name the key the value came from.


def test_directory_errors_name_their_key(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = {"enabled": True, "exporters": ["memory"], "output_dir": str(tmp_path)}
    with pytest.raises(ConfigurationError, match=r"^session_tracer\.output_dir: "):
        configure({**config, "session_tracer": {"enabled": True, "output_dir": str(blocker)}})
    with pytest.raises(ConfigurationError, match=r"^profiler\.output: "):
        configure({**config, "profiler": {"steps": [1], "output": str(blocker / "x")}})


def test_a_bad_run_id_from_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="^ASYNCTRACE_RUN_ID: 'a b'"):
        resolve(TelemetryConfig(), environ={"ASYNCTRACE_RUN_ID": "a b"})
    with pytest.raises(ConfigurationError, match="^run_id: 'a b'"):
        resolve(TelemetryConfig(run_id="a b"), environ={})


# ---------------------------------------------------------------------------
# 8. Unknown ASYNCTRACE_* variables.


def test_an_unknown_asynctrace_variable_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {"ASYNCTRACE_ENABLE_TYPO_TEST": "1", "ASYNCTRACE_STRICT": "1", "ASYNCTRACE_RUN_ID": "x"}
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        with pytest.warns(UserWarning, match="ASYNCTRACE_ENABLE_TYPO_TEST; did you mean ASYNC"):
            TelemetryConfig.from_env(env)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            TelemetryConfig.from_env(env)  # once only, and never an error
    assert [r.getMessage() for r in caplog.records if "TYPO_TEST" in r.getMessage()] == [
        "asynctrace: ignoring unknown environment variable ASYNCTRACE_ENABLE_TYPO_TEST; "
        "did you mean ASYNCTRACE_ENABLED?"
    ]


def test_a_typo_warning_is_never_an_error(caplog: pytest.LogCaptureFixture) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING, logger="asynctrace"):
            config = TelemetryConfig.from_env({"ASYNCTRACE_EXPORTER_TYPO_TEST": "otlp"})
    assert config.exporters == ["chrome"]
    assert "ASYNCTRACE_EXPORTER_TYPO_TEST" in caplog.text


def test_every_asynctrace_variable_the_package_reads_is_known() -> None:
    import re

    from asynctrace._config_env import KNOWN_VARS

    root = Path(at.__file__).parent
    read: set[str] = set()
    for path in [*root.rglob("*.py"), *(root.parent / "contrib").rglob("*.py")]:
        read |= set(re.findall(r"ASYNCTRACE_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
    assert read <= KNOWN_VARS, sorted(read - KNOWN_VARS)


# ---------------------------------------------------------------------------
# 9. A malformed OTEL_RESOURCE_ATTRIBUTES entry takes nothing away.


def test_a_resource_attributes_entry_without_equals_removes_nothing() -> None:
    env = {"SLURM_JOB_ID": "4711", "OTEL_RESOURCE_ATTRIBUTES": "slurm.job.id,team=rl"}
    settings = resolve(TelemetryConfig(), environ=env)
    assert settings.resource_attributes["slurm.job.id"] == "4711"
    env["OTEL_RESOURCE_ATTRIBUTES"] = "slurm.job.id=9"  # a real entry still wins
    assert "slurm.job.id" not in resolve(TelemetryConfig(), environ=env).resource_attributes


# ---------------------------------------------------------------------------
# 10. Resource attribute values.


@pytest.mark.parametrize("value", [b"ab", bytearray(b"ab"), [1, "a"], [True, 1], [[1]], [None]])
def test_bad_resource_attribute_values_are_refused(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"^resource_attributes\.k: "):
        TelemetryConfig.from_mapping({"resource_attributes": {"k": value}})


def test_homogeneous_resource_attribute_lists_are_kept() -> None:
    config = TelemetryConfig.from_mapping(
        {"resource_attributes": {"a": [1, 2], "b": ["x"], "c": [1.5], "d": []}}
    )
    assert config.resource_attributes == {"a": (1, 2), "b": ("x",), "c": (1.5,), "d": ()}


# ---------------------------------------------------------------------------
# 11. from_env's arguments.


def test_from_env_checks_its_arguments() -> None:
    with pytest.raises(ConfigurationError, match="^base: expected a TelemetryConfig"):
        TelemetryConfig.from_env({}, base={"enabled": True})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="^environ: expected a mapping"):
        TelemetryConfig.from_env(["A"])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="^ASYNCTRACE_ENABLED: 1 is not accepted"):
        TelemetryConfig.from_env({"ASYNCTRACE_ENABLED": 1})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="^OTEL_SDK_DISABLED: True"):
        TelemetryConfig.from_env({"OTEL_SDK_DISABLED": True})  # type: ignore[dict-item]


# ---------------------------------------------------------------------------
# 12. Span limits on the SDK provider, as the SDK reads the variables.


def test_sdk_limits_cut_event_and_link_values_by_the_general_length_only() -> None:
    """The SDK cuts span attribute values by OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT (else the
    general limit) and event and link attribute values by OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT
    alone."""
    from asynctrace._fast import limits_from

    limits = limits_from({}, {"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "4"})
    sdk = limits.to_sdk()
    assert sdk.max_span_attribute_length == 4
    assert sdk.max_attribute_length is None
    limits = limits_from(
        {},
        {"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "4", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "9"},
    )
    assert (limits.to_sdk().max_span_attribute_length, limits.to_sdk().max_attribute_length) == (
        4,
        9,
    )
    assert SpanLimits(max_attribute_length=3).to_sdk().max_attribute_length == 3
