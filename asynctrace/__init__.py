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

from ._baggage_out import merge_baggage
from ._bind_context import bind_context
from ._carrier_calls import accepts_trace_context, dispatch_with_trace_context
from ._carrier_stats import carrier_stats
from ._carriers import current_trace_carrier, span_carrier
from ._config import TelemetryConfig
from ._context_executor import ContextExecutor, context_executor
from ._context_thread import ContextThread
from ._credential_names import is_credential_header, is_credential_key
from ._decorators import trace_fn, umbrella_trace_fn
from ._efficiency import efficiency_span
from ._efficiency_table import efficiency_bucket, set_efficiency_bucket
from ._env_carrier import extract_env, inject_env
from ._errors import ConfigurationError, MissingExtraError
from ._fast import FastTracerProvider, Sampling, SpanLimits
from ._goodput import on_step_goodput, remove_step_goodput
from ._goodput_stats import GoodputStats
from ._group_specs import resolve_span_groups
from ._group_types import BY_CATEGORY, Bucket, SpanGroup
from ._groups import register_span_groups, registered_presets, registered_span_groups
from ._managed_span import managed_span
from ._phases import register_phase, registered_phases
from ._poll_wait import PollWait, start_efficiency_span
from ._pump import dispatch_scope, wait_until
from ._redact import redact_text
from ._remote_context import remote_trace_context
from ._running import current_telemetry, flush, shutdown
from ._runtime import configure, init_driver, init_worker
from ._scopes import (
    bucket_scope,
    current_bucket,
    current_iteration,
    in_per_prompt_scope,
    iteration_scope,
    per_prompt_scope,
)
from ._secret_words import register_secret_words, secret_words
from ._session_config import SessionTracerConfig
from ._session_counters import increment_counter
from ._session_decorators import session_context, trace_session
from ._session_events import trace_session_event
from ._session_phase import atrace_session_phase, trace_session_phase
from ._sessions import current_session_id, current_task_id, session_scope, task_scope
from ._span_errors import record_error
from ._spans import detached_span, end_span, instant, start_span, umbrella_span
from ._state import (
    disable_telemetry,
    enable_telemetry,
    enabled_span_groups,
    get_tracer,
    is_span_group_enabled,
    is_telemetry_enabled,
    set_span_groups,
)
from ._step_goodput import StepGoodput
from ._telemetry import Telemetry
from ._threads import to_thread

__version__ = "0.1.0"

__all__ = [
    "BY_CATEGORY",
    "Bucket",
    "ConfigurationError",
    "ContextExecutor",
    "ContextThread",
    "FastTracerProvider",
    "GoodputStats",
    "MissingExtraError",
    "PollWait",
    "Sampling",
    "SessionTracerConfig",
    "SpanGroup",
    "SpanLimits",
    "StepGoodput",
    "Telemetry",
    "TelemetryConfig",
    "__version__",
    "accepts_trace_context",
    "atrace_session_phase",
    "bind_context",
    "bucket_scope",
    "carrier_stats",
    "configure",
    "context_executor",
    "current_bucket",
    "current_iteration",
    "current_session_id",
    "current_task_id",
    "current_telemetry",
    "current_trace_carrier",
    "detached_span",
    "disable_telemetry",
    "dispatch_scope",
    "dispatch_with_trace_context",
    "efficiency_bucket",
    "efficiency_span",
    "enable_telemetry",
    "enabled_span_groups",
    "end_span",
    "extract_env",
    "flush",
    "get_tracer",
    "in_per_prompt_scope",
    "increment_counter",
    "init_driver",
    "init_worker",
    "inject_env",
    "instant",
    "is_credential_header",
    "is_credential_key",
    "is_span_group_enabled",
    "is_telemetry_enabled",
    "iteration_scope",
    "managed_span",
    "merge_baggage",
    "on_step_goodput",
    "per_prompt_scope",
    "record_error",
    "redact_text",
    "register_phase",
    "register_secret_words",
    "register_span_groups",
    "registered_phases",
    "registered_presets",
    "registered_span_groups",
    "remote_trace_context",
    "remove_step_goodput",
    "resolve_span_groups",
    "secret_words",
    "session_context",
    "session_scope",
    "set_efficiency_bucket",
    "set_span_groups",
    "shutdown",
    "span_carrier",
    "start_efficiency_span",
    "start_span",
    "task_scope",
    "to_thread",
    "trace_fn",
    "trace_session",
    "trace_session_event",
    "trace_session_phase",
    "umbrella_span",
    "umbrella_trace_fn",
    "wait_until",
]
