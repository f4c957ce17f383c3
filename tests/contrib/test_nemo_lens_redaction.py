"""asynctrace_contrib.nemo_lens: listed keys redacted; LOCAL_RANK read safely."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _lens_state import forget_setup
from asynctrace_contrib import nemo_lens
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import asynctrace as at
from asynctrace.testing import capture_spans

SECRETS: dict[str, Any] = {
    "prompt": ["user prompt: my password is hunter2"],  # a batch of prompts
    "password": ("hunter2",),
    "secret": 12345,
    "key": ["AKIAXXXXSECRET"],
    "token": 9.5,
    "text": True,
    "input_text": {"role": "user", "content": "hi"},  # not recordable, still redacted
}
SUFFIXED: dict[str, Any] = {
    "api_key": "sk-live-1",
    "access_token": ["tok-a", "tok-b"],
    "OPENAI_API_KEY": "sk-2",
    "apiKey": "sk-3",
    "HTTPToken": "sk-4",
    "gen_ai.prompt": ("p1", "p2"),
    "Password": 1234,
    "x-secret": "s",
}
KEPT: dict[str, Any] = {
    "max_tokens": 512,
    "prompt_len": [12, 30],
    "context": "ok",
    "tokenizer": "llama",
    "keys": 3,
    "lr": 1e-5,
}
EXPECTED = {
    **dict.fromkeys(SECRETS, "[REDACTED]"),
    **dict.fromkeys(SUFFIXED, "[REDACTED]"),
    "max_tokens": 512,
    "prompt_len": (12, 30),
    "context": "ok",
    "tokenizer": "llama",
    "keys": 3,
    "lr": 1e-5,
}


def recorded(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if not k.startswith(("rl.", "asynctrace."))}


def test_managed_span_redacts_listed_keys_of_any_type() -> None:
    """Lists, tuples, numbers, booleans and dicts under a listed key become the marker."""
    with capture_spans("all") as captured:
        with nemo_lens.managed_span("optimizer", "opt", **SECRETS, **SUFFIXED, **KEPT):
            pass
    (span,) = captured.spans
    assert recorded(dict(span.attributes or {})) == EXPECTED


def test_span_cm_and_safe_set_span_attributes_redact_the_same_way() -> None:
    """span_cm's keywords and safe_set_span_attributes on any span follow the same rule."""
    with capture_spans("all") as captured:
        with nemo_lens.span_cm("setup", **SECRETS, **SUFFIXED, **KEPT):
            pass
        with nemo_lens.span_cm("later") as current:
            nemo_lens.safe_set_span_attributes(current, {**SECRETS, **SUFFIXED, **KEPT})
    for name in ("setup", "later"):
        (span,) = captured.by_name(name)
        assert recorded(dict(span.attributes or {})) == EXPECTED
        assert "hunter2" not in span.to_json()


def test_caller_redact_keys_set_or_list_and_case_insensitive() -> None:
    """A caller's redact_keys (frozenset, set or list) are matched by the same rule."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for keys in (frozenset({"Session_ID"}), {"session-id"}, ["session_id"]):
        with tracer.start_as_current_span("s") as current:
            nemo_lens.safe_set_span_attributes(
                current,
                {"sessionId": [1, 2], "user.session_id": 7, "prompt": "kept", "n": 1},
                keys,  # type: ignore[arg-type]
            )
    spans = exporter.get_finished_spans()
    assert len(spans) == 3
    for span in spans:
        assert dict(span.attributes or {}) == {
            "sessionId": "[REDACTED]",
            "user.session_id": "[REDACTED]",
            "prompt": "kept",  # not in the caller's keys
            "n": 1,
        }
    assert nemo_lens.redact_value("OPENAI_API_KEY", "sk-1") == "[REDACTED]"
    assert nemo_lens.redact_value("max_tokens", "8") == "8"


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process that never called setup_telemetry."""
    forget_setup(monkeypatch)
    yield
    at.shutdown()


def per_node(monkeypatch: pytest.MonkeyPatch, local_rank: str | None) -> bool:
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    config = nemo_lens.NemoLensConfig(
        enabled=True, export_strategy="first_rank_per_node", span_groups="job"
    )
    handle = nemo_lens.setup_telemetry(
        config, rank=3, world_size=8, span_exporter=InMemorySpanExporter(), _allow_reinit=True
    )
    try:
        return handle.is_exporting
    finally:
        handle.shutdown()


@pytest.mark.usefixtures("fresh_process")
@pytest.mark.parametrize(
    ("local_rank", "exporting"),
    [
        (None, True),
        ("", True),
        ("  ", True),
        ("-1", True),
        (" 0 ", True),
        ("0", True),
        ("1", False),
        (" 2\n", False),
    ],
)
def test_first_rank_per_node_reads_local_rank_as_asynctrace_does(
    monkeypatch: pytest.MonkeyPatch, local_rank: str | None, exporting: bool
) -> None:
    """Unset, empty and -1 are not known (first of its node); spaces around a number are fine."""
    assert per_node(monkeypatch, local_rank) is exporting


@pytest.mark.usefixtures("fresh_process")
@pytest.mark.parametrize("local_rank", ["abc", "1.0", "-2", "0x1"])
def test_first_rank_per_node_bad_local_rank_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, local_rank: str
) -> None:
    """A malformed LOCAL_RANK fails fast, naming the variable, the value and what is accepted."""
    before = at.current_telemetry()
    with pytest.raises(at.ConfigurationError, match=r"LOCAL_RANK: '.*' is not accepted") as info:
        per_node(monkeypatch, local_rank)
    assert repr(local_rank) in str(info.value)
    assert "an integer >= 0" in str(info.value)
    assert at.current_telemetry() is before  # nothing changed
