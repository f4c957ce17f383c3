"""Ray: one trace from the driver into an actor (runs in `nox -s ray`)."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import asynctrace as at
from asynctrace.testing import CapturedSpans

ray = pytest.importorskip("ray")


class TracedActor:
    """An actor that exports its spans in its own process."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        at.enable_telemetry(provider, span_groups="all")

    @at.accepts_trace_context
    def run_rollouts(self, batch: list[int]) -> int:
        """Open a span under the caller's carrier."""
        with at.managed_span("generation", "actor.run_rollouts"):
            return sum(batch)

    def exported(self) -> list[dict[str, Any]]:
        """What this process exported."""
        import os

        return [
            {
                "name": s.name,
                "trace_id": s.context.trace_id,
                "parent_id": s.parent.span_id if s.parent else None,
                "pid": os.getpid(),
            }
            for s in self.exporter.get_finished_spans()
        ]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A real local Ray cluster."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_actor_span_is_child_of_driver_span(ray_cluster: None, spans: CapturedSpans) -> None:
    """driver → task → ContextThread → pool → to_thread → Ray actor: one trace."""
    import os

    actor = ray.remote(TracedActor).remote()
    results: dict[str, Any] = {}

    def in_pool() -> None:
        with at.managed_span("data_processing", "pool"):

            async def hop() -> None:
                await at.to_thread(in_to_thread)

            asyncio.run(hop())

    def in_to_thread() -> None:
        with at.umbrella_span("rollout", "dispatch"):
            ref = at.dispatch_with_trace_context(actor.run_rollouts.remote, [1, 2, 3])
            results["sum"] = ray.get(ref, timeout=120)

    def in_thread(pool: Any) -> None:
        with at.managed_span("data_processing", "thread"):
            pool.submit(in_pool).result()

    async def driver() -> None:
        with ThreadPoolExecutor(1) as raw, at.umbrella_span("job", "driver"):
            pool = at.context_executor(raw)

            async def task() -> None:
                with at.umbrella_span("rollout", "task"):
                    thread = at.ContextThread(target=in_thread, args=(pool,))
                    thread.start()
                    await asyncio.get_running_loop().run_in_executor(None, thread.join)

            await asyncio.create_task(task())

    asyncio.run(driver())
    assert results["sum"] == 6
    by_name = {s.name: s for s in spans.spans}
    trace_id = by_name["driver"].context.trace_id
    chain = ["driver", "task", "thread", "pool", "dispatch"]
    for parent, child in itertools.pairwise(chain):
        assert by_name[child].context.trace_id == trace_id
        assert by_name[child].parent.span_id == by_name[parent].context.span_id
    (remote,) = ray.get(actor.exported.remote(), timeout=60)
    assert remote["name"] == "actor.run_rollouts"
    assert remote["pid"] != os.getpid()
    assert remote["trace_id"] == trace_id
    assert remote["parent_id"] == by_name["dispatch"].context.span_id


def test_actor_call_without_carrier_still_works(ray_cluster: None) -> None:
    """The decorated actor method works when called without a carrier."""
    actor = ray.remote(TracedActor).remote()
    assert ray.get(actor.run_rollouts.remote([4]), timeout=120) == 4


class ScopedActor:
    """An actor whose process propagates scopes (or not), exporting its own spans."""

    def __init__(self, propagate: bool) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        at.enable_telemetry(provider, span_groups="per_step", propagate_scopes=propagate)

    @at.accepts_trace_context
    def score(self, value: int) -> bool:
        """Open a reward span; report whether the call runs in a per-prompt scope."""
        with at.managed_span("reward", "actor.score"):
            return at.in_per_prompt_scope()

    def exported(self) -> list[dict[str, Any]]:
        """Names and attributes of what this process exported."""
        spans = self.exporter.get_finished_spans()
        self.exporter.clear()
        return [{"name": s.name, **dict(s.attributes or {})} for s in spans]


