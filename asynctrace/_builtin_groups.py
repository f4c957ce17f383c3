"""The built-in namespace: asynctrace's own span groups and its ``default`` preset."""

from __future__ import annotations

from typing import Final

from ._group_types import BY_CATEGORY, Bucket, SpanGroup

__all__ = ["BUILTIN_GROUPS", "DEFAULT_PRESET", "EFFICIENCY", "LOOP_STALL", "PER_PROMPT"]

PER_PROMPT = "per_prompt"
EFFICIENCY = "efficiency"
LOOP_STALL = "loop_stall"

BUILTIN_GROUPS: Final = [
    SpanGroup("job", None, description="the whole-run root span"),
    SpanGroup("step", None, description="one span per training step"),
    SpanGroup("rollout", None, description="rollout batches (overlap each other)"),
    SpanGroup("setup", None, description="startup phases before the first step"),
    SpanGroup("model_init", None, description="model loading on workers"),
    SpanGroup("evaluate", None, description="validation runs"),
    SpanGroup(
        PER_PROMPT,
        None,
        per_item=True,
        description="spans emitted once per prompt/item (a cardinality axis, not a phase)",
    ),
    SpanGroup("generation", Bucket.PRODUCTIVE, description="model generation calls"),
    SpanGroup("reward", Bucket.PRODUCTIVE, description="reward computation"),
    SpanGroup("policy_update", Bucket.PRODUCTIVE, description="optimizer/training steps"),
    SpanGroup("data_processing", Bucket.OVERHEAD, description="batch preparation"),
    SpanGroup("data_plane", Bucket.OVERHEAD, description="batch-shaped data transfers"),
    SpanGroup("checkpoint", Bucket.OVERHEAD, description="checkpoint staging (+ finalize)"),
    SpanGroup("logprob", Bucket.OVERHEAD, description="policy/reference log-probs"),
    SpanGroup("advantage", Bucket.OVERHEAD, description="advantage computation"),
    SpanGroup(EFFICIENCY, BY_CATEGORY, description="idle and wasted waits (efficiency spans)"),
    # Next to efficiency: time the event loop lost, never bucketed (a stall
    # overlaps the spans it stretched).
    SpanGroup(
        LOOP_STALL,
        None,
        description="event-loop stalls: one unbucketed span per blocking call over the threshold",
    ),
]

DEFAULT_PRESET: Final = ("job", "checkpoint", "evaluate", "setup", "model_init")
