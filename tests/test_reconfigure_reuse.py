"""Reconfiguring with the user's own objects: their tracer provider and their exporters.

A user's SDK provider gets asynctrace's span processors for as long as one
configuration runs, and loses them at its shutdown; an exporter object that
the new configuration lists again keeps running across the reconfiguration.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace as at


def _processors(provider: TracerProvider) -> tuple[Any, ...]:
    processors: tuple[Any, ...] = provider._active_span_processor._span_processors
    return processors


def test_reconfiguring_with_the_users_provider_leaves_one_set_of_processors() -> None:
    """Five configurations in a row: the provider holds the last one's processors only."""
    provider = TracerProvider()
    users = SimpleSpanProcessor(InMemorySpanExporter())
    provider.add_span_processor(users)
    config = {
        "enabled": True,
        "exporters": ["memory"],
        "span_groups": "generation",
        "provider": provider,
    }
    for _ in range(5):
        telemetry = at.configure(config)
    try:
        with at.managed_span("generation", "x"):
            pass
        attached = _processors(provider)
        assert len(attached) == 3, attached  # the tracker, the memory exporter's, the user's
        assert attached[-1] is users
        assert telemetry.memory_exporter is not None
        assert [s.name for s in telemetry.memory_exporter.get_finished_spans()] == ["x"]
    finally:
        at.shutdown()
    assert _processors(provider) == (users,)


def test_the_users_provider_runs_only_its_own_processors_after_shutdown() -> None:
    """After shutdown the user's spans reach the user's processor, and nothing of ours."""
    provider = TracerProvider()
    mine = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(mine))
    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "span_groups": "all", "provider": provider}
    )
    ours = telemetry.memory_exporter
    assert ours is not None
    assert telemetry.shutdown(5.0)
    with provider.get_tracer("app").start_as_current_span("after"):
        pass
    assert [s.name for s in mine.get_finished_spans()] == ["after"]
    assert ours.get_finished_spans() == ()
    assert len(_processors(provider)) == 1


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_an_exporter_listed_again_keeps_running_across_reconfiguration(provider: str) -> None:
    """One configuration object, configured twice: the exporter gets both runs' spans."""
    exporter = InMemorySpanExporter()
    config = {
        "enabled": True,
        "exporters": [exporter],
        "span_groups": "generation",
        "provider": provider,
    }
    first = at.configure(config)
    with at.managed_span("generation", "one"):
        pass
    second = at.configure(config)
    assert not first.enabled
    try:
        with at.managed_span("generation", "two"):
            pass
        assert second.flush(5.0)
        assert [s.name for s in exporter.get_finished_spans()] == ["one", "two"]
        stats = second.stats()["InMemorySpanExporter"]
        assert (stats.exported, stats.failed) == (1, 0)
    finally:
        assert second.shutdown(5.0)
    # The last configuration's shutdown shuts it down: nothing lists it again.
    assert exporter._stopped


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_an_exporter_not_listed_again_is_shut_down_at_reconfiguration(provider: str) -> None:
    """The exporters the new configuration leaves out are shut down with the old one."""
    dropped, kept = InMemorySpanExporter(), InMemorySpanExporter()
    at.configure({"enabled": True, "exporters": [dropped, kept], "provider": provider})
    second = at.configure({"enabled": True, "exporters": [kept], "provider": provider})
    try:
        assert dropped._stopped
        assert not kept._stopped
    finally:
        second.shutdown(5.0)
    assert kept._stopped
