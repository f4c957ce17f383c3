"""asynctrace: asyncio-first OpenTelemetry instrumentation for async training pipelines.

Spans are grouped into named switches (span groups); a disabled group costs a
set lookup. Leaf spans carry a goodput bucket, umbrellas never do, and scopes
(ContextVars) stamp iteration, bucket and per-prompt gating on everything
started inside them.

Example:
    >>> import asynctrace
    >>> with asynctrace.iteration_scope(3):
    ...     with asynctrace.managed_span("policy_update", "train.step") as span:
    ...         span.set_attribute("train.loss", 0.5)
"""

from __future__ import annotations

from ._decorators import trace_fn, umbrella_trace_fn
from ._efficiency import (
    PollWait,
    efficiency_bucket,
    efficiency_span,
    set_efficiency_bucket,
    start_efficiency_span,
)
from ._errors import ConfigurationError, MissingExtraError
from ._groups import (
    BY_CATEGORY,
    Bucket,
    SpanGroup,
    register_span_groups,
    registered_presets,
    registered_span_groups,
    resolve_span_groups,
)
from ._scopes import (
    bucket_scope,
    current_bucket,
    current_iteration,
    in_per_prompt_scope,
    iteration_scope,
    per_prompt_scope,
)
from ._spans import instant, managed_span, umbrella_span
from ._state import (
    disable_telemetry,
    enable_telemetry,
    enabled_span_groups,
    get_tracer,
    is_span_group_enabled,
    set_span_groups,
)

__version__ = "0.1.0"

__all__ = [
    "BY_CATEGORY",
    "Bucket",
    "ConfigurationError",
    "MissingExtraError",
    "PollWait",
    "SpanGroup",
    "__version__",
    "bucket_scope",
    "current_bucket",
    "current_iteration",
    "disable_telemetry",
    "efficiency_bucket",
    "efficiency_span",
    "enable_telemetry",
    "enabled_span_groups",
    "get_tracer",
    "in_per_prompt_scope",
    "instant",
    "is_span_group_enabled",
    "iteration_scope",
    "managed_span",
    "per_prompt_scope",
    "register_span_groups",
    "registered_presets",
    "registered_span_groups",
    "resolve_span_groups",
    "set_efficiency_bucket",
    "set_span_groups",
    "start_efficiency_span",
    "trace_fn",
    "umbrella_span",
    "umbrella_trace_fn",
]
