"""The public surface and import-time guarantees."""

from __future__ import annotations

import subprocess
import sys

import asynctrace

EXPECTED = {
    "dispatch_scope",
    "wait_until",
    "span_carrier",
    "end_span",
    "start_span",
    "atrace_session_phase",
    "current_session_id",
    "current_task_id",
    "increment_counter",
    "register_phase",
    "registered_phases",
    "session_context",
    "session_scope",
    "task_scope",
    "trace_session",
    "trace_session_event",
    "trace_session_phase",
    "SessionTracerConfig",
    "Telemetry",
    "TelemetryConfig",
    "configure",
    "current_telemetry",
    "flush",
    "init_driver",
    "init_worker",
    "shutdown",
    "ContextExecutor",
    "ContextThread",
    "accepts_trace_context",
    "bind_context",
    "context_executor",
    "current_trace_carrier",
    "detached_span",
    "dispatch_with_trace_context",
    "extract_env",
    "inject_env",
    "remote_trace_context",
    "to_thread",
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
}


def test_all_is_pinned() -> None:
    """__all__ changes only on purpose, and every name in it exists."""
    assert set(asynctrace.__all__) == EXPECTED
    for name in asynctrace.__all__:
        assert hasattr(asynctrace, name), name


def test_every_public_name_has_a_docstring() -> None:
    """Every public callable and class is documented."""
    for name in asynctrace.__all__:
        obj = getattr(asynctrace, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), name


def test_import_pulls_in_no_sdk_or_web_stack() -> None:
    """`import asynctrace` imports no OTel SDK, protobuf, aiohttp, fastapi or starlette."""
    code = (
        "import sys, asynctrace, asynctrace_contrib\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "{'aiohttp', 'fastapi', 'starlette', 'google'} or m.startswith('opentelemetry.sdk')]\n"
        "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == ""


def test_missing_extra_names_the_pip_line() -> None:
    """MissingExtraError is an ImportError that says what to pip install."""
    err = asynctrace.MissingExtraError("fastapi", "fastapi")
    assert isinstance(err, ImportError)
    assert "pip install 'asynctrace[fastapi]'" in str(err)
