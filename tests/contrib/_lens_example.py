"""A nemo-lens training script, written against lens 0.1.0's public names.

``tests/contrib/test_nemo_lens.py`` runs it as it is (with nemo-lens
installed) and with its two import lines changed to
``asynctrace_contrib.nemo_lens``, and compares the spans. It prints one JSON
line per finished span: name, parent name, attributes.
"""

import json
import os
import sys

from nemo.lens import (
    NemoLensConfig,
    SpanGroup,
    extract_context,
    inject_context,
    is_span_group_enabled,
    managed_span,
    setup_telemetry,
    span_cm,
    trace_fn,
)
from nemo.lens.contrib.ray import ray_dispatch_with_context, traced_remote_call
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1, span_exporter=exporter)


@trace_fn(SpanGroup.OPTIMIZER, "rl.policy.optimizer_step")
def optimizer_step(lr: float) -> float:
    return lr * 0.5


@traced_remote_call
def remote_rollout(batch: int) -> int:
    """Stands in for a Ray actor method; lens's wrapper reopens the caller's trace."""
    return batch * 2


class Remote:
    """Stands in for ``actor.method`` (``.remote(...)`` calls it here, in-process)."""

    def remote(self, *args, **kwargs):
        return remote_rollout(*args, **kwargs)


def train() -> None:
    with managed_span(SpanGroup.JOB, "rl.grpo.job", **{"rl.algorithm": "grpo"}):
        with managed_span(
            SpanGroup.LOAD_CHECKPOINT, "rl.policy.load_checkpoint", path="/ckpt/7", shard=None
        ):
            pass
        for step in range(1, 3):
            with managed_span(SpanGroup.STEP, "rl.grpo.step", **{"rl.iteration": step}):
                with managed_span(
                    SpanGroup.FORWARD_BACKWARD,
                    "rl.policy.forward_backward",
                    microbatches=4,
                    prompt="a prompt that must not be recorded",
                    shapes=[8, 128],
                    config={"not": "a scalar"},
                ):
                    pass
                optimizer_step(1e-5)
                if is_span_group_enabled(SpanGroup.STEP):
                    ray_dispatch_with_context(Remote(), 16)
                carrier: dict = {}
                inject_context(carrier)
                token = otel_context.attach(extract_context(carrier))
                try:
                    with span_cm("rl.collector.batch", batch_size=16):
                        pass
                finally:
                    otel_context.detach(token)
        with managed_span(SpanGroup.CHECKPOINT, "rl.grpo.checkpointing", step=2):
            pass


train()
handle.shutdown()
spans = exporter.get_finished_spans()
names = {span.context.span_id: span.name for span in spans}
for span in spans:
    parent = names.get(span.parent.span_id) if span.parent is not None else None
    line = {"name": span.name, "parent": parent, "attributes": dict(span.attributes or {})}
    sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
if os.environ.get("EXPECT_TRACE_IDS_EQUAL"):
    assert len({span.context.trace_id for span in spans}) <= 1
