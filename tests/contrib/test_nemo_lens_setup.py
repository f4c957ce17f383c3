"""asynctrace_contrib.nemo_lens: setup, span-group classes, any-name groups, carriers' baggage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest
from _lens_state import forget_setup
from asynctrace_contrib import nemo_lens
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace as at
from asynctrace.testing import capture_spans

LENS_VARIABLES = (
    "ENABLED",
    "SPAN_GROUPS",
    "EXPORTER",
    "EXPORT_STRATEGY",
    "EXPORT_RANK",
    "EXPORT_SAMPLE_RATE",
    "TRACES_ENABLED",
)


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts as a process that never called setup_telemetry, with no NEMO_LENS_*."""
    forget_setup(monkeypatch)
    for name in LENS_VARIABLES:
        monkeypatch.delenv(f"NEMO_LENS_{name}", raising=False)
    yield
    at.shutdown()


def configure_application(exporter: InMemorySpanExporter) -> at.Telemetry:
    """The application's own configuration, every group on."""
    return at.configure(at.TelemetryConfig(enabled=True, span_groups="all", exporters=[exporter]))


def test_disabled_setup_leaves_the_application_configuration_alone() -> None:
    """A disabled lens config (nothing set) is a no-op: the application's groups stay on."""
    exporter = InMemorySpanExporter()
    application = configure_application(exporter)
    assert at.is_span_group_enabled("step")
    handle = nemo_lens.setup_telemetry(nemo_lens.NemoLensConfig.from_env())
    assert at.is_span_group_enabled("step")
    assert at.current_telemetry() is application
    assert not handle.is_exporting
    assert handle.telemetry is None
    handle.shutdown()
    assert application.enabled
    with at.umbrella_span("step", "rl.step"):
        pass
    assert application.flush()
    assert [s.name for s in exporter.get_finished_spans()] == ["rl.step"]


def test_disabled_setup_does_not_look_at_the_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    """NEMO_LENS_EXPORTER=none with telemetry off is fine; with it on, it is refused."""
    monkeypatch.setenv("NEMO_LENS_EXPORTER", "none")
    assert not nemo_lens.setup_telemetry(nemo_lens.NemoLensConfig.from_env()).is_exporting
    monkeypatch.setenv("NEMO_LENS_ENABLED", "1")
    with pytest.raises(ValueError, match="Unknown exporter 'none'"):
        nemo_lens.setup_telemetry(nemo_lens.NemoLensConfig.from_env())
    assert at.current_telemetry() is None  # refused before anything changed


def test_enabled_setup_reuses_the_application_configuration() -> None:
    """An application's configure() is reused, not replaced; shutting the handle leaves it."""
    exporter = InMemorySpanExporter()
    application = configure_application(exporter)
    config = nemo_lens.NemoLensConfig(enabled=True, span_groups="job", exporter="console")
    handle = nemo_lens.setup_telemetry(config)
    assert handle.telemetry is application
    assert handle.is_exporting
    assert at.current_telemetry() is application
    assert at.is_span_group_enabled("step")  # the application's "all", not the lens "job"
    assert nemo_lens.setup_telemetry(config).telemetry is application  # again: reused again
    handle.shutdown()
    assert application.enabled
    with nemo_lens.managed_span("optimizer", "rl.policy.optimizer_step"):
        pass
    assert application.flush()
    assert [s.name for s in exporter.get_finished_spans()] == ["rl.policy.optimizer_step"]


def test_second_own_setup_still_raises() -> None:
    """lens's rule holds for setup_telemetry's own configuration."""
    config = nemo_lens.NemoLensConfig(enabled=True, export_strategy="all_ranks")
    handle = nemo_lens.setup_telemetry(config, span_exporter=InMemorySpanExporter())
    try:
        with pytest.raises(RuntimeError, match="already been initialised"):
            nemo_lens.setup_telemetry(config, span_exporter=InMemorySpanExporter())
    finally:
        handle.shutdown()


FT = "lenstest.ft"
CKPT = "lenstest.ckpt"


