"""An exception's text of megabytes (an HTML error page as a message) is recorded bounded:
its status description, message and stack trace, on both providers, with nothing secret
across the cut."""

from __future__ import annotations

from typing import Any

import pytest

import asynctrace as at
from asynctrace._exception_text import EXCEPTION_TEXT_CHARS, redact_exception_text
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]
NOTE = 64  # room for the "...<truncated N chars>" note


def huge_message() -> str:
    """About 3 MB, with URL credentials across the first cut and near the end."""
    cut = EXCEPTION_TEXT_CHARS
    start = "x" * (cut - 20) + " http://alice:hunter2@host/page?token=abc "
    middle = "<p>word</p>" * 270_000
    end = " GET http://bob:swordfish@host/?api_key=zzz the innermost words"
    return start + middle + end


def innermost() -> None:
    raise ValueError(huge_message())


def recorded(span: Any) -> dict[str, str]:
    (event,) = [e for e in span.events if e.name == "exception"]
    return {
        "description": span.status.description or "",
        "message": str(event.attributes["exception.message"]),
        "stacktrace": str(event.attributes["exception.stacktrace"]),
    }


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("how", ["managed_span", "otel_span"])
def test_a_huge_exception_text_is_recorded_bounded_without_its_secrets(
    provider: str, how: str
) -> None:
    with capture_spans("all", provider=provider) as captured:
        with pytest.raises(ValueError):
            if how == "managed_span":
                with at.managed_span("generation", "g"):
                    innermost()
            else:  # a plain OpenTelemetry span: the SDK's own exit path on both providers
                with at.get_tracer().start_as_current_span("g"):
                    innermost()
    (span,) = [s for s in captured.spans if s.name == "g"]
    texts = recorded(span)
    for name, text in texts.items():
        assert len(text) <= EXCEPTION_TEXT_CHARS + NOTE, (name, len(text))
        for secret in ("hunter2", "swordfish", "token=abc", "api_key=zzz"):
            assert secret not in text, (name, secret)
    assert texts["description"].startswith("ValueError: xxx")
    assert texts["message"].endswith(" chars>")
    stack = texts["stacktrace"]
    assert stack.startswith("Traceback (most recent call last)")
    assert " chars left out>..." in stack
    assert stack.rstrip().endswith("the innermost words")  # the message's end: kept


def test_short_texts_are_redacted_whole_and_long_ones_cut_once() -> None:
    assert redact_exception_text("GET http://u:p@h/?token=abc") == "GET http://h/?token=REDACTED"
    text = "a" * (EXCEPTION_TEXT_CHARS + 10)
    assert redact_exception_text(text) == "a" * EXCEPTION_TEXT_CHARS + "...<truncated 10 chars>"
    cut = redact_exception_text(text, tail=True)
    half = EXCEPTION_TEXT_CHARS // 2
    assert cut == "a" * half + "...<10 chars left out>..." + "a" * half
