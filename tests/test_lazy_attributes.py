"""``start_span(lazy_attributes=...)``: attributes computed off the hot path.

On the fast provider the function runs once, on an export thread (or where the
span's attributes are first read whole); on the SDK provider at once. Either
way every exporter holds the same attributes (the conformance suite checks the
memory, chrome and OTLP content of such a span on both providers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

import asynctrace as at
from asynctrace._fast._deferred import DeferredSpan
from asynctrace.export import read_chrome_trace
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]


class Recorder:
    """A lazy_attributes function that notes each call's thread."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = dict(values)
        self.threads: list[str] = []

    def __call__(self) -> dict[str, Any]:
        self.threads.append(threading.current_thread().name)
        return self.values


@pytest.fixture
def chrome_and_memory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Telemetry on *provider* (the test's parameter) with the chrome and memory exporters."""
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome", "memory"],
            "output_dir": str(tmp_path),
            "provider": request.param,
        }
    )
    try:
        yield telemetry
    finally:
        telemetry.shutdown()


def _chrome_args(telemetry: Any, name: str) -> dict[str, Any]:
    events = read_chrome_trace(telemetry.trace_file).events
    (found,) = [e for e in events if e.get("ph") == "X" and e["name"] == name]
    args: dict[str, Any] = found["args"]
    return args


@pytest.mark.parametrize("chrome_and_memory", ["fast"], indirect=True)
def test_fast_provider_calls_it_once_on_an_export_thread(chrome_and_memory: Any) -> None:
    """Not at start, not at end: the chrome writer's thread calls it, once for every
    exporter; the chrome file and the memory exporter hold what it returned."""
    telemetry = chrome_and_memory
    lazy = Recorder({"url.full": "http://h:1/x?token=abc", "server.port": 1})
    span = at.start_span("per_prompt", "GET", attributes={"given": 1}, lazy_attributes=lazy)
    assert isinstance(span, DeferredSpan)
    at.end_span(span)
    assert lazy.threads == []  # the starting thread paid nothing for them
    assert telemetry.flush(5.0)
    (memory,) = telemetry.memory_exporter.get_finished_spans()
    assert dict(memory.attributes) == {
        "given": 1,
        "url.full": "http://h:1/x?token=REDACTED",
        "server.port": 1,
    }
    assert len(lazy.threads) == 1
    assert lazy.threads[0] != threading.main_thread().name
    assert lazy.threads[0].startswith("asynctrace-export")
    args = _chrome_args(telemetry, "GET")
    assert args["url.full"] == "http://h:1/x?token=REDACTED"
    assert args["server.port"] == 1


@pytest.mark.parametrize("chrome_and_memory", PROVIDERS, indirect=True)
def test_the_same_attributes_on_both_providers(chrome_and_memory: Any) -> None:
    """Given keys win over the function's, a key set by hand meanwhile wins too, and URL
    attributes are redacted; as a child's parent and as a carrier it is a plain span."""
    telemetry = chrome_and_memory
    lazy = Recorder({"url.full": "http://u:pw@h/?sig=s", "k": "lazy", "late": "lazy", "n": 2})
    span = at.start_span("per_prompt", "POST", attributes={"k": "given"}, lazy_attributes=lazy)
    span.set_attribute("late", "by hand")
    carrier = at.span_carrier(span)
    with trace.use_span(span):
        with at.managed_span("per_prompt", "child"):
            pass
    at.end_span(span)
    assert telemetry.flush(5.0)
    spans = {s.name: s for s in telemetry.memory_exporter.get_finished_spans()}
    parent = spans["POST"]
    assert dict(parent.attributes) == {
        "k": "given",
        "late": "by hand",
        "url.full": "http://h/?sig=REDACTED",
        "n": 2,
    }
    assert spans["child"].parent.span_id == parent.context.span_id
    assert carrier["traceparent"].split("-")[2] == f"{parent.context.span_id:016x}"
    assert _chrome_args(telemetry, "POST")["url.full"] == "http://h/?sig=REDACTED"
    assert len(lazy.threads) == 1


