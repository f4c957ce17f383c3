"""NemoLensConfig's fields are checked: quoted YAML values, wrong kinds, no exporting rank."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from _lens_state import forget_setup, forget_warnings
from asynctrace_contrib import nemo_lens
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace as at

LOGGER = "asynctrace_contrib.nemo_lens"


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process that never called setup_telemetry, warned about nothing, with no NEMO_LENS_*."""
    forget_setup(monkeypatch)
    forget_warnings(monkeypatch)
    for name in list(os.environ):
        if name.startswith(("NEMO_LENS_", "MEGATRON_OTEL_")):
            monkeypatch.delenv(name)
    yield
    at.shutdown()


def setup(config: nemo_lens.NemoLensConfig, **kwargs: Any) -> nemo_lens.TelemetryHandle:
    """setup_telemetry into an in-memory exporter, as a test may call it again."""
    return nemo_lens.setup_telemetry(
        config, span_exporter=InMemorySpanExporter(), _allow_reinit=True, **kwargs
    )


@pytest.mark.parametrize("text", ["false", "False", "0", "no", "off", " OFF "])
def test_a_quoted_false_turns_telemetry_off(text: str) -> None:
    """``enabled: "false"`` (a quoted YAML value) is false, not a truthy string."""
    config = nemo_lens.NemoLensConfig(enabled=text, exporter="console")  # type: ignore[arg-type]
    assert config.enabled is False
    handle = setup(config)
    assert not handle.is_exporting
    assert handle.telemetry is None
    assert at.current_telemetry() is None


def test_a_quoted_false_traces_enabled_keeps_every_rank_quiet() -> None:
    """``traces_enabled: "false"`` leaves telemetry off on a rank that would export."""
    config = nemo_lens.NemoLensConfig(
        enabled="true",  # type: ignore[arg-type]
        traces_enabled="false",  # type: ignore[arg-type]
        export_strategy="all_ranks",
    )
    assert (config.enabled, config.traces_enabled) == (True, False)
    handle = setup(config)
    assert not handle.is_exporting
    assert handle.telemetry is not None
    assert not handle.telemetry.enabled
    assert not at.is_span_group_enabled("job")


def test_numbers_given_as_strings_are_read_as_numbers() -> None:
    """``export_rank: "0"`` chooses rank 0; ``export_sample_rate: "0.5"`` is 0.5."""
    config = nemo_lens.NemoLensConfig(
        enabled=True,
        export_rank="0",  # type: ignore[arg-type]
        export_sample_rate=" 0.5 ",  # type: ignore[arg-type]
    )
    assert (config.export_rank, config.export_sample_rate) == (0, 0.5)
    assert setup(config, rank=0, world_size=2).is_exporting
    assert not setup(config, rank=1, world_size=2).is_exporting


@pytest.mark.parametrize(
    ("field", "value", "accepted"),
    [
        ("enabled", "maybe", "accepted: true/false (or 1/0, yes/no, on/off as strings)"),
        ("enabled", 1, "accepted: true/false (or 1/0, yes/no, on/off as strings)"),
        ("traces_enabled", None, "accepted: true/false (or 1/0, yes/no, on/off as strings)"),
        ("span_groups", 5, "accepted: a string"),
        ("service_name", None, "accepted: a string"),
        ("exporter", ["otlp"], "accepted: a string"),
        ("export_rank", "first", "accepted: an integer >= 0"),
        ("export_rank", -2, "accepted: an integer >= 0"),
        ("export_rank", 1.0, "accepted: an integer >= 0"),
        ("export_rank", True, "accepted: an integer >= 0"),
        ("export_sample_rate", "half", "accepted: a number from 0.0 to 1.0"),
        ("export_sample_rate", float("nan"), "accepted: a number from 0.0 to 1.0"),
        ("export_sample_rate", 2, "accepted: a number from 0.0 to 1.0"),
        ("export_sample_rate", None, "accepted: a number from 0.0 to 1.0"),
    ],
)
def test_a_field_of_the_wrong_kind_is_named(field: str, value: Any, accepted: str) -> None:
    """The error is a ConfigurationError (a ValueError) naming field, value and what is
    accepted, raised when the config is made."""
    with pytest.raises(at.ConfigurationError) as raised:
        nemo_lens.NemoLensConfig(**{field: value})
    message = str(raised.value)
    assert message.startswith(f"{field}: {value!r} ")
    assert accepted in message
    assert isinstance(raised.value, ValueError)


def test_a_field_assigned_later_is_checked_by_setup() -> None:
    """A launcher that sets ``config.enabled = "false"`` after from_env gets telemetry off;
    a wrong kind assigned later is refused before anything changes."""
    config = nemo_lens.NemoLensConfig.from_env()
    config.enabled = "false"  # type: ignore[assignment]
    assert not setup(config).is_exporting
    assert at.current_telemetry() is None
    config.enabled = "1"  # type: ignore[assignment]
    config.span_groups = 5  # type: ignore[assignment]
    with pytest.raises(at.ConfigurationError, match=r"^span_groups: 5 is not accepted"):
        setup(config)
    assert at.current_telemetry() is None


def test_an_export_rank_past_the_job_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """single_rank with export_rank >= world_size: no rank exports (as in lens), and
    the log says so once."""
    config = nemo_lens.NemoLensConfig(enabled=True, export_rank=5)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        handles = [setup(config, rank=rank, world_size=2) for rank in (0, 1, 0)]
    assert not any(handle.is_exporting for handle in handles)
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert warnings == [
        "setup_telemetry: export_rank 5 names no rank of this job (world_size=2), so no "
        "rank exports; accepted: a rank below world_size, or -1: the last rank"
    ]


def test_an_export_rank_of_the_job_is_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    """export_rank 1 of 2 ranks, or -1 (the last), exports somewhere: nothing is logged."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for export_rank in (1, -1):
            config = nemo_lens.NemoLensConfig(enabled=True, export_rank=export_rank)
            assert setup(config, rank=1, world_size=2).is_exporting
    assert [r for r in caplog.records if r.name == LOGGER] == []


def test_an_unknown_lens_variable_is_warned_about_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``NEMO_LENS_ENABLE=1`` (a typo) leaves telemetry off, as in lens, and is named in
    one warning that suggests NEMO_LENS_ENABLED; the variables read are not."""
    monkeypatch.setenv("NEMO_LENS_ENABLE", "1")
    monkeypatch.setenv("NEMO_LENS_SPAN_GROUPS", "all")
    monkeypatch.setenv("MEGATRON_OTEL_EXPORTRANK", "0")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        config = nemo_lens.NemoLensConfig.from_env("MEGATRON_OTEL", fallback_prefix="NEMO_LENS")
        nemo_lens.NemoLensConfig.from_env("MEGATRON_OTEL", fallback_prefix="NEMO_LENS")
    assert not config.enabled
    assert config.span_groups == "all"
    warnings = sorted(r.getMessage() for r in caplog.records if r.name == LOGGER)
    assert warnings == [
        "NemoLensConfig.from_env: ignoring MEGATRON_OTEL_EXPORTRANK, which it does not read; "
        "did you mean MEGATRON_OTEL_EXPORT_RANK?",
        "NemoLensConfig.from_env: ignoring NEMO_LENS_ENABLE, which it does not read; "
        "did you mean NEMO_LENS_ENABLED?",
    ]
