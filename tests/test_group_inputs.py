"""Span-group inputs: registrations and specs that are not what they look like are refused."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import asynctrace as at
from asynctrace import Bucket, ConfigurationError, SpanGroup, TelemetryConfig
from asynctrace.testing import capture_spans

_ns = itertools.count()


def unique(prefix: str) -> str:
    """A group or preset name no other test uses."""
    return f"{prefix}_inputs{next(_ns)}"


@pytest.mark.parametrize("bad", ["no", "false", 0, 1, None])
def test_per_item_must_be_a_bool(bad: object) -> None:
    """per_item="no" is refused, naming per_item; nothing is registered."""
    name = unique("item")
    with pytest.raises(ConfigurationError) as info:
        at.register_span_groups("lib", [SpanGroup(name, None, per_item=bad)])  # type: ignore[arg-type]
    message = str(info.value)
    assert f"per_item={bad!r}" in message
    assert "True or False" in message
    assert name not in at.registered_span_groups()


def test_per_item_true_leaves_the_group_out_of_per_step() -> None:
    """A real bool is kept as given: True leaves per_step, False stays in it."""
    per_item, per_step = unique("many"), unique("once")
    at.register_span_groups(
        "lib", [SpanGroup(per_item, None, per_item=True), SpanGroup(per_step, None)]
    )
    assert at.registered_span_groups()[per_item].per_item is True
    assert per_item not in at.resolve_span_groups("per_step")
    assert per_step in at.resolve_span_groups("per_step")


@pytest.mark.parametrize("bad", [None, "abc", b"abc", 5, SpanGroup("one", None)])
def test_groups_must_be_a_mapping_or_a_list(bad: object) -> None:
    """groups=None (a string, a number, a lone SpanGroup) is a ConfigurationError naming groups."""
    before = at.registered_span_groups()
    with pytest.raises(ConfigurationError) as info:
        at.register_span_groups("lib", bad)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith("register_span_groups('lib') groups:")
    assert repr(bad) in message
    assert "a mapping" in message
    assert at.registered_span_groups() == before


@pytest.mark.parametrize("bad", [[("p", ["job"])], "p", ("p",)])
def test_presets_must_be_a_mapping(bad: object) -> None:
    """presets=[...] is a ConfigurationError naming presets; the groups are not registered."""
    group = unique("with_presets")
    with pytest.raises(ConfigurationError) as info:
        at.register_span_groups("lib", {group: None}, presets=bad)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith("register_span_groups('lib') presets:")
    assert "a mapping of {preset:" in message
    assert group not in at.registered_span_groups()


def test_a_preset_member_nobody_registered_warns_once_when_resolved() -> None:
    """A typo in a preset is told once, naming preset and member; a late member still joins."""
    preset, late = unique("preset"), unique("late")
    at.register_span_groups("lib", {}, presets={preset: ["job", late]})
    with pytest.warns(UserWarning, match=f"preset '{preset}' names '{late}'") as record:
        assert at.resolve_span_groups(preset) == {"job"}
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # told once: no second warning
        assert at.resolve_span_groups(preset) == {"job"}
        at.register_span_groups("lib", {late: Bucket.OVERHEAD})
        assert at.resolve_span_groups(preset) == {"job", late}


def test_a_preset_member_nobody_registered_warns_when_telemetry_turns_it_on() -> None:
    """Naming such a preset in the spec warns too; its registered members are recorded."""
    preset, typo = unique("preset"), unique("genration")
    at.register_span_groups("lib", {}, presets={preset: ["step", typo]})
    with pytest.warns(UserWarning, match=f"'{typo}', which is not registered"):
        with capture_spans(preset) as captured:
            assert at.enabled_span_groups() == {"step"}
            with at.umbrella_span("step", "s"):
                pass
    assert captured.names() == ["s"]


def test_registered_presets_does_not_warn() -> None:
    """Listing the presets is no resolution of a spec: it stays quiet."""
    preset = unique("listed")
    at.register_span_groups("lib", {}, presets={preset: [unique("absent")]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert at.registered_presets()[preset] == frozenset()


@pytest.mark.parametrize("spec", ["", " , ", ",,", []])
def test_configure_refuses_a_spec_that_names_no_group(spec: Any) -> None:
    """span_groups that names nothing is refused by configure, naming the key; nothing changes."""
    config = TelemetryConfig(enabled=True, exporters=["memory"], span_groups=spec)
    with pytest.raises(ConfigurationError) as info:
        at.configure(config)
    message = str(info.value)
    assert message.startswith("span_groups:")
    assert "names no group" in message
    assert "'default'" in message
    assert at.enabled_span_groups() == frozenset()
    assert at.current_telemetry() is None


def test_configure_refuses_an_environment_spec_that_names_no_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ASYNCTRACE_SPAN_GROUPS=" , " is refused; an empty variable means the default."""
    monkeypatch.chdir(tmp_path)  # where a default output directory would go
    monkeypatch.setenv("ASYNCTRACE_ENABLED", "1")
    monkeypatch.setenv("ASYNCTRACE_EXPORTERS", "memory")
    monkeypatch.setenv("ASYNCTRACE_SPAN_GROUPS", " , ")
    with pytest.raises(ConfigurationError, match="ASYNCTRACE_SPAN_GROUPS: .* names no group"):
        at.configure()
    assert at.enabled_span_groups() == frozenset()
    monkeypatch.setenv("ASYNCTRACE_SPAN_GROUPS", "")  # unset, in effect
    telemetry = at.configure()
    try:
        assert at.enabled_span_groups() == at.resolve_span_groups("default")
    finally:
        telemetry.shutdown()


def test_an_empty_spec_still_turns_every_group_off_where_a_program_builds_it() -> None:
    """set_span_groups, enable_telemetry and resolve_span_groups take "" as no group."""
    assert at.resolve_span_groups(" , ") == frozenset()
    with capture_spans("all") as captured:
        assert at.set_span_groups(",".join([])) == frozenset()
        with at.umbrella_span("job", "off"):
            pass
        assert at.set_span_groups("job") == {"job"}  # the provider was kept
        with at.umbrella_span("job", "on"):
            pass
    assert captured.names() == ["on"]
    at.enable_telemetry(TracerProvider(), span_groups="")
    assert at.enabled_span_groups() == frozenset()
