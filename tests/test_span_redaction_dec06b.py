"""What asynctrace's own spans record of secrets, on both providers.

An ``ERROR`` status description set while an exception is handled (by
OpenTelemetry's ``use_span``, or by the caller's ``set_status`` in an
``except`` block) loses that exception's remembered secrets too; the URL
attributes (``url.full``...) of every span asynctrace hands out are redacted
however they are set, as a third-party tracer's are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags

import asynctrace as at
from asynctrace.testing import CapturedSpans, capture_spans

PROVIDERS = ["fast", "sdk"]
HEADER = "sess-4711-abcdef"  # a header value an HTTP integration knew to be secret
PASSWORD = "hunter2pass"
TOKEN = "abc123secret"
URL = f"http://bob:{PASSWORD}@h/x?token={TOKEN}&page=2"


@pytest.fixture(params=PROVIDERS)
def captured(request: pytest.FixtureRequest) -> Iterator[CapturedSpans]:
    with capture_spans(provider=request.param) as spans:
        yield spans


def _dump(spans: CapturedSpans) -> dict[str, Any]:
    """Each span by name: its attributes, status description, events and links, as text."""
    out: dict[str, Any] = {}
    for span in spans.spans:
        out[span.name] = {
            "attrs": {key: str(value) for key, value in (span.attributes or {}).items()},
            "status": span.status.description,
            "events": [
                {key: str(value) for key, value in (event.attributes or {}).items()}
                for event in span.events
            ],
            "links": [
                {key: str(value) for key, value in (link.attributes or {}).items()}
                for link in span.links
            ],
        }
    return out


def _raise_remembered() -> ValueError:
    """An exception whose message quotes a secret the HTTP integrations pass to end_span."""
    inner = at.start_span("reward", "call")
    err = ValueError(f"upstream refused header value {HEADER}")
    at.end_span(inner, err, secrets=[HEADER])  # remembers HEADER for err
    return err


# -- 1. an ERROR description set while an exception is handled --------------------------


def test_use_span_error_status_loses_the_exceptions_remembered_secrets(
    captured: CapturedSpans,
) -> None:
    outer = at.start_span("reward", "outer")
    with pytest.raises(ValueError):
        with trace.use_span(outer, end_on_exit=True):
            raise _raise_remembered()
    dumped = _dump(captured)
    assert HEADER not in json.dumps(dumped)
    assert dumped["outer"]["status"] == "ValueError: upstream refused header value REDACTED"
    assert dumped["outer"]["events"][0]["exception.message"].endswith("value REDACTED")


@pytest.mark.parametrize("form", ["Status", "StatusCode"])
def test_set_status_in_an_except_block_loses_the_handled_exceptions_secrets(
    captured: CapturedSpans, form: str
) -> None:
    with at.managed_span("reward", "step") as span:
        try:
            raise _raise_remembered()
        except ValueError as exc:
            if form == "Status":
                span.set_status(Status(StatusCode.ERROR, f"failed: {exc}"))
            else:
                span.set_status(StatusCode.ERROR, f"failed: {exc}")
    assert _dump(captured)["step"]["status"] == "failed: upstream refused header value REDACTED"


def test_an_error_description_outside_an_except_block_is_redacted_by_pattern(
    captured: CapturedSpans,
) -> None:
    with at.managed_span("reward", "step") as span:
        span.set_status(Status(StatusCode.ERROR, f"GET {URL}"))
    status = _dump(captured)["step"]["status"]
    assert PASSWORD not in status
    assert TOKEN not in status
    assert status == "GET http://h/x?token=REDACTED&page=2"


# -- 4. URL attributes of asynctrace's own spans ------------------------------------------


def _own_attr() -> None:
    with at.managed_span("reward", "attr") as span:
        span.set_attribute("url.full", URL)


def _own_attr_again() -> None:  # the key set twice: the second write takes the other path
    with at.managed_span("reward", "attr_again") as span:
        span.set_attribute("url.full", "http://h/")
        span.set_attribute("url.full", URL)


def _own_attrs() -> None:
    with at.managed_span("reward", "attrs") as span:
        span.set_attributes({"http.url": URL, "n": 1})


def _own_start_attrs() -> None:
    with at.managed_span("reward", "start_attrs", attributes={"url.full": URL, "n": 1}):
        pass


def _umbrella_start_attrs() -> None:
    with at.umbrella_span("step", "umbrella", attributes={"url.original": URL}):
        pass


def _event() -> None:
    with at.managed_span("reward", "event") as span:
        span.add_event("retry", {"url.full": URL})


def _instant_alone() -> None:
    at.instant("reward", "instant_alone", attributes={"url.full": URL})


def _instant_on_span() -> None:
    with at.managed_span("reward", "instant_on_span"):
        at.instant("reward", "ping", attributes={"url.full": URL})


def _start_span() -> None:
    span = at.start_span("reward", "start_span", attributes={"http.target": f"/x?token={TOKEN}"})
    at.end_span(span)


def _start_span_links() -> None:
    parent = SpanContext(1, 2, False, TraceFlags(1))
    span = at.start_span("reward", "start_span_links", links=[Link(parent, {"http.url": URL})])
    at.end_span(span)


def _tracer_span() -> None:
    parent = SpanContext(1, 2, False, TraceFlags(1))
    with at.get_tracer().start_as_current_span(
        "tracer_span", attributes={"url.full": URL}, links=[Link(parent, {"url.full": URL})]
    ) as span:
        span.set_attribute("http.url", URL)
        span.add_event("e", {"url.query": f"token={TOKEN}&n=1"})


def _record_exception_attrs() -> None:
    with at.managed_span("reward", "record_exception_attrs") as span:
        span.record_exception(ValueError("boom"), attributes={"url.full": URL})


def _url_list() -> None:
    with at.managed_span("reward", "url_list") as span:
        span.set_attribute("url.full", [URL, URL])


class _UrlObject:  # yarl.URL, httpx.URL: an object recorded as its text
    def __str__(self) -> str:
        return URL


def _url_object() -> None:
    with at.managed_span("reward", "url_object") as span:
        span.set_attribute("url.full", _UrlObject())  # type: ignore[arg-type]


SCENARIOS: list[Callable[[], None]] = [
    _own_attr,
    _own_attr_again,
    _own_attrs,
    _own_start_attrs,
    _umbrella_start_attrs,
    _event,
    _instant_alone,
    _instant_on_span,
    _start_span,
    _start_span_links,
    _tracer_span,
    _record_exception_attrs,
    _url_list,
    _url_object,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[f.__name__.strip("_") for f in SCENARIOS])
def test_own_spans_redact_their_url_attributes(
    captured: CapturedSpans, scenario: Callable[[], None]
) -> None:
    with at.iteration_scope(3):
        scenario()
    text = json.dumps(_dump(captured))
    assert PASSWORD not in text
    assert TOKEN not in text
    assert "REDACTED" in text  # the key stays, its secret value goes


def test_url_attributes_keep_their_shape(captured: CapturedSpans) -> None:
    """The URL without its userinfo, secret values replaced, other values and keys kept."""
    with at.iteration_scope(3):
        _own_start_attrs()
        _url_list()
    dumped = _dump(captured)
    attrs = dumped["start_attrs"]["attrs"]
    assert attrs["url.full"] == "http://h/x?token=REDACTED&page=2"
    assert attrs["n"] == "1"
    assert attrs["rl.iteration"] == "3"
    assert dumped["url_list"]["attrs"]["url.full"] == str(
        ("http://h/x?token=REDACTED&page=2",) * 2
    )


def test_other_attributes_are_recorded_as_given(captured: CapturedSpans) -> None:
    """Only the URL keys are redacted: an attribute of another name is the caller's choice."""
    with at.managed_span("reward", "other") as span:
        span.set_attribute("app.note", URL)
    assert _dump(captured)["other"]["attrs"]["app.note"] == URL
