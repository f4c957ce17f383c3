"""Edges of URL redaction: links given as an iterator, an on_start processor's own URL
attributes, a managed span read before it is entered, every tracer of the SDK provider, a
URL cut by the length limit."""

from __future__ import annotations

from typing import Any

from _on_start import span_after_on_start
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import Link, SpanContext

import asynctrace

URL = "http://user:hunter2@h.test/x?token=tok123"


def _finished(running: asynctrace.Telemetry) -> dict[str, ReadableSpan]:
    """*running*'s in-memory spans so far, by name."""
    assert running.flush()
    memory = running.memory_exporter
    assert memory is not None
    return {span.name: span for span in memory.get_finished_spans()}


def test_links_given_as_an_iterator_are_kept_on_the_sdk_provider() -> None:
    """A generator of links is read once, not used up by the redaction's scan."""
    running = asynctrace.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["memory"], "provider": "sdk"}
    )
    try:
        links = [Link(SpanContext(1, 2, False), {"k": 1}), Link(SpanContext(1, 3, False))]
        span = asynctrace.get_tracer().start_span("linked", links=(link for link in links))
        span.end()
        with_url = [Link(SpanContext(1, 4, False), {"url.full": URL})]
        asynctrace.get_tracer().start_span("url", links=iter(with_url)).end()
        spans = _finished(running)
    finally:
        running.shutdown(timeout_s=5.0)
    assert [link.context.span_id for link in spans["linked"].links] == [2, 3]
    (link,) = spans["url"].links
    assert link.attributes is not None
    assert link.attributes["url.full"].startswith("http://h.test/x")
    assert "hunter2" not in repr(dict(link.attributes))


def test_an_on_start_processors_url_attributes_are_redacted_on_the_fast_provider() -> None:
    """What a processor sets in on_start (attribute, attributes, event, link) is redacted."""

    def tags(span: Any) -> None:
        span.set_attribute("url.full", URL)
        span.set_attributes({"http.url": URL, "n": 1})
        span.add_event("tagged", {"url.full": URL})
        span.add_link(SpanContext(1, 2, False), {"url.full": URL})
        span.record_exception(ValueError("no"), {"url.full": URL})

    span = span_after_on_start(tags)
    assert span.attributes is not None
    recorded = [
        span.attributes["url.full"],
        span.attributes["http.url"],
        span.events[0].attributes["url.full"],  # type: ignore[index]
        span.events[1].attributes["url.full"],  # type: ignore[index]
        span.links[0].attributes["url.full"],  # type: ignore[index]
    ]
    for value in recorded:
        assert isinstance(value, str)
        assert value.startswith("http://h.test/x"), value
        assert "hunter2" not in value
        assert "tok123" not in value
    assert span.attributes["n"] == 1


def test_a_managed_span_not_entered_reads_no_events_or_links_after_a_long_url() -> None:
    """Once a long URL was seen in the process, a managed span read before its entry still
    gives no events and no links (it raised AttributeError)."""
    running = asynctrace.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["memory"], "provider": "fast"}
    )
    try:
        long_url = "http://h.test/?q=" + "x" * 5000
        asynctrace.get_tracer().start_span("long", attributes={"url.full": long_url}).end()
        span = asynctrace.managed_span("rollout", "later")
        assert span.links == ()
        assert span.events == ()
        assert span.attributes is None
        with span:
            span.add_event("inside", {"url.full": long_url})
            assert [event.name for event in span.events] == ["inside"]
    finally:
        running.shutdown(timeout_s=5.0)


def test_every_tracer_of_the_sdk_provider_records_urls_and_exceptions_redacted() -> None:
    """On asynctrace's SDK provider, a tracer taken from the provider object itself and a
    span processor's on_start record no credentials or tokens: given at start, set later,
    on an event, in an escaping exception."""

    class Tags(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            span.set_attribute("http.url", URL)

    running = asynctrace.configure(
        {"enabled": True, "span_groups": "all", "exporters": ["memory"], "provider": "sdk"}
    )
    try:
        provider: Any = running.provider
        provider.add_span_processor(Tags())
        tracer = provider.get_tracer("straight")
        span = tracer.start_span("given", attributes={"url.full": URL})
        span.set_attribute("url.query", "token=tok123")
        span.add_event("sent", {"url.full": URL})
        span.end()
        try:
            with tracer.start_as_current_span("raised"):
                raise ValueError(f"fetch {URL} failed")
        except ValueError:
            pass
        spans = _finished(running)
    finally:
        running.shutdown(timeout_s=5.0)
    given, raised = spans["given"], spans["raised"]
    assert given.attributes is not None
    assert given.attributes["url.full"].startswith("http://h.test/x")
    assert given.attributes["http.url"].startswith("http://h.test/x")
    assert given.attributes["url.query"].startswith("token=")
    (exception,) = raised.events
    assert exception.attributes is not None
    assert "fetch" in str(exception.attributes["exception.message"])
    text = repr(
        [
            (dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events], s.status)
            for s in spans.values()
        ]
    ) + str(raised.status.description)
    assert "hunter2" not in text
    assert "tok123" not in text


def test_a_url_cut_inside_its_userinfo_by_the_length_limit_keeps_no_password() -> None:
    """SDK provider, max_attribute_length 24: a third-party tracer's starting URL, cut by
    the SDK inside its password before on_start, keeps no part of it; asynctrace's own
    span, redacted before the cut, stays within the limit."""
    running = asynctrace.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "provider": "sdk",
            "span_limits": {"max_attribute_length": 24},
        }
    )
    try:
        provider: Any = running.provider
        secret = "https://alice:hunter2secretvalue@h.test/x?token=tok123"
        provider.get_tracer("straight").start_span("third", attributes={"url.full": secret}).end()
        token = "https://ghp_16C7e42F292c6912E7710c838347@github.com/org/repo.git"
        provider.get_tracer("straight").start_span("token", attributes={"url.full": token}).end()
        query = "https://h.test/x?token=tok123&n=1"
        provider.get_tracer("straight").start_span("query", attributes={"url.full": query}).end()
        asynctrace.get_tracer().start_span("own", attributes={"url.full": query}).end()
        spans = {name: dict(s.attributes or {}) for name, s in _finished(running).items()}
    finally:
        running.shutdown(timeout_s=5.0)
    assert spans["third"]["url.full"] == "https://"  # cut inside its password
    assert spans["token"]["url.full"] == "https://"  # cut inside a token as the username
    for name in ("query", "own"):
        value = spans[name]["url.full"]
        assert len(value) <= 24, (name, value)
        assert "tok123" not in value
        assert value.startswith("https://h.test/x?token="), (name, value)
