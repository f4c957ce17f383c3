"""Carriers: W3C round trips, malformed input, accepts_trace_context, env carriers."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from _budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace

from asynctrace import (
    ConfigurationError,
    accepts_trace_context,
    current_trace_carrier,
    dispatch_with_trace_context,
    extract_env,
    inject_env,
    managed_span,
    remote_trace_context,
    span_carrier,
    umbrella_span,
)
from asynctrace.testing import CapturedSpans, capture_spans

VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_empty_carrier_when_nothing_recording() -> None:
    """No valid span context → {}; inject_env removes stale variables."""
    assert current_trace_carrier() == {}
    with capture_spans("default"), managed_span("generation", "off"):
        assert current_trace_carrier() == {}
    env = inject_env({"TRACEPARENT": VALID, "TRACESTATE": "a=b", "KEEP": "1"})
    assert env == {"KEEP": "1"}


def test_round_trip(spans: CapturedSpans) -> None:
    """A carrier taken inside a span re-parents spans opened under it."""
    with umbrella_span("job", "parent") as parent:
        carrier = current_trace_carrier()
    assert set(carrier) == {"traceparent"}
    with remote_trace_context(carrier) as remote:
        assert remote.valid
        with managed_span("reward", "child"):
            pass
    assert trace.get_current_span().get_span_context().is_valid is False
    child = spans.by_name("child")[0]
    assert child.context.trace_id == parent.get_span_context().trace_id
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id


def test_tracestate_travels(spans: CapturedSpans) -> None:
    """tracestate passes through a round trip."""
    with remote_trace_context({"traceparent": VALID, "tracestate": "vendor=abc"}):
        assert current_trace_carrier() == {"traceparent": VALID, "tracestate": "vendor=abc"}


@pytest.mark.parametrize(
    "carrier",
    [
        None,
        {},
        {"traceparent": ""},
        {"traceparent": "garbage"},
        {"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"},
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01"},
        {"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        {"traceparent": VALID.upper()},
        {"traceparent": b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        {"traceparent": ["x"]},
        {1: 2},
        "traceparent",
        ["traceparent", VALID],
        {"traceparent": VALID + "-" + "x" * 10_000},
    ],
)
def test_malformed_carriers_are_noops(carrier: Any) -> None:
    """None, empty and malformed carriers attach nothing and never raise."""
    with remote_trace_context(carrier) as remote:
        assert not remote.valid
        assert not trace.get_current_span().get_span_context().is_valid


def test_invalid_tracestate_is_dropped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """A malformed tracestate is discarded without a log line; the parent still attaches."""
    with remote_trace_context({"traceparent": VALID, "tracestate": "Bad Key=1," * 900}) as r:
        assert r.valid
        assert current_trace_carrier() == {"traceparent": VALID}
    assert not caplog.records


def test_header_case_is_ignored() -> None:
    """HTTP-style capitalised keys are accepted."""
    with remote_trace_context({"Traceparent": VALID}) as remote:
        assert remote.valid


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.binary() | st.floats(),
    lambda children: st.lists(children) | st.dictionaries(st.text() | st.binary(), children),
    max_leaves=4,
)
carrier_values = (
    st.text()
    | st.binary()
    | junk
    | st.from_regex(r"\A[0-9a-fA-F]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.{0,20})?\Z")
)


def _is_valid_w3c(value: object) -> bool:
    import re

    if not isinstance(value, str):
        return False
    m = re.fullmatch(
        r"\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*", value
    )
    if not m:
        return False
    version, trace_id, span_id, _, rest = m.groups()
    if version == "ff" or (version == "00" and rest):
        return False
    return int(trace_id, 16) != 0 and int(span_id, 16) != 0


@pytest.mark.fuzz
@settings(max_examples=examples(400, 20_000), deadline=None)
@given(
    st.one_of(
        junk,
        st.dictionaries(
            st.sampled_from(["traceparent", "tracestate", "TRACEPARENT", "x"]) | st.text(),
            carrier_values,
        ),
    )
)
def test_fuzz_carriers_never_raise_never_attach_invalid(carrier: Any) -> None:
    """Arbitrary junk as a carrier never raises and only valid W3C attaches."""
    with remote_trace_context(carrier) as remote:
        span_context = trace.get_current_span().get_span_context()
        if remote.valid:
            assert isinstance(carrier, dict)
            (parent,) = [
                v
                for k, v in carrier.items()
                if isinstance(k, str) and k.lower() == "traceparent" and isinstance(v, str)
            ]
            assert _is_valid_w3c(parent)
            assert span_context.is_valid
        else:
            assert not span_context.is_valid


@pytest.mark.fuzz
@settings(max_examples=examples(400, 20_000), deadline=None)
@given(st.dictionaries(st.sampled_from(["TRACEPARENT", "TRACESTATE", "PATH"]), st.text()))
def test_fuzz_env_never_raises(environ: dict[str, str]) -> None:
    """extract_env over arbitrary environment values never raises or attaches junk."""
    with extract_env(environ) as remote:
        if remote.valid:
            assert _is_valid_w3c(environ["TRACEPARENT"])


def test_env_round_trip(spans: CapturedSpans) -> None:
    """inject_env → extract_env re-parents in the 'child'."""
    with umbrella_span("job", "parent") as parent:
        env = inject_env({})
    assert env["TRACEPARENT"].split("-")[2] == format(parent.get_span_context().span_id, "016x")
    with extract_env(env), managed_span("reward", "child"):
        pass
    child = spans.by_name("child")[0]
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id


@accepts_trace_context
def sync_target(x: int, *, scale: int = 1) -> tuple[int, int]:
    """Return x*scale and the current trace id."""
    return x * scale, trace.get_current_span().get_span_context().trace_id


@accepts_trace_context
async def async_target(x: int, **extra: Any) -> tuple[int, int]:
    """Async variant with **kwargs."""
    return x + len(extra), trace.get_current_span().get_span_context().trace_id


class Actor:
    """A class with decorated methods."""

    @accepts_trace_context
    def method(self, x: int) -> int:
        """Return x and record the trace id."""
        self.trace_id = trace.get_current_span().get_span_context().trace_id
        return x


def test_signature_shows_carrier() -> None:
    """inspect.signature shows trace_carrier (before **kwargs when present)."""
    assert "trace_carrier" in inspect.signature(sync_target).parameters
    params = list(inspect.signature(async_target).parameters)
    assert params == ["x", "trace_carrier", "extra"]
    inspect.signature(Actor.method).bind(Actor(), 1, trace_carrier={})
    # Ray unwraps before reading the signature: the keyword must survive that.
    assert "trace_carrier" in inspect.signature(inspect.unwrap(sync_target)).parameters
    assert inspect.iscoroutinefunction(async_target)


def test_accepts_trace_context_sync_and_methods(spans: CapturedSpans) -> None:
    """The decorated function runs under the carrier, and still works without one."""
    assert sync_target(2, scale=3)[0] == 6
    with umbrella_span("job", "p") as parent:
        trace_id = parent.get_span_context().trace_id
        result = dispatch_with_trace_context(sync_target, 2, scale=2)
    assert result == (4, trace_id)
    assert sync_target(1, trace_carrier={"traceparent": VALID})[1] == int(VALID.split("-")[1], 16)
    actor = Actor()
    assert actor.method(5, trace_carrier={"traceparent": VALID}) == 5
    assert actor.trace_id == int(VALID.split("-")[1], 16)
    assert actor.method(6) == 6


@pytest.mark.anyio
async def test_accepts_trace_context_async(spans: CapturedSpans) -> None:
    """Async functions run under the carrier; extra kwargs still pass through."""
    value, trace_id = await async_target(1, trace_carrier={"traceparent": VALID}, more=1)
    assert value == 2
    assert trace_id == int(VALID.split("-")[1], 16)
    assert (await async_target(1))[0] == 1


def test_generators_are_rejected() -> None:
    """Generator functions get a ConfigurationError explaining the alternative."""

    def gen() -> Any:
        yield 1

    with pytest.raises(ConfigurationError, match="remote_trace_context"):
        accepts_trace_context(gen)


def test_message_like_headers_and_baggage_survive(spans: CapturedSpans) -> None:
    """Objects with .get (http.server headers) work; other context values stay visible."""
    from email.message import Message

    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    headers = Message()
    headers["Traceparent"] = VALID
    token = otel_context.attach(baggage.set_baggage("k", "v"))
    try:
        with remote_trace_context(headers) as remote:  # type: ignore[arg-type]
            assert remote.valid
            assert baggage.get_baggage("k") == "v"
    finally:
        otel_context.detach(token)


def test_hostile_mapping_never_raises() -> None:
    """A mapping whose methods raise is treated as no carrier."""

    class Hostile(dict):  # type: ignore[type-arg]
        def get(self, *args: object) -> object:
            raise RuntimeError("no")

    with remote_trace_context(Hostile()) as remote:
        assert not remote.valid


@pytest.mark.parametrize("flags", [0, 1, 2, 0x7F, 0xFF])
def test_span_carrier_matches_the_w3c_format(flags: int) -> None:
    """Ids at their limits and every kind of flags byte give the exact W3C traceparent."""
    for trace_id, span_id in ((1, 1), (2**128 - 1, 2**64 - 1), (0xABC, 0xDEF)):
        ctx = trace.SpanContext(trace_id, span_id, False, trace.TraceFlags(flags))
        carrier = span_carrier(trace.NonRecordingSpan(ctx))
        assert carrier["traceparent"] == f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