def test_reading_the_attributes_first_merges_them_there() -> None:
    """``span.attributes`` read before the export (a hook, say) holds them already."""
    lazy = Recorder({"server.address": "h"})
    with capture_spans("per_prompt", provider="fast") as spans:
        span: Any = at.start_span("per_prompt", "GET", lazy_attributes=lazy)
        assert span.attributes["server.address"] == "h"
        assert lazy.threads == [threading.current_thread().name]
        at.end_span(span)
    assert dict(spans.by_name("GET")[0].attributes) == {"server.address": "h"}
    assert len(lazy.threads) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_function_that_raises_is_logged_once_and_adds_nothing(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The span keeps its other attributes; a second failure is not logged again."""

    def broken() -> Mapping[str, Any]:
        raise ValueError("no attributes today")

    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        with capture_spans("per_prompt", provider=provider) as spans:
            for _ in range(2):
                at.end_span(
                    at.start_span("per_prompt", "GET", attributes={"k": 1}, lazy_attributes=broken)
                )
            recorded = [dict(span.attributes) for span in spans.by_name("GET")]
    assert recorded == [{"k": 1}, {"k": 1}]
    logged = [r for r in caplog.records if "lazy_attributes function raised" in r.getMessage()]
    assert len(logged) <= 1  # once per process: an earlier test may have used it up
    if logged:
        assert logged[0].exc_info is not None


def test_a_failure_is_logged_the_first_time(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first failure of the process is logged, with its exception."""
    from asynctrace._fast import _deferred

    monkeypatch.setattr(_deferred, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        with capture_spans("per_prompt", provider="fast") as spans:
            at.end_span(at.start_span("per_prompt", "GET", lazy_attributes=lambda: 1 / 0))  # type: ignore[arg-type,return-value]
            assert len(spans.by_name("GET")) == 1
    (record,) = [r for r in caplog.records if "lazy_attributes" in r.getMessage()]
    assert record.exc_info is not None
    assert record.exc_info[0] is ZeroDivisionError


def _three_attributes(tmp_path: Path, provider: str) -> Any:
    """Telemetry on *provider*, spans to memory, at most 3 attributes a span."""
    return at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "output_dir": str(tmp_path),
            "provider": provider,
            "span_limits": {"max_attributes": 3},
        }
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_past_max_attributes_the_oldest_are_evicted_and_counted(
    provider: str, tmp_path: Path
) -> None:
    """max_attributes=3: {a, b} given, {c, d} deferred, which count as the oldest: a, b
    and d are kept and one is dropped, on both providers."""
    telemetry = _three_attributes(tmp_path, provider)
    try:
        span = at.start_span(
            "per_prompt",
            "GET",
            attributes={"a": 1, "b": 2},
            lazy_attributes=lambda: {"c": 3, "d": 4},
        )
        at.end_span(span)
        (got,) = telemetry.memory_exporter.get_finished_spans()
    finally:
        telemetry.shutdown()
    assert dict(got.attributes) == {"a": 1, "b": 2, "d": 4}
    assert got.dropped_attributes == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_urls_redacted_keeps_the_callers_url_as_start_span_does(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``urls_redacted=True`` the fast provider records the function's URL as given
    (the caller redacted it with its own keys), as it records a given one; the SDK's
    spans check every attribute."""
    from asynctrace import _spans
    from asynctrace._fast import _deferred

    monkeypatch.setattr(_spans, "_EXTRA_WORDS", set())
    monkeypatch.setattr(_deferred, "_EXTRA_WORDS", set())
    url = "http://h/x?sig=kept-by-the-caller"
    with capture_spans("per_prompt", provider=provider) as spans:
        span = at.start_span(
            "per_prompt", "GET", urls_redacted=True, lazy_attributes=lambda: {"url.full": url}
        )
        at.end_span(span)
        at.end_span(at.start_span("per_prompt", "PUT", lazy_attributes=lambda: {"url.full": url}))
    recorded = {s.name: s.attributes["url.full"] for s in spans}
    assert recorded["PUT"] == "http://h/x?sig=REDACTED"
    assert recorded["GET"] == (url if provider == "fast" else "http://h/x?sig=REDACTED")


def test_bad_keys_are_dropped_and_counted() -> None:
    """An empty key is dropped and counted, as a mapping given to ``set_attributes``."""
    with capture_spans("per_prompt", provider="fast") as spans:
        at.end_span(at.start_span("per_prompt", "GET", lazy_attributes=lambda: {"": 1, "ok": 2}))
    (span,) = spans.by_name("GET")
    assert dict(span.attributes) == {"ok": 2}
    assert span.dropped_attributes == 1


def test_a_deferred_span_left_open_is_settled_when_truncated() -> None:
    """A span still open when the capture ends is ended (truncated) with its attributes."""
    with capture_spans("per_prompt", provider="fast") as spans:
        at.start_span("per_prompt", "GET", lazy_attributes=lambda: {"server.port": 9})
    (span,) = spans.by_name("GET")
    assert span.attributes["server.port"] == 9
    assert span.attributes["asynctrace.truncated"] is True


# -- what the function may do, and how the threads share it ------------------------------


@pytest.mark.parametrize("chrome_and_memory", ["fast"], indirect=True)
def test_a_cancellation_raised_by_the_function_loses_no_span(chrome_and_memory: Any) -> None:
    """A ``BaseException`` that is not an ``Exception`` (a cancellation) raised on the
    export thread: that span goes without its function's attributes, every span of the
    batch is written."""
    import asyncio

    telemetry = chrome_and_memory

    def cancelled() -> Mapping[str, Any]:
        raise asyncio.CancelledError

    at.end_span(at.start_span("per_prompt", "A", attributes={"k": 1}, lazy_attributes=cancelled))
    at.end_span(at.start_span("per_prompt", "B", lazy_attributes=lambda: {"server.port": 2}))
    assert telemetry.flush(5.0)
    events = read_chrome_trace(telemetry.trace_file).events
    written = {e["name"]: e["args"] for e in events if e.get("ph") == "X"}
    assert written["A"]["k"] == 1
    assert "server.port" not in written["A"]
    assert written["B"]["server.port"] == 2


def test_ctrl_c_in_the_function_where_a_hook_reads_gives_it_back_for_the_next_reader() -> None:
    """Interrupted on the main thread, the function is given back: the span is still
    exported with its attributes, computed by the next reader (here the in-memory
    exporter, as it converts)."""
    calls: list[str] = []

    def once_interrupted() -> Mapping[str, Any]:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return {"server.port": 3}

    with capture_spans("per_prompt", provider="fast") as spans:
        span: Any = at.start_span("per_prompt", "GET", lazy_attributes=once_interrupted)
        with pytest.raises(KeyboardInterrupt):
            span.attributes  # noqa: B018
        at.end_span(span)
    assert spans.by_name("GET")[0].attributes["server.port"] == 3
    assert len(calls) == 2


def test_a_slow_function_holds_up_no_other_span(monkeypatch: pytest.MonkeyPatch) -> None:
    """While one span's function runs on another thread, reading another span's attributes
    does not wait; reading the same span's waits at most ``WAIT_S``, then reads it as it
    is (its function keeps running)."""
    from asynctrace._fast import _deferred

    monkeypatch.setattr(_deferred, "WAIT_S", 0.2)
    release = threading.Event()
    started = threading.Event()

    def slow() -> Mapping[str, Any]:
        started.set()
        release.wait(10)
        return {"server.port": 4}

    with capture_spans("per_prompt", provider="fast"):
        slow_span: Any = at.start_span("per_prompt", "slow", lazy_attributes=slow)
        other: Any = at.start_span("per_prompt", "other", lazy_attributes=lambda: {"k": 5})
        reader = threading.Thread(target=lambda: slow_span.attributes)
        reader.start()
        try:
            assert started.wait(10)
            assert other.attributes["k"] == 5  # not held up
            begun = time.monotonic()
            assert "server.port" not in slow_span.attributes  # waited, then read as it is
            assert time.monotonic() - begun < 5
        finally:
            release.set()
            reader.join(10)
        assert slow_span.attributes["server.port"] == 4  # merged once it returned
        at.end_span(slow_span)
        at.end_span(other)


def test_a_function_reading_its_own_span_runs_once() -> None:
    """It sees the span's attributes as they are; no recursion."""
    calls = []
    holder: list[Any] = []

    def reads_itself() -> Mapping[str, Any]:
        calls.append(1)
        return {"copied": holder[0].attributes["given"]}

    with capture_spans("per_prompt", provider="fast") as spans:
        span: Any = at.start_span(
            "per_prompt", "GET", attributes={"given": "g"}, lazy_attributes=reads_itself
        )
        holder.append(span)
        at.end_span(span)
    assert dict(spans.by_name("GET")[0].attributes) == {"given": "g", "copied": "g"}
    assert calls == [1]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stamps_are_not_taken_from_the_function(provider: str) -> None:
    """``rl.iteration`` and ``rl.bucket`` follow asynctrace's rules only, on both providers."""
    with capture_spans("per_prompt", provider=provider) as spans, at.iteration_scope(7):
        at.end_span(
            at.start_span(
                "per_prompt",
                "GET",
                lazy_attributes=lambda: {"rl.iteration": 99, "rl.bucket": "made-up", "k": 1},
            )
        )
    attrs = dict(spans.by_name("GET")[0].attributes)
    assert attrs["rl.iteration"] == 7
    assert "rl.bucket" not in attrs
    assert attrs["k"] == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_hand_set_attribute_outlives_the_functions_keys_past_the_limit(
    provider: str, tmp_path: Path
) -> None:
    """An aiohttp span's shape at max_attributes=3: the status set during the request is
    kept, the function's keys count as the oldest."""
    telemetry = _three_attributes(tmp_path, provider)
    try:
        span = at.start_span(
            "per_prompt",
            "GET",
            attributes={"http.request.method": "GET"},
            lazy_attributes=lambda: {"url.full": "http://h/", "server.port": 1},
        )
        span.set_attribute("http.response.status_code", 503)
        at.end_span(span)
        (got,) = telemetry.memory_exporter.get_finished_spans()
    finally:
        telemetry.shutdown()
    assert dict(got.attributes) == {
        "server.port": 1,
        "http.request.method": "GET",
        "http.response.status_code": 503,
    }


def test_a_function_that_is_not_callable_is_refused_in_strict_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mapping given as ``lazy_attributes`` by mistake (strict: raised)."""
    from asynctrace import _errors

    monkeypatch.setattr(_errors, "_strict", True)
    with capture_spans("per_prompt", provider="fast"):
        with pytest.raises(TypeError, match="lazy_attributes"):
            at.start_span("per_prompt", "GET", lazy_attributes={"k": 1})  # type: ignore[arg-type]


def test_otlp_alone_sends_the_functions_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no other exporter to compute them first, the OTLP queue does."""
    from _otlp_receiver import OtlpReceiver

    with OtlpReceiver("http/protobuf") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        telemetry = at.configure(
            {"enabled": True, "exporters": ["otlp"], "span_groups": "all", "provider": "fast"}
        )
        try:
            span = at.start_span(
                "per_prompt", "GET", lazy_attributes=lambda: {"url.full": "http://h/?token=t"}
            )
            at.end_span(span)
            assert telemetry.flush(10.0)
        finally:
            telemetry.shutdown(2.0)
        (received,) = receiver.spans
    assert received.attributes["url.full"] == "http://h/?token=REDACTED"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_cancellation_from_the_function_never_stops_the_span(provider: str) -> None:
    """On the SDK provider, where it runs as the span starts, too."""
    import asyncio

    def cancelled() -> Mapping[str, Any]:
        raise asyncio.CancelledError

    with capture_spans("per_prompt", provider=provider) as spans:
        at.end_span(
            at.start_span("per_prompt", "GET", attributes={"k": 1}, lazy_attributes=cancelled)
        )
    assert dict(spans.by_name("GET")[0].attributes) == {"k": 1}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_functions_keys_stay_the_oldest_when_read_early(provider: str) -> None:
    """Read while the span is live (a request hook), then 126 sets past the default limit
    of 128: the function's keys are evicted first, as on the SDK provider."""
    with capture_spans("per_prompt", provider=provider) as spans:
        span: Any = at.start_span(
            "per_prompt",
            "GET",
            attributes={"http.request.method": "GET"},
            lazy_attributes=lambda: {"url.full": "http://h/a", "server.address": "h"},
        )
        dict(span.attributes)
        for i in range(126):
            span.set_attribute(f"k{i}", i)
        at.end_span(span)
    attrs = dict(spans.by_name("GET")[0].attributes)
    assert "url.full" not in attrs
    assert attrs["server.address"] == "h"
    assert attrs["http.request.method"] == "GET"
    assert len(attrs) == 128


def test_a_long_url_is_redacted_even_when_its_function_could_not_be_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread still runs the span's function past ``WAIT_S``: the reader goes on
    without its keys, but a long URL set by hand is redacted all the same."""
    from asynctrace._fast import _deferred

    monkeypatch.setattr(_deferred, "WAIT_S", 0.1)
    release, started = threading.Event(), threading.Event()

    def slow() -> Mapping[str, Any]:
        started.set()
        release.wait(10)
        return {"server.port": 1}

    long_url = "http://u:pw@h/?token=SECRET&q=" + "x" * 5000
    with capture_spans("per_prompt", provider="fast"):
        span: Any = at.start_span("per_prompt", "GET", lazy_attributes=slow)
        span.set_attribute("url.full", long_url)
        runner = threading.Thread(target=lambda: span.attributes)
        runner.start()
        try:
            assert started.wait(10)
            seen = span.attributes["url.full"]
        finally:
            release.set()
            runner.join(10)
        at.end_span(span)
    assert seen.__class__ is str
    assert "SECRET" not in seen
    assert "pw@" not in seen


def test_the_programs_secret_words_overrule_urls_redacted_here_too() -> None:
    """With words of the program's own registered, a trusted URL from the function is
    redacted by them, as a trusted URL given at start is."""
    at.register_secret_words(["lazyrolloutcode"])
    with capture_spans("per_prompt", provider="fast") as spans:
        span = at.start_span(
            "per_prompt",
            "GET",
            urls_redacted=True,
            lazy_attributes=lambda: {"url.full": "http://h/?lazyrolloutcode=abc"},
        )
        at.end_span(span)
    assert "abc" not in spans.by_name("GET")[0].attributes["url.full"]
