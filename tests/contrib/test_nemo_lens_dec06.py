"""asynctrace_contrib.nemo_lens: set_enabled_span_groups refuses a string; an unknown group's
message quotes the spec as written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from asynctrace_contrib import nemo_lens

import asynctrace as at
from asynctrace.testing import capture_spans


def test_set_enabled_span_groups_refuses_a_string() -> None:
    """A bare string is refused, naming the argument and the value: taken as a collection
    it would be its characters (groups s, t, e, p) and turn every real group off."""
    before = at.registered_span_groups()
    with capture_spans("default") as captured:
        with pytest.raises(at.ConfigurationError) as info:
            nemo_lens.set_enabled_span_groups("step")  # type: ignore[arg-type]
        message = str(info.value)
        assert "groups='step'" in message
        assert "frozenset" in message
        # Nothing changed: no group registered, the enabled groups as the capture set them.
        assert at.registered_span_groups() == before
        assert nemo_lens.is_span_group_enabled("job")
        assert "s" not in at.enabled_span_groups()
        with pytest.raises(at.ConfigurationError):
            nemo_lens.set_enabled_span_groups(b"step")  # type: ignore[arg-type]
        nemo_lens.set_enabled_span_groups(["step"])  # a list still works
        with nemo_lens.managed_span("step", "rl.grpo.step"):
            pass
    assert captured.names() == ["rl.grpo.step"]


def test_an_unknown_group_quotes_the_whole_spec() -> None:
    """The error for an unknown name quotes the spec the user wrote, not the leftover."""
    spec = "per_step,bogus"
    with pytest.raises(at.ConfigurationError) as info:
        nemo_lens.NemoLensConfig(enabled=True, span_groups=spec).resolved_span_groups  # noqa: B018
    message = str(info.value)
    assert "'bogus'" in message
    assert f"in {spec!r};" in message
    with pytest.raises(at.ConfigurationError) as info:
        nemo_lens.SpanGroup.resolve("job, NOPE ,optimizer")
    assert "in 'job, NOPE ,optimizer';" in str(info.value)


_UNDER_A_CAPTURE = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="LOG %(message)s")
import asynctrace as at
import asynctrace_contrib.nemo_lens as nl
from asynctrace.testing import capture_spans
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

if sys.argv[1] == "sdk":
    trace.set_tracer_provider(TracerProvider())  # lens's test pattern, set by a conftest
with capture_spans("default") as cap:
    nl.set_enabled_span_groups({"step"})
    with nl.managed_span("step", "rl.grpo.step"):
        pass
print("captured", [s.name for s in cap.spans])
print("after", at.current_telemetry(), at.is_telemetry_enabled())
"""


@pytest.mark.parametrize("global_provider", ["none", "sdk"])
def test_set_enabled_span_groups_under_a_capture_sets_the_capture_groups(
    global_provider: str,
) -> None:
    """Under ``capture_spans`` (telemetry on, no ``configure``), the groups are set on the
    running capture: its span is captured, no warning says nothing is recorded, and no
    telemetry of its own is configured through a global SDK provider (which took the
    capture's spans and outlived it). In a child: the global provider is set once."""
    result = subprocess.run(
        [sys.executable, "-c", _UNDER_A_CAPTURE, global_provider],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "captured ['rl.grpo.step']" in result.stdout, result.stdout
    assert "after None False" in result.stdout, result.stdout
    assert "no span is recorded" not in result.stdout + result.stderr