class LibrarySpanGroup(nemo_lens.SpanGroup):
    """A lens library's groups, declared the lens way (as NVRx and Megatron do)."""

    FT = FT
    CKPT = CKPT
    ALL_GROUPS: ClassVar[frozenset[str]] = nemo_lens.SpanGroup.ALL_GROUPS | {FT, CKPT}
    _PRESETS: ClassVar[dict[str, frozenset[str]]] = {
        **{name: g | {FT, CKPT} for name, g in nemo_lens.SpanGroup._PRESETS.items()},
        "lenstest": frozenset({FT, CKPT}),
    }


def test_span_group_cls_groups_are_resolved_and_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """from_env(span_group_cls=...) resolves through the class; setup records its groups."""
    monkeypatch.setenv("NEMO_LENS_ENABLED", "1")
    monkeypatch.setenv("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
    monkeypatch.setenv("NEMO_LENS_SPAN_GROUPS", "lenstest,job")
    config = nemo_lens.NemoLensConfig.from_env(span_group_cls=LibrarySpanGroup)
    assert config.resolved_span_groups == {FT, CKPT, "job"}
    default = nemo_lens.NemoLensConfig(span_groups="default", _span_group_cls=LibrarySpanGroup)
    assert default.resolved_span_groups >= {FT, CKPT, "job", "checkpoint", "evaluate"}
    exporter = InMemorySpanExporter()
    handle = nemo_lens.setup_telemetry(config, span_exporter=exporter)
    try:
        assert handle.is_exporting
        assert nemo_lens.is_span_group_enabled(FT)
        assert not nemo_lens.is_span_group_enabled("step")
        with nemo_lens.managed_span(LibrarySpanGroup.FT, "nvrx.ft.cycle", cycle=1):
            pass
    finally:
        handle.shutdown()
    (span,) = exporter.get_finished_spans()
    assert span.name == "nvrx.ft.cycle"
    assert span.attributes is not None
    assert span.attributes["cycle"] == 1
    assert at.registered_span_groups()[FT].bucket is None  # lens has no buckets


def test_span_group_cls_must_subclass_the_ported_span_group() -> None:
    """A class that is not the ported SpanGroup's subclass is refused, naming the fix."""
    config = nemo_lens.NemoLensConfig(enabled=True, _span_group_cls=dict)
    with pytest.raises(TypeError, match="not a subclass"):
        nemo_lens.setup_telemetry(config)


def test_set_enabled_span_groups_enables_names_nobody_registered() -> None:
    """As in lens, any name passed in is enabled and its spans are recorded."""
    with capture_spans("job") as captured:
        nemo_lens.set_enabled_span_groups({"job", "lenstest.adhoc"})
        assert nemo_lens.is_span_group_enabled("lenstest.adhoc")
        with nemo_lens.managed_span("lenstest.adhoc", "adhoc.work"):
            pass
    assert captured.names() == ["adhoc.work"]


def test_extract_context_restores_the_senders_baggage() -> None:
    """inject_context then extract_context: the span context and the caller's baggage."""
    with capture_spans("all", propagate_scopes=True):
        token = otel_context.attach(baggage.set_baggage("tenant", "team-a"))
        try:
            with at.iteration_scope(7), at.umbrella_span("step", "rl.step") as parent:
                carrier: dict[str, str] = {}
                nemo_lens.inject_context(carrier)
                ctx = nemo_lens.extract_context({})  # no trace: empty, not the current one
                assert not trace.get_current_span(ctx).get_span_context().is_valid
                assert baggage.get_all(ctx) == {}
        finally:
            otel_context.detach(token)
        assert "baggage" in carrier
        ctx = nemo_lens.extract_context(carrier)
        assert baggage.get_baggage("tenant", ctx) == "team-a"
        remote = trace.get_current_span(ctx).get_span_context()
        assert remote.span_id == parent.get_span_context().span_id
        assert baggage.get_baggage("tenant") is None  # nothing was left attached