@pytest.mark.parametrize("propagate", [True, False])
def test_actor_spans_carry_the_drivers_scopes(ray_cluster: None, propagate: bool) -> None:
    """propagate_scopes: the actor's span carries rl.iteration, task and session ids, and
    per-prompt work is gated on per_prompt over there too; off: none of it crosses."""
    from asynctrace.testing import capture_spans

    actor = ray.remote(ScopedActor).remote(propagate)
    with capture_spans("all", propagate_scopes=propagate):
        with at.iteration_scope(4), at.task_scope(8), at.session_scope() as session:
            with at.umbrella_span("step", "driver.step"):
                plain = ray.get(at.dispatch_with_trace_context(actor.score.remote, 1), timeout=120)
                spans = ray.get(actor.exported.remote(), timeout=60)
                with at.per_prompt_scope():
                    ref = at.dispatch_with_trace_context(actor.score.remote, 2)
                    per_prompt = ray.get(ref, timeout=120)
                per_prompt_spans = ray.get(actor.exported.remote(), timeout=60)
    assert plain is False
    (span,) = spans
    if propagate:
        assert (span["rl.iteration"], span["rl.task_id"], span["rl.session_id"]) == (4, 8, session)
        assert per_prompt is True
        assert per_prompt_spans == []  # per_step has no per_prompt: off on the actor too
    else:
        assert "rl.iteration" not in span
        assert "rl.session_id" not in span
        assert per_prompt is False
        assert [s["name"] for s in per_prompt_spans] == ["actor.score"]


class LensStyleActor:
    """An actor whose method is wrapped the nemo-lens way (``traced_remote_call``)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        at.enable_telemetry(provider, span_groups="all")

    def generate(self, n: int) -> int:
        """lens's wrapper opens a span named after the method, under the caller's carrier."""
        return n * 2

    def exported(self) -> list[dict[str, Any]]:
        """Names, trace ids and parents of what this process exported."""
        return [
            {
                "name": s.name,
                "trace_id": s.context.trace_id,
                "parent_id": s.parent.span_id if s.parent else None,
            }
            for s in self.exporter.get_finished_spans()
        ]


def _lens_style_actor() -> Any:
    from asynctrace_contrib import nemo_lens

    cls = type(
        "LensStyleActorWrapped",
        (LensStyleActor,),
        {"generate": nemo_lens.traced_remote_call(LensStyleActor.generate)},
    )
    return ray.remote(cls).remote()


def test_lens_keyword_and_asynctrace_keyword_join_one_trace(
    ray_cluster: None, spans: CapturedSpans
) -> None:
    """During a migration: a lens-keyword call (``_otel_carrier``) into an asynctrace actor,
    an asynctrace-keyword call into it, and an asynctrace call sending lens's keyword into a
    lens-style actor all join the driver's trace, as children of the dispatching span."""
    from asynctrace_contrib import nemo_lens

    ported = ray.remote(TracedActor).remote()
    old = _lens_style_actor()
    with at.umbrella_span("job", "driver") as driver:
        lens_call = nemo_lens.ray_dispatch_with_context(ported.run_rollouts, [1, 2])
        new_call = at.dispatch_with_trace_context(ported.run_rollouts.remote, [3])
        to_old = at.dispatch_with_trace_context(
            old.generate.remote, 5, carrier_kwarg="_otel_carrier"
        )
        assert ray.get([lens_call, new_call, to_old], timeout=120) == [3, 3, 10]
    trace_id = driver.get_span_context().trace_id
    span_id = driver.get_span_context().span_id
    remote = ray.get(ported.exported.remote(), timeout=60) + ray.get(
        old.exported.remote(), timeout=60
    )
    assert sorted(r["name"] for r in remote) == [
        "LensStyleActor.generate",
        "actor.run_rollouts",
        "actor.run_rollouts",
    ]
    assert all(r["trace_id"] == trace_id for r in remote)
    assert all(r["parent_id"] == span_id for r in remote)
