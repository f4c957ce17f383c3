"""The two-span checkpoint recipe (asynctrace_contrib.demo.checkpoint)."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import StatusCode

import asynctrace as at
from asynctrace import _errors
from asynctrace.testing import CapturedSpans

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from checkpoint_two_spans import AsyncCheckpointer


def attrs(span: object) -> dict[str, object]:
    """A span's attributes as a dict."""
    return dict(span.attributes or {})  # type: ignore[attr-defined]


def test_finalize_outlives_parent_keeps_iteration_unbucketed(spans: CapturedSpans) -> None:
    """Finalize is a child of staging, ends after it and after the next step starts."""
    release = threading.Event()
    ckpt = AsyncCheckpointer(finalize=lambda step: release.wait(5))
    with at.umbrella_span("job", "job"):
        with at.iteration_scope(7), at.umbrella_span("step", "step7"):
            ckpt.save(7, stage=lambda step: None)
        with at.iteration_scope(8), at.umbrella_span("step", "step8"):
            pass
        release.set()
        ckpt.finalize_pending()
    staging = spans.by_name("rl.checkpointing")[0]
    finalize = spans.by_name("rl.checkpoint.finalize")[0]
    step8 = spans.by_name("step8")[0]
    assert attrs(staging)["rl.bucket"] == "overhead"
    assert attrs(staging)["rl.iteration"] == 7
    assert "rl.bucket" not in attrs(finalize)
    assert attrs(finalize)["rl.iteration"] == 7
    assert finalize.parent is not None
    assert finalize.parent.span_id == staging.context.span_id
    assert finalize.end_time > staging.end_time  # type: ignore[operator]
    assert finalize.end_time > step8.start_time  # type: ignore[operator]
    assert finalize.status.status_code is not StatusCode.ERROR


def test_failed_finalization_is_error_and_reraised(spans: CapturedSpans) -> None:
    """A failing finalization ends the span with ERROR and is re-raised on the next call."""

    def finalize(step: int) -> None:
        raise OSError("disk full")

    ckpt = AsyncCheckpointer(finalize=finalize)
    with at.iteration_scope(3):
        ckpt.save(3, stage=lambda step: None)
    with pytest.raises(OSError, match="disk full"):
        ckpt.finalize_pending()
    ckpt.finalize_pending()  # raised once only
    finalize_span = spans.by_name("rl.checkpoint.finalize")[0]
    assert finalize_span.status.status_code is StatusCode.ERROR


class _FailOnFinalize:
    """A span processor that refuses to start the finalize span."""

    def on_start(self, span: object, parent_context: object = None) -> None:
        if getattr(span, "name", "") == "rl.checkpoint.finalize":
            raise RuntimeError("cannot open span")

    def on_end(self, span: object) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_failure_to_open_finalize_span_is_logged_and_work_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If the finalize span cannot open, a warning is logged and finalization still runs."""
    provider = TracerProvider()
    provider.add_span_processor(_FailOnFinalize())  # type: ignore[arg-type]
    at.enable_telemetry(provider, span_groups="all")
    done: list[int] = []
    previous = _errors.set_strict(False)
    try:
        with caplog.at_level(logging.WARNING, logger="asynctrace"):
            ckpt = AsyncCheckpointer(finalize=done.append)
            ckpt.save(5, stage=lambda step: None)
            ckpt.finalize_pending()
    finally:
        _errors.set_strict(previous)
    assert done == [5]
    assert any("rl.checkpoint.finalize" in r.getMessage() for r in caplog.records)
