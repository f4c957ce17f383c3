"""What configuration messages say: near misses suggested, the value and the variable
named, and lenient variables never fatal, even when warnings are errors."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import asynctrace as at
from asynctrace import ConfigurationError, TelemetryConfig
from asynctrace._settings import resolve

_OTEL_VARS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SDK_DISABLED",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
)


@pytest.fixture(autouse=True)
def _no_otel_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in _OTEL_VARS:
        monkeypatch.delenv(var, raising=False)
    for var in list(os.environ):
        if var.startswith("ASYNCTRACE_"):
            monkeypatch.delenv(var)


# -- warnings as errors --------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "config", "logged"),
    [
        (
            {"OTEL_TRACES_EXPORTER": "jaeger", "ASYNCTRACE_ENABLED": "1"},
            None,
            "OTEL_TRACES_EXPORTER: ignoring 'jaeger'",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "bogus"},
            {"enabled": True, "exporters": ["memory"]},
            "OTEL_TRACES_SAMPLER: ignoring 'bogus'",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "abc"},
            {"enabled": True, "exporters": ["memory"]},
            "OTEL_TRACES_SAMPLER_ARG: ignoring 'abc'",
        ),
    ],
    ids=["exporter", "sampler", "sampler-arg"],
)
def test_a_lenient_variable_is_logged_when_warnings_are_errors(
    env: dict[str, str],
    config: dict[str, Any] | None,
    logged: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A variable set for other tools starts telemetry anyway, its warning logged."""
    monkeypatch.chdir(tmp_path)  # the default exporter writes under the working directory
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, "asynctrace"):
        warnings.simplefilter("error")
        telemetry = at.configure(config)
    try:
        assert telemetry.enabled
        assert any(logged in record.getMessage() for record in caplog.records), caplog.text
    finally:
        telemetry.shutdown(5.0)


def test_python_w_error_configures_with_a_foreign_exporter_name(tmp_path: Path) -> None:
    """``python -W error`` with ``OTEL_TRACES_EXPORTER=zipkin``: telemetry runs."""
    code = (
        "import asynctrace as at\n"
        "t = at.configure({'enabled': True, 'exporters': ['memory'], 'span_groups': 'all'})\n"
        "t2 = at.configure()\n"
        "print('enabled', t2.enabled)\n"
        "t2.shutdown(5)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTRACE_", "OTEL_"))}
    env.update(
        OTEL_TRACES_EXPORTER="zipkin,console",
        OTEL_TRACES_SAMPLER="bogus",
        ASYNCTRACE_ENABLED="1",
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "enabled True" in done.stdout
    assert "OTEL_TRACES_EXPORTER: ignoring 'zipkin'" in done.stderr
    assert "OTEL_TRACES_SAMPLER: ignoring 'bogus'" in done.stderr


# -- schedule_delay_millis floor ---------------------------------------------------


@pytest.mark.parametrize("value", [1e-300, 0.5, "0.999"])
def test_a_schedule_delay_below_one_millisecond_is_refused(value: Any) -> None:
    """An idle export thread would spin: the floor is named in the message."""
    with pytest.raises(ConfigurationError) as caught:
        TelemetryConfig.from_mapping({"schedule_delay_millis": value})
    message = str(caught.value)
    assert message.startswith(f"schedule_delay_millis: {value!r} is not accepted")
    assert "milliseconds >= 1" in message


def test_a_schedule_delay_variable_below_the_floor_names_the_variable() -> None:
    """The standard variable is checked as the key is."""
    with pytest.raises(ConfigurationError, match=r"^OTEL_BSP_SCHEDULE_DELAY: '0\.01'.*>= 1"):
        TelemetryConfig.from_env({"OTEL_BSP_SCHEDULE_DELAY": "0.01"})


def test_a_one_millisecond_schedule_delay_leaves_an_idle_process_idle(tmp_path: Path) -> None:
    """At the floor, an idle export thread sleeps between polls: little CPU is spent."""
    telemetry = at.configure(
        {
            "enabled": True,
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "schedule_delay_millis": 1,
        }
    )
    try:
        start = time.process_time()
        time.sleep(1.0)
        used = time.process_time() - start
    finally:
        telemetry.shutdown(5.0)
    assert used < 0.5, used


# -- near misses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"enabeld": True}, "did you mean 'enabled'?"),
        ({"exporter": ["memory"]}, "did you mean 'exporters'?"),
        (
            {"enabeld": True, "span_group": "all"},
            "did you mean 'enabled' for 'enabeld', 'span_groups' for 'span_group'?",
        ),
        ({"session_tracer": {"flush_treshold": 3}}, "did you mean 'flush_threshold'?"),
        ({"goodput": {"grace": 1}}, "did you mean 'grace_s'?"),
        ({"span_limits": {"max_attribute": 3}}, "did you mean 'max_attributes'?"),
        ({"profiler": {"step": [1]}}, "did you mean 'steps'?"),
    ],
)
def test_a_misspelt_key_gets_a_suggestion(config: dict[str, Any], expected: str) -> None:
    """The message keeps the accepted keys and adds the nearest one."""
    with pytest.raises(ConfigurationError) as caught:
        resolve(TelemetryConfig.from_mapping(config))
    message = str(caught.value)
    assert "unknown key" in message
    assert "accepted" in message
    assert message.endswith(expected), message


