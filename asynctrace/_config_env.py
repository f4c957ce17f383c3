"""The environment variables a configuration reads: asynctrace's own and OpenTelemetry's.

``ASYNCTRACE_*`` variables (:data:`ENV_VARS`) set fields; the standard
``OTEL_TRACES_EXPORTER``, ``OTEL_BSP_*`` and ``OTEL_SDK_DISABLED`` are read
as fallbacks. An ``ASYNCTRACE_*`` name asynctrace does not read is warned
about once: it is most likely a typo.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any, Final

from ._config_checks import check_bool, check_int
from ._config_fields import EXPORTER_NAMES, coerce_field, exporter_list
from ._errors import ConfigurationError
from ._session_config import SessionTracerConfig, session_config

__all__ = [
    "ENV_VARS",
    "KNOWN_VARS",
    "OTEL_FALLBACKS",
    "env_value",
    "otel_exporters",
    "otel_sdk_disabled",
    "parse_env",
    "session_from_env",
    "warn_unknown_vars",
]

ENV_VARS: dict[str, str] = {
    "ASYNCTRACE_ENABLED": "enabled",
    "ASYNCTRACE_SPAN_GROUPS": "span_groups",
    "ASYNCTRACE_EXPORTERS": "exporters",
    "ASYNCTRACE_OUTPUT_DIR": "output_dir",
    "ASYNCTRACE_SERVICE_NAME": "service_name",
    "ASYNCTRACE_RUN_ID": "run_id",
    "ASYNCTRACE_RESOURCE_ATTRIBUTES": "resource_attributes",
    "ASYNCTRACE_HANDLE_SIGTERM": "handle_sigterm",
    "ASYNCTRACE_SESSION_TRACER_ENABLED": "session_tracer.enabled",
    "ASYNCTRACE_SESSION_TRACER_FLUSH_THRESHOLD": "session_tracer.flush_threshold",
    "ASYNCTRACE_SESSION_TRACER_MAX_PENDING": "session_tracer.max_pending",
    "ASYNCTRACE_MAX_QUEUE_SIZE": "max_queue_size",
    "ASYNCTRACE_MAX_EXPORT_BATCH_SIZE": "max_export_batch_size",
    "ASYNCTRACE_SCHEDULE_DELAY_MILLIS": "schedule_delay_millis",
    "ASYNCTRACE_SHUTDOWN_TIMEOUT_S": "shutdown_timeout_s",
    "ASYNCTRACE_PROVIDER": "provider",
    "ASYNCTRACE_SAMPLING_RATIO": "sampling_ratio",
    "ASYNCTRACE_PROPAGATE_SCOPES": "propagate_scopes",
    "ASYNCTRACE_LOOP_STALL_THRESHOLD_MS": "loop_stall_threshold_ms",
    "ASYNCTRACE_OTLP_PROTOCOL": "otlp_protocol",
    "ASYNCTRACE_EXPORT_RANKS": "export_ranks",
    "ASYNCTRACE_SAMPLE_RATE": "sample_rate",
    "ASYNCTRACE_RETRY_BUFFER_SPANS": "retry_buffer_spans",
    "ASYNCTRACE_RETRY_BUFFER_BYTES": "retry_buffer_bytes",
    "ASYNCTRACE_GOODPUT": "goodput",
}
"""Environment variable → field (``session_tracer.*`` are nested fields)."""
_USER_VARS: Final = (
    *ENV_VARS,
    "ASYNCTRACE_STRICT",  # hot-path failures raise (asynctrace._errors)
    "ASYNCTRACE_DEBUG",  # the CLI prints tracebacks
)
"""The variables a typo may have meant (the test sessions' own are never suggested)."""
KNOWN_VARS: Final = frozenset(
    {
        *_USER_VARS,
        # asynctrace's own test and build sessions
        "ASYNCTRACE_FUZZ",
        "ASYNCTRACE_FUZZ_EXAMPLES",
        "ASYNCTRACE_FUZZ_REPORT",
        "ASYNCTRACE_FUZZ_SECONDS",
        "ASYNCTRACE_SOAK_SCALE",
        "ASYNCTRACE_TORCH_REQUIREMENT",
    }
)
"""Every ``ASYNCTRACE_*`` variable asynctrace reads; another one is a typo, warned about."""
_warned_vars: set[str] = set()


def warn_unknown_vars(env: Mapping[str, Any]) -> None:
    """Warn once per variable about an ``ASYNCTRACE_*`` name asynctrace does not read.

    A misspelt ``ASYNCTRACE_ENABLED`` would otherwise leave telemetry off without a word.
    The warning is logged and issued as a ``UserWarning``; under
    ``-W error`` the raised warning is swallowed, so a typo never fails a run.
    """
    import difflib
    import logging

    for var in list(env):
        if not isinstance(var, str) or not var.upper().startswith("ASYNCTRACE_"):
            continue
        if var in KNOWN_VARS or var in _warned_vars:
            continue
        _warned_vars.add(var)
        # In upper case: a name in the wrong case is the name it spells.
        close = difflib.get_close_matches(var.upper(), _USER_VARS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        if close and close[0] == var.upper():
            hint += " (variable names are case-sensitive)"
        message = f"asynctrace: ignoring unknown environment variable {var}{hint}"
        logging.getLogger("asynctrace").warning(message)
        try:
            warnings.warn(message, UserWarning, stacklevel=4)
        except UserWarning:
            pass  # warnings are errors here: the log line says it


OTEL_FALLBACKS = {
    "max_queue_size": "OTEL_BSP_MAX_QUEUE_SIZE",
    "max_export_batch_size": "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "schedule_delay_millis": "OTEL_BSP_SCHEDULE_DELAY",
}


def otel_exporters(env: Mapping[str, str]) -> tuple[list[str] | None, list[str]]:
    """The exporters the standard ``OTEL_TRACES_EXPORTER`` names (or ``None``), and the rest.

    Lenient, since the variable may be set for other tools: names asynctrace
    does not have (``jaeger``, ``zipkin``, ...) are returned to be ignored
    (with a warning when telemetry is on); ``none`` alone means no exporter;
    a value with no usable name leaves the exporters as they are.
    """
    raw = env_value(env, "OTEL_TRACES_EXPORTER")
    if raw is None:
        return None, []
    names = [part.strip().lower() for part in raw.split(",") if part.strip()]
    known = [name for name in dict.fromkeys(names) if name in EXPORTER_NAMES]
    unknown = [name for name in names if name not in EXPORTER_NAMES and name != "none"]
    if known:
        return known, unknown
    return ([] if "none" in names else None), unknown


def otel_sdk_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard ``OTEL_SDK_DISABLED`` variable is ``true``."""
    env = os.environ if environ is None else environ
    raw = env_value(env, "OTEL_SDK_DISABLED")
    return raw is not None and raw.lower() == "true"


def env_value(env: Mapping[str, str], var: str) -> str | None:
    """The stripped value of the variable *var*, or ``None`` when it is unset or blank."""
    raw = env.get(var)
    if raw is not None and not isinstance(raw, str):
        raise ConfigurationError(
            f"{var}: {raw!r} is not accepted; accepted: a string (as environment variables are)"
        )
    if raw is None or not raw.strip():
        return None
    return raw.strip()


def session_from_env(
    env: Mapping[str, str], current: SessionTracerConfig | Mapping[str, Any]
) -> SessionTracerConfig | None:
    """The session tracer block with its own variables applied (enabled, flush threshold,
    max pending), or ``None`` when none of them is set."""
    enabled = env_value(env, "ASYNCTRACE_SESSION_TRACER_ENABLED")
    threshold = env_value(env, "ASYNCTRACE_SESSION_TRACER_FLUSH_THRESHOLD")
    max_pending = env_value(env, "ASYNCTRACE_SESSION_TRACER_MAX_PENDING")
    if enabled is None and threshold is None and max_pending is None:
        return None
    session = session_config(current, "session_tracer")
    if enabled is not None:
        session.enabled = check_bool("ASYNCTRACE_SESSION_TRACER_ENABLED", enabled)
    if threshold is not None:
        session.flush_threshold = check_int(
            "ASYNCTRACE_SESSION_TRACER_FLUSH_THRESHOLD", threshold, 1
        )
    if max_pending is not None:
        session.max_pending = check_int("ASYNCTRACE_SESSION_TRACER_MAX_PENDING", max_pending, 1)
    return session


def parse_env(var: str, key: str, raw: str) -> Any:
    """The raw value of the variable *var* as the field *key* takes it."""
    if key == "exporters":
        return [] if raw.lower() == "none" else exporter_list(var, raw)
    if key == "resource_attributes":
        return _parse_kv_list(var, raw)
    return coerce_field(var, key, raw)


def _parse_kv_list(var: str, raw: str) -> dict[str, str]:
    """``k=v,k2=v2`` (the ``OTEL_RESOURCE_ATTRIBUTES`` syntax, values URL-decoded)."""
    from urllib.parse import unquote

    out: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(
                f"{var}: malformed entry {item!r} in {raw!r}; accepted: comma-separated "
                "key=value pairs"
            )
        out[key.strip()] = unquote(value.strip())
    return out
