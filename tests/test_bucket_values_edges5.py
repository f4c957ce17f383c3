"""A bucket given by its value ("idle") is that bucket, everywhere a bucket is taken.

Also: what a refused ``bucket=`` does and says, the profiler block's
unknown-key message, and the reference's record of the provider's and the
limits' parameters.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import asynctrace as at
from asynctrace import _errors
from asynctrace._profiler_settings import ProfilerSettings
from asynctrace.testing import CapturedSpans

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _buckets(spans: CapturedSpans) -> dict[str, object]:
    return {span.name: (span.attributes or {}).get("rl.bucket") for span in spans.spans}


def test_managed_span_takes_a_buckets_value(
    spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    """bucket="idle" records the span idle, as Bucket.IDLE does, with nothing logged."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    with at.managed_span("generation", "by_value", bucket="idle"):  # type: ignore[arg-type]
        pass
    with at.managed_span("generation", "by_member", bucket=at.Bucket.IDLE):
        pass
    with at.bucket_scope(at.Bucket.OVERHEAD):  # the argument wins over a scope
        with at.managed_span("generation", "in_scope", bucket="wasted"):  # type: ignore[arg-type]
            pass
    assert _buckets(spans) == {"by_value": "idle", "by_member": "idle", "in_scope": "wasted"}
    assert not caplog.records


@pytest.mark.anyio
async def test_managed_span_takes_a_buckets_value_in_async_with(spans: CapturedSpans) -> None:
    async with at.managed_span("generation", "async", bucket="overhead"):  # type: ignore[arg-type]
        pass
    assert _buckets(spans) == {"async": "overhead"}


def test_bucket_scope_efficiency_and_groups_take_a_buckets_value(spans: CapturedSpans) -> None:
    """bucket_scope, set_efficiency_bucket and register_span_groups: the value is the member."""
    with at.bucket_scope("idle") as scoped:  # type: ignore[arg-type]
        assert scoped is at.Bucket.IDLE
        assert at.current_bucket() is at.Bucket.IDLE
        with at.managed_span("generation", "scoped"):
            pass
    at.set_efficiency_bucket("idle/edges5_value", "wasted")  # type: ignore[arg-type]
    assert at.efficiency_bucket("idle/edges5_value") is at.Bucket.WASTED
    at.register_span_groups(
        "edges5",
        [at.SpanGroup("edges5_listed", "overhead")],  # type: ignore[arg-type]
    )
    at.register_span_groups("edges5", {"edges5_mapped": "idle"})  # type: ignore[arg-type]
    at.set_span_groups("all")
    with at.managed_span("edges5_listed", "listed"):
        pass
    with at.managed_span("edges5_mapped", "mapped"):
        pass
    assert _buckets(spans) == {"scoped": "idle", "listed": "overhead", "mapped": "idle"}
    groups = {name: group.bucket for name, group in at.registered_span_groups().items()}
    assert groups["edges5_listed"] is at.Bucket.OVERHEAD  # stored as the member
    # The same definition given by member is the same group: no conflict.
    at.register_span_groups("edges5_other", {"edges5_mapped": at.Bucket.IDLE})


@pytest.mark.parametrize("value", ["IDLE", "busy", 3, ["idle"]])
def test_configuration_refuses_what_bucket_refuses(value: object) -> None:
    """Anything Bucket() refuses stays a ConfigurationError naming the key and the values."""
    calls: dict[str, Callable[[], object]] = {
        "bucket_scope(bucket)": lambda: at.bucket_scope(value),  # type: ignore[arg-type]
        "set_efficiency_bucket(bucket)": lambda: at.set_efficiency_bucket(
            "idle/edges5_bad",
            value,  # type: ignore[arg-type]
        ),
        "group 'edges5_bad'": lambda: at.register_span_groups(
            "edges5_bad",
            {"edges5_bad": value},  # type: ignore[arg-type]
        ),
    }
    for key, call in calls.items():
        with pytest.raises(at.ConfigurationError) as raised:
            call()
        message = str(raised.value)
        for part in (key, repr(value), "Bucket.IDLE", "'idle'"):
            assert part in message, message


def test_a_refused_bucket_is_said_as_it_is_done(
    spans: CapturedSpans, caplog: pytest.LogCaptureFixture, lenient: None
) -> None:
    """A refused bucket=: the span is recorded with the bucket it has without the argument,
    and the one warning says that (not "untraced")."""
    caplog.set_level(logging.WARNING, logger="asynctrace")
    with at.managed_span("generation", "plain", bucket="IDLE"):  # type: ignore[arg-type]
        pass
    with at.bucket_scope(at.Bucket.WASTED):
        with at.managed_span("generation", "scoped", bucket=["x"]):  # type: ignore[arg-type]
            pass
    assert _buckets(spans) == {"plain": "productive", "scoped": "wasted"}
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1, messages  # once per group
    (message,) = messages
    assert "untraced" not in message, message
    for part in ("bucket='IDLE' is not a Bucket", "the span is recorded", "Bucket.IDLE"):
        assert part in message, message


def test_a_refused_bucket_raises_in_strict_mode(spans: CapturedSpans) -> None:
    assert _errors.is_strict()
    with pytest.raises(TypeError, match=r"bucket='busy' is not a Bucket"):
        with at.managed_span("generation", "x", bucket="busy"):  # type: ignore[arg-type]
            pass


def test_profiler_unknown_key_message_has_the_shared_format() -> None:
    """The profiler block says what every block says of an unknown key."""
    with pytest.raises(at.ConfigurationError) as raised:
        ProfilerSettings.parse("profiler", {"stepz": [1]})
    assert str(raised.value) == (
        "profiler: unknown key 'stepz'; accepted keys: steps, backend, output, "
        "record_shapes, with_stack, entries; did you mean 'steps'?"
    )


def _section(page: str, title: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(f"### `{title}`")
    end = text.find("\n### ", start + 1)
    return text[start:end]


def test_reference_names_every_provider_and_limits_parameter() -> None:
    """reference.md's FastTracerProvider and SpanLimits list what the code takes."""
    provider = _section("reference.md", "FastTracerProvider")
    for name in inspect.signature(at.FastTracerProvider).parameters:
        assert re.search(rf"\b{name}\b", provider), name
    assert "forgotten_spans" in provider
    assert hasattr(at.FastTracerProvider(), "forgotten_spans")
    limits = _section("reference.md", "SpanLimits")
    for field in dataclasses.fields(at.SpanLimits):
        assert re.search(rf"\b{field.name}\b", limits), field.name
    assert "other_attribute_length" in (at.SpanLimits.__doc__ or "")