def test_a_key_near_nothing_gets_no_suggestion() -> None:
    """No guess when nothing is close."""
    with pytest.raises(ConfigurationError) as caught:
        TelemetryConfig.from_mapping({"zzzz": 1})
    assert "did you mean" not in str(caught.value)


# -- the value and the variable named ----------------------------------------------


def test_resource_attributes_that_are_not_a_mapping_name_the_value() -> None:
    """``resource_attributes: None`` says None was given."""
    with pytest.raises(ConfigurationError) as caught:
        TelemetryConfig.from_mapping({"resource_attributes": None})
    assert str(caught.value).startswith("resource_attributes: None is not accepted; accepted:")


def test_a_batch_size_variable_past_the_queue_names_the_variable() -> None:
    """The standard variable that set the batch size is the one named."""
    with pytest.raises(ConfigurationError) as caught:
        TelemetryConfig.from_env({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "99999"})
    message = str(caught.value)
    assert message.startswith("OTEL_BSP_MAX_EXPORT_BATCH_SIZE: 99999 is not accepted")
    assert "(8192, the default)" in message


def test_both_sizes_from_variables_name_both_variables() -> None:
    """A batch size and a queue size from two variables: each is named."""
    with pytest.raises(ConfigurationError) as caught:
        TelemetryConfig.from_env(
            {"ASYNCTRACE_MAX_EXPORT_BATCH_SIZE": "300", "OTEL_BSP_MAX_QUEUE_SIZE": "100"}
        )
    message = str(caught.value)
    assert message.startswith("ASYNCTRACE_MAX_EXPORT_BATCH_SIZE: 300 is not accepted")
    assert "(100, set by OTEL_BSP_MAX_QUEUE_SIZE)" in message


def test_a_queue_size_alone_below_the_default_batch_is_what_the_message_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the queue size set: the message is about it, not the batch size's default."""
    monkeypatch.setenv("ASYNCTRACE_ENABLED", "1")
    monkeypatch.setenv("ASYNCTRACE_EXPORTERS", "memory")
    monkeypatch.setenv("ASYNCTRACE_MAX_QUEUE_SIZE", "100")
    with pytest.raises(ConfigurationError) as caught:
        at.configure()
    message = str(caught.value)
    assert message.startswith("ASYNCTRACE_MAX_QUEUE_SIZE: 100 is not accepted")
    assert "below the export batch size" in message
    assert "512, the default" in message
    assert at.current_telemetry() is None


def test_a_queue_size_key_alone_below_the_default_batch_names_the_key() -> None:
    """The same with the key in a mapping."""
    with pytest.raises(ConfigurationError) as caught:
        resolve(TelemetryConfig.from_mapping({"max_queue_size": 100}))
    message = str(caught.value)
    assert message.startswith("max_queue_size: 100 is not accepted")
    assert "512, the default" in message
