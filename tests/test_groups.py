"""Span groups: registration, presets, spec resolution, gating."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asynctrace import (
    BY_CATEGORY,
    Bucket,
    ConfigurationError,
    SpanGroup,
    dispatch_scope,
    enabled_span_groups,
    is_span_group_enabled,
    managed_span,
    per_prompt_scope,
    register_span_groups,
    registered_presets,
    registered_span_groups,
    resolve_span_groups,
    set_span_groups,
)
from asynctrace.testing import CapturedSpans, capture_spans

BUILTIN_UMBRELLAS = {"job", "step", "rollout", "setup", "model_init", "evaluate", "per_prompt"}
BUILTIN_LEAVES = {
    "generation": Bucket.PRODUCTIVE,
    "reward": Bucket.PRODUCTIVE,
    "policy_update": Bucket.PRODUCTIVE,
    "data_processing": Bucket.OVERHEAD,
    "data_plane": Bucket.OVERHEAD,
    "checkpoint": Bucket.OVERHEAD,
    "logprob": Bucket.OVERHEAD,
    "advantage": Bucket.OVERHEAD,
}
_ns = itertools.count()


def unique(prefix: str) -> str:
    """A group name no other test uses."""
    return f"{prefix}{next(_ns)}"


def test_builtin_namespace() -> None:
    """The built-in groups carry the seed's buckets; efficiency is by category."""
    groups = registered_span_groups()
    for name in BUILTIN_UMBRELLAS:
        assert groups[name].is_umbrella, name
    for name, bucket in BUILTIN_LEAVES.items():
        assert groups[name].bucket is bucket
    assert groups["efficiency"].bucket == BY_CATEGORY
    assert groups["per_prompt"].per_item


def test_builtin_presets() -> None:
    """default, per_step (all but per_prompt) and all resolve as documented."""
    assert resolve_span_groups("default") == {
        "job",
        "checkpoint",
        "evaluate",
        "setup",
        "model_init",
    }
    per_step = resolve_span_groups("per_step")
    assert "per_prompt" not in per_step
    assert BUILTIN_UMBRELLAS - {"per_prompt"} <= per_step
    assert set(BUILTIN_LEAVES) | {"efficiency"} <= per_step
    assert resolve_span_groups("all") == set(registered_span_groups())


def test_spec_is_a_case_insensitive_whitespace_tolerant_union() -> None:
    """Presets and bare names union; case and spaces do not matter."""
    assert resolve_span_groups(" Default ,GENERATION,  reward ") == resolve_span_groups(
        "default"
    ) | {"generation", "reward"}
    assert resolve_span_groups("") == frozenset()
    assert resolve_span_groups("job,,job,") == {"job"}


def test_unknown_name_lists_known_ones() -> None:
    """An unknown name raises ConfigurationError naming it and listing the known ones."""
    with pytest.raises(ConfigurationError) as info:
        resolve_span_groups("default,genration")
    message = str(info.value)
    assert "'genration'" in message
    assert "per_step" in message
    assert "generation" in message


def test_no_subtraction_syntax() -> None:
    """`-job` is rejected with an explanation, not silently ignored."""
    with pytest.raises(ConfigurationError, match="no subtraction"):
        resolve_span_groups("per_step,-job")


@pytest.mark.parametrize("bad", [None, 3, ["job", 4]])
def test_spec_of_wrong_type(bad: object) -> None:
    """A spec that is not a string (or list of strings) names the value."""
    with pytest.raises(ConfigurationError, match="span_groups"):
        resolve_span_groups(bad)  # type: ignore[arg-type]


def test_registration_is_idempotent_and_shared() -> None:
    """Identical definitions from two namespaces are one shared group."""
    name = unique("shared")
    register_span_groups("lib_a", {name: Bucket.OVERHEAD})
    register_span_groups("lib_a", {name: Bucket.OVERHEAD})
    register_span_groups("lib_b", [SpanGroup(name, Bucket.OVERHEAD)])
    assert registered_span_groups()[name].bucket is Bucket.OVERHEAD
    with capture_spans(name) as captured:
        assert is_span_group_enabled(name)
        with managed_span(name, "x"):
            pass
    assert captured.names() == ["x"]


def test_conflicting_redefinition_raises_and_changes_nothing() -> None:
    """A different bucket for a registered group is a ConfigurationError."""
    name = unique("conflict")
    other = unique("other")
    register_span_groups("lib_a", {name: Bucket.OVERHEAD})
    with pytest.raises(ConfigurationError) as info:
        register_span_groups("lib_b", {other: None, name: Bucket.PRODUCTIVE})
    assert name in str(info.value)
    assert "overhead" in str(info.value)
    assert other not in registered_span_groups()  # validated before anything changed


