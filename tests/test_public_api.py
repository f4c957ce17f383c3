"""The public surface and import-time guarantees."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import asynctrace
import asynctrace.export
import asynctrace.rollup
import asynctrace.testing

REFERENCE = Path(__file__).parents[1] / "docs" / "reference.md"

EXPECTED = {
    "GoodputStats",
    "StepGoodput",
    "on_step_goodput",
    "remove_step_goodput",
    "FastTracerProvider",
    "Sampling",
    "SpanLimits",
    "dispatch_scope",
    "wait_until",
    "span_carrier",
    "end_span",
    "start_span",
    "record_error",
    "redact_text",
    "is_credential_header",
    "is_credential_key",
    "register_secret_words",
    "secret_words",
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
    "carrier_stats",
    "context_executor",
    "current_trace_carrier",
    "detached_span",
    "dispatch_with_trace_context",
    "extract_env",
    "inject_env",
    "merge_baggage",
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
    "is_telemetry_enabled",
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


def test_reference_lists_every_public_name() -> None:
    """docs/reference.md has a ### heading for each name in both public `__all__` lists."""
    headings = set(re.findall(r"^### `([^`]+)`", REFERENCE.read_text(encoding="utf-8"), re.M))
    public = {
        *asynctrace.__all__,
        *asynctrace.rollup.__all__,
        *asynctrace.testing.__all__,
        *asynctrace.export.__all__,
    }
    assert sorted(public - headings) == []


def test_every_public_name_has_a_docstring() -> None:
    """Every public callable and class is documented."""
    for module in (asynctrace, asynctrace.rollup, asynctrace.testing, asynctrace.export):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj):
                assert (obj.__doc__ or "").strip(), name


_PRIVATE_IMPORT = re.compile(
    r"^\s*(from\s+(\.\.+_|asynctrace(\.\w+)*\._)|import\s+asynctrace(\.\w+)*\._)", re.M
)
_PRIVATE_NAME = re.compile(r"\basynctrace(\.\w+)*\._[a-z]\w*")


def test_the_command_line_and_contrib_use_only_public_names() -> None:
    """``asynctrace.cli`` and ``asynctrace_contrib`` import no private module of asynctrace
    (their own private modules are theirs); what they need is public, for users too."""
    root = Path(__file__).parents[1]
    found = []
    for path in [
        *(root / "asynctrace" / "cli").glob("*.py"),
        *(root / "contrib" / "asynctrace_contrib").rglob("*.py"),
    ]:
        code = "\n".join(
            line.split("#", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()
        )
        for pattern in (_PRIVATE_IMPORT, _PRIVATE_NAME):
            found += [
                f"{path.relative_to(root)}: {m.group(0).strip()}" for m in pattern.finditer(code)
            ]
    assert found == []


def test_the_offline_rollup_keeps_the_live_grace() -> None:
    """``asynctrace.rollup.DEFAULT_GRACE_US`` is the live rollup's ``goodput.grace_s``."""
    live = asynctrace.rollup.GoodputSettings()
    assert live.grace_s * 1e6 == asynctrace.rollup.DEFAULT_GRACE_US


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


_WITHOUT_MSGSPEC = r"""
import json, sys, tempfile
from pathlib import Path

class Block:  # as if msgspec were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "msgspec":
            raise ImportError("No module named 'msgspec'")
        return None

sys.meta_path.insert(0, Block())
import asynctrace as at
from asynctrace._jsonl import HAVE_MSGSPEC, encode_lines

assert not HAVE_MSGSPEC
data, skipped = encode_lines(
    [{"a": 1.5, "s": "\u00e9"}, {"b": "\udcff"}, {"n": float("nan")}, {"o": object}],
    lambda item: {k: repr(v) if isinstance(v, float) else v for k, v in item.items()},
)
lines = [json.loads(line) for line in data.decode().splitlines()]
assert lines[:3] == [{"a": 1.5, "s": "\u00e9"}, {"b": "\udcff"}, {"n": "nan"}], lines
assert lines[3]["o"] == str(object) and skipped == [], (lines, skipped)
out = Path(tempfile.mkdtemp())
telemetry = at.configure(
    {"enabled": False, "output_dir": str(out), "session_tracer": {"enabled": True}}
)
with at.task_scope(7), at.session_scope():
    with at.trace_session_phase("generate"):
        pass
    at.trace_session_event("finalized", status="accepted")
telemetry.shutdown()
record = json.loads((out / "sessions-r0.jsonl").read_text().splitlines()[-1])
assert (record["task_id"], record["status"]) == (7, "accepted"), record
for exporters in (["memory"], ["console"], []):  # only chrome needs msgspec
    at.configure({"enabled": True, "exporters": exporters, "output_dir": str(out)}).shutdown()
try:
    at.configure({"enabled": True, "exporters": ["chrome"], "output_dir": str(out)})
except at.MissingExtraError as exc:
    print(exc)
print(sorted(m for m in sys.modules if m.startswith("msgspec")))
"""


def test_core_runs_without_msgspec() -> None:
    """Without msgspec, sessions are written by the standard library; chrome names its extra."""
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_MSGSPEC], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert out == [
        "msgspec is not installed; install it with: pip install 'asynctrace[sdk]'",
        "[]",
    ]


def test_missing_extra_names_the_pip_line() -> None:
    """MissingExtraError is an ImportError that says what to pip install."""
    err = asynctrace.MissingExtraError("fastapi", "fastapi")
    assert isinstance(err, ImportError)
    assert "pip install 'asynctrace[fastapi]'" in str(err)
