"""Third-party spans taken through OpenTelemetry's global provider record no secrets.

asynctrace owns the global provider (a fresh process each time: the global is
set once per process), and a tracer taken from it with
``trace.get_tracer(...)``, as an instrumentation takes one, records URL
attributes and exceptions redacted on either provider: the SDK provider's
tracer is handed out wrapped, as ``asynctrace.get_tracer()`` is.
"""

from __future__ import annotations

import json

import pytest
from _child_script import run_script

SECRETS = ("hunter2", "tok123")

CHILD = """
import json
from opentelemetry import trace
import asynctrace

EARLY = trace.get_tracer("third.early")  # taken before configure(), as at import
URL = "http://user:hunter2@h.test/x?token=tok123"
running = asynctrace.configure(
    {"enabled": True, "span_groups": "all", "exporters": ["memory"], "provider": PROVIDER}
)
tracer = trace.get_tracer("third.party")
span = tracer.start_span("started", attributes={"http.url": URL})
span.set_attribute("url.full", URL)
span.set_attributes({"url.query": "token=tok123"})
span.add_event("sent", {"url.full": URL})
span.end()
for name, source in (("block", tracer), ("early", EARLY)):
    try:
        with source.start_as_current_span(name):
            raise ValueError("fetch " + URL + " failed")
    except ValueError:
        pass
assert trace.get_tracer_provider().force_flush()
spans = running.memory_exporter.get_finished_spans()
print(json.dumps([  # hex: one word on stdout
    {
        "name": s.name,
        "scope": s.instrumentation_scope.name,
        "attributes": dict(s.attributes),
        "events": [[e.name, dict(e.attributes)] for e in s.events],
        "status": [s.status.status_code.name, s.status.description],
    }
    for s in spans
]).encode().hex())
running.shutdown(timeout_s=5.0)
"""


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_third_party_spans_through_the_global_record_no_secrets(provider: str) -> None:
    """URL credentials and tokens, given at start, set later, on events or in an
    escaping exception's message, leave no trace in a global tracer's spans."""
    (word,) = run_script(CHILD.replace("PROVIDER", repr(provider)), hang_s=60)[-1:]
    spans = {span["name"]: span for span in json.loads(bytes.fromhex(word))}
    assert set(spans) == {"started", "block", "early"}
    started = spans["started"]
    assert started["scope"] == "third.party"
    assert started["attributes"]["url.full"].startswith("http://h.test/x")
    assert started["attributes"]["http.url"].startswith("http://h.test/x")
    assert "url.query" in started["attributes"]
    assert [name for name, _ in started["events"]] == ["sent"]
    for name in ("block", "early"):
        (event,) = spans[name]["events"]
        assert event[0] == "exception"
        assert event[1]["exception.type"].endswith("ValueError")
        assert "fetch" in event[1]["exception.message"]
        assert spans[name]["status"][0] == "ERROR"
    text = json.dumps(spans)
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} recorded on the {provider} provider: {text}"