@pytest.mark.parametrize("bad", ["", "   ", 7, None, "has space", "-dash", "a,b"])
def test_bad_group_names(bad: object) -> None:
    """Empty or non-string names are rejected, naming the value and what is accepted."""
    with pytest.raises(ConfigurationError) as info:
        register_span_groups("lib", {bad: Bucket.IDLE})  # type: ignore[dict-item]
    assert repr(bad) in str(info.value)
    assert "accepted" in str(info.value) or "non-empty" in str(info.value)


@pytest.mark.parametrize("bad", ["PRODUCTIVE", "busy", 1, object()])
def test_bucket_must_be_a_bucket(bad: object) -> None:
    """A bucket that is not a Bucket nor a member's value lists the accepted buckets."""
    with pytest.raises(ConfigurationError) as info:
        register_span_groups("lib", {unique("b"): bad})  # type: ignore[dict-item]
    assert "Bucket.PRODUCTIVE" in str(info.value)


def test_preset_and_group_names_do_not_collide() -> None:
    """A preset cannot reuse a group name and vice versa."""
    with pytest.raises(ConfigurationError, match="group name"):
        register_span_groups("lib", {}, presets={"job": ["step"]})
    with pytest.raises(ConfigurationError, match="preset name"):
        register_span_groups("lib", {"default": None})


def test_user_preset_resolves_against_registry() -> None:
    """A preset may name presets and groups; unregistered members join when registered."""
    late = unique("late")
    preset = unique("preset")
    register_span_groups("lib", {}, presets={preset: ["default", late]})
    with pytest.warns(UserWarning, match=f"preset '{preset}' names '{late}'"):
        assert resolve_span_groups(preset) == resolve_span_groups("default")
    register_span_groups("lib", {late: Bucket.OVERHEAD})
    assert late in resolve_span_groups(preset)
    assert late in registered_presets()[preset]


def test_pending_name_warns_once_and_activates_on_registration() -> None:
    """A name not yet registered is kept pending and turns on when declared."""
    late = unique("pending")
    with pytest.warns(UserWarning, match=late), capture_spans(f"default,{late}") as captured:
        assert not is_span_group_enabled(late)
        with managed_span(late, "before"):
            pass
        register_span_groups("late_lib", {late: Bucket.PRODUCTIVE})
        assert is_span_group_enabled(late)
        with managed_span(late, "after"):
            pass
    assert captured.names() == ["after"]


def test_disabled_means_empty_set(spans: CapturedSpans) -> None:
    """set_span_groups switches at runtime; telemetry off gives the empty set."""
    assert "per_prompt" in enabled_span_groups()
    assert set_span_groups("default") == resolve_span_groups("default")
    assert not is_span_group_enabled("generation")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("reward", False), ("per_prompt", True), ("reward,per_prompt", True), ("per_step", False)],
)
def test_is_span_group_enabled_answers_for_the_per_prompt_scope(spec: str, expected: bool) -> None:
    """Inside a per-prompt scope the answer follows per_prompt, as the spans do."""
    with capture_spans(spec) as captured:
        assert is_span_group_enabled("reward") == ("reward" in enabled_span_groups())
        with per_prompt_scope():
            assert is_span_group_enabled("reward") is expected
            with managed_span("reward", "score") as span:
                assert span.is_recording() is expected
            with dispatch_scope():
                assert is_span_group_enabled("reward") is expected
        assert is_span_group_enabled("reward") == ("reward" in enabled_span_groups())
    assert len(captured.by_name("score")) == int(expected)


def test_disabled_telemetry_enables_nothing() -> None:
    """With telemetry off every group reads as disabled."""
    assert enabled_span_groups() == frozenset()
    assert not is_span_group_enabled("job")


@given(st.lists(st.sampled_from(sorted(BUILTIN_UMBRELLAS | set(BUILTIN_LEAVES))), max_size=8))
def test_gating_emits_exactly_the_enabled_groups(chosen: list[str]) -> None:
    """For any spec, a span is emitted iff its group is enabled."""
    with capture_spans(",".join(chosen)) as captured:
        for group in sorted(BUILTIN_UMBRELLAS | set(BUILTIN_LEAVES)):
            with managed_span(group, group):
                pass
    assert set(captured.names()) == set(chosen)
