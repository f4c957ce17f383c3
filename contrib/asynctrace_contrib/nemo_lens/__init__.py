"""nemo-lens's names on asynctrace: porting a lens script is an import change.

``from nemo.lens import ...`` (and ``from nemo.lens.contrib.ray import ...``)
becomes ``from asynctrace_contrib.nemo_lens import ...``; the calls stay as
they are. The spans are asynctrace's: gated by the same group switch,
bucketed by the group's goodput bucket, stamped with the scopes, exported by
:func:`asynctrace.configure`'s pipeline, and read by ``asynctrace goodput``
and ``report``.

Importing this module registers lens's base groups that asynctrace does not
already have (``forward_backward``, ``optimizer``, ``load_checkpoint``) under
the namespace ``nemo_lens``, so the spans a lens script asks for under them
are recorded instead of vanishing. What differs from lens, and why, is on the
"Coming from nemo-lens" page of the documentation; in short:

* a disabled ``managed_span`` yields a shared non-recording span, not
  ``None`` (setting attributes on it is safe);
* ``trace_fn`` on an ``async def`` times the awaited body, where lens's ends
  its span when the coroutine object is created;
* a value under a listed key (:data:`DEFAULT_REDACT_KEYS`, matched
  case-insensitively by the key's trailing words: ``OPENAI_API_KEY``) is
  recorded as ``"[REDACTED]"`` whatever its type, a list or a number too;
* the Ray keyword ``_otel_carrier`` is understood by
  :func:`asynctrace.accepts_trace_context`, so actors ported and actors still
  on lens interoperate during a rollout.

Example:
    >>> from asynctrace_contrib.nemo_lens import SpanGroup, managed_span
    >>> with managed_span(SpanGroup.OPTIMIZER, "rl.policy.optimizer_step", lr=1e-5):
    ...     pass
"""

from __future__ import annotations

from ._config import NemoLensConfig
from ._context import extract_context, get_meter, get_tracer, inject_context
from ._groups import NAMESPACE as NAMESPACE
from ._groups import SpanGroup, is_span_group_enabled
from ._ray import (
    create_linked_span,
    extract_ray_context,
    inject_ray_context,
    ray_dispatch_with_context,
    traced_remote_call,
)
from ._redaction import DEFAULT_REDACT_KEYS, redact_value, safe_set_span_attributes
from ._setup import TelemetryHandle, set_enabled_span_groups, setup_telemetry
from ._spans import managed_span, span_cm, trace_fn
from ._strategies import BUILTIN_STRATEGIES as BUILTIN_STRATEGIES
from ._strategies import (
    ExportStrategy,
    register_export_strategy,
    registered_strategies,
    unregister_export_strategy,
)

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "ExportStrategy",
    "NemoLensConfig",
    "SpanGroup",
    "TelemetryHandle",
    "create_linked_span",
    "extract_context",
    "extract_ray_context",
    "get_meter",
    "get_tracer",
    "inject_context",
    "inject_ray_context",
    "is_span_group_enabled",
    "managed_span",
    "ray_dispatch_with_context",
    "redact_value",
    "register_export_strategy",
    "registered_strategies",
    "safe_set_span_attributes",
    "set_enabled_span_groups",
    "setup_telemetry",
    "span_cm",
    "trace_fn",
    "traced_remote_call",
    "unregister_export_strategy",
]
