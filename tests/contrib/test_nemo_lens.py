"""asynctrace_contrib.nemo_lens: a lens script ported by changing its imports behaves the same."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from asynctrace_contrib import nemo_lens

import asynctrace as at
from asynctrace.testing import capture_spans

EXAMPLE = Path(__file__).with_name("_lens_example.py")
LENS_IMPORTS = re.compile(r"^from nemo\.lens(?:\.contrib\.ray)? import", re.MULTILINE)
HAVE_LENS = importlib.util.find_spec("nemo") is not None and (
    importlib.util.find_spec("nemo.lens") is not None
)


def run_example(source: str, tmp_path: Path, name: str, groups: str) -> list[dict[str, Any]]:
    """Run *source* as a script with lens's variables; its spans, as printed."""
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    env = {
        **os.environ,
        "NEMO_LENS_ENABLED": "1",
        "NEMO_LENS_SPAN_GROUPS": groups,
        "NEMO_LENS_EXPORTER": "console",
        "EXPECT_TRACE_IDS_EQUAL": "1",
        "ASYNCTRACE_STRICT": "1",
    }
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.skipif(not HAVE_LENS, reason="nemo-lens 0.1.0 (Python >= 3.13) is not installed")
@pytest.mark.parametrize("groups", ["per_step", "job,optimizer", "job,step,forward_backward"])
def test_port_is_an_import_change(tmp_path: Path, groups: str) -> None:
    """Under lens and ported, the same spans, parents and lens attributes for each group spec."""
    original = EXAMPLE.read_text()
    ported, count = LENS_IMPORTS.subn("from asynctrace_contrib.nemo_lens import", original)
    assert count == 2  # only the two import lines changed
    under_lens = run_example(original, tmp_path, "lens", groups)
    under_asynctrace = run_example(ported, tmp_path, "ported", groups)
    assert under_lens  # the script does record something under every spec used here
    shape = sorted((s["name"], s["parent"]) for s in under_lens)
    assert sorted((s["name"], s["parent"]) for s in under_asynctrace) == shape
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in under_asynctrace:
        by_name.setdefault(span["name"], []).append(span["attributes"])
    for span in under_lens:  # lens's attributes are all there, with lens's values
        assert any(span["attributes"].items() <= a.items() for a in by_name[span["name"]])


def test_lens_groups_are_registered_with_buckets() -> None:
    """forward_backward, optimizer and load_checkpoint exist, so their spans are not lost."""
    groups = at.registered_span_groups()
    assert groups["forward_backward"].bucket is at.Bucket.PRODUCTIVE
    assert groups["optimizer"].bucket is at.Bucket.PRODUCTIVE
    assert groups["load_checkpoint"].bucket is at.Bucket.OVERHEAD
    assert set(groups) >= nemo_lens.SpanGroup.ALL_GROUPS
    assert nemo_lens.SpanGroup.resolve("per_step") >= nemo_lens.SpanGroup.ALL_GROUPS


def test_from_env_reads_lens_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """NEMO_LENS_* (and a prefix with a fallback) are read as lens reads them."""
    monkeypatch.setenv("NEMO_LENS_ENABLED", "yes")
    monkeypatch.setenv("NEMO_LENS_SPAN_GROUPS", "job,optimizer")
    monkeypatch.setenv("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
    monkeypatch.setenv("MEGATRON_OTEL_EXPORT_RANK", "3")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
    config = nemo_lens.NemoLensConfig.from_env("MEGATRON_OTEL", fallback_prefix="NEMO_LENS")
    assert config.enabled
    assert config.span_groups == "job,optimizer"
    assert config.export_strategy == "all_ranks"
    assert config.export_rank == 3
    assert config.service_name == "trainer"
    assert config.resolved_span_groups == {"job", "optimizer"}
    monkeypatch.setenv("NEMO_LENS_ENABLED", "maybe")
    with pytest.raises(ValueError, match="Invalid boolean for NEMO_LENS_ENABLED"):
        nemo_lens.NemoLensConfig.from_env()


def test_setup_telemetry_exports_on_the_strategy_rank_only(tmp_path: Path) -> None:
    """single_rank exports on the last rank by default; others get telemetry off."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    config = nemo_lens.NemoLensConfig(enabled=True, span_groups="per_step")
    off = nemo_lens.setup_telemetry(config, rank=0, world_size=2, _allow_reinit=True)
    assert not off.is_exporting
    assert not nemo_lens.is_span_group_enabled("step")
    exporter = InMemorySpanExporter()
    on = nemo_lens.setup_telemetry(
        config, rank=1, world_size=2, span_exporter=exporter, _allow_reinit=True
    )
    try:
        assert on.is_exporting
        with pytest.raises(RuntimeError, match="already been initialised"):
            nemo_lens.setup_telemetry(config, rank=1, world_size=2)
        with nemo_lens.managed_span("optimizer", "rl.policy.optimizer_step", lr=0.1):
            pass
    finally:
        on.shutdown()
    (span,) = exporter.get_finished_spans()
    assert span.name == "rl.policy.optimizer_step"
    assert span.attributes["lr"] == 0.1
    assert span.resource.attributes["service.name"] == "nemo"


def test_async_trace_fn_times_the_awaited_body() -> None:
    """trace_fn on an async def spans the awaited call (lens's ends at coroutine creation)."""

    @nemo_lens.trace_fn("policy_update", "rl.policy.train")
    async def train() -> int:
        await asyncio.sleep(0.05)
        return 1

    with capture_spans("all") as captured:
        started = time.perf_counter()
        assert asyncio.run(train()) == 1
        elapsed = time.perf_counter() - started
    (span,) = captured.by_name("rl.policy.train")
    assert span.end_time is not None
    assert span.start_time is not None
    assert 0.045 <= (span.end_time - span.start_time) / 1e9 <= elapsed


def test_managed_span_disabled_and_attribute_rules() -> None:
    """Disabled: a non-recording span, no error; enabled: lens's attribute filtering."""
    with nemo_lens.managed_span("optimizer", "off", x=1) as span:
        assert not span.is_recording()
        span.set_attribute("safe", True)
    with capture_spans("job,optimizer") as captured:
        with nemo_lens.managed_span(
            "optimizer", "on", token="t", n=None, xs=(1, 2), bad=[object()]
        ):
            pass
        nemo_lens.set_enabled_span_groups(frozenset({"job"}))
        with nemo_lens.managed_span("optimizer", "gated"):
            pass
    (span,) = captured.spans
    assert dict(span.attributes) == {
        "token": "[REDACTED]",
        "xs": (1, 2),
        "rl.bucket": "productive",
    }


def test_ray_helpers_carry_the_trace_under_lens_keyword() -> None:
    """ray_dispatch_with_context sends _otel_carrier; traced_remote_call reopens it."""

    @nemo_lens.traced_remote_call
    def work(x: int) -> int:
        return x + 1

    class Remote:
        def remote(self, *args: Any, **kwargs: Any) -> int:
            assert "_otel_carrier" in kwargs
            return work(*args, **kwargs)

    with capture_spans("all") as captured:
        with at.umbrella_span("job", "driver") as parent:
            assert nemo_lens.ray_dispatch_with_context(Remote(), 1) == 2
    (child,) = [s for s in captured.spans if s.name != "driver"]
    assert child.context.trace_id == parent.get_span_context().trace_id
    assert child.name.endswith("work")
