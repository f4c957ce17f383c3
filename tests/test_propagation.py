"""Carriers: W3C round trips, malformed input, accepts_trace_context, env carriers."""

from __future__ import annotations

import inspect
from typing import Any

import _fuzz
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


@pytest.mark.slow
@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(150, 2_500), deadline=None)
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
@_fuzz.target
@settings(max_examples=examples(400, 25_000), deadline=None)
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
    """inspect.signature shows trace_carrier and _otel_carrier (before **kwargs when present)."""
    assert "trace_carrier" in inspect.signature(sync_target).parameters
    assert "_otel_carrier" in inspect.signature(sync_target).parameters
    params = list(inspect.signature(async_target).parameters)
    assert params == ["x", "trace_carrier", "_otel_carrier", "extra"]
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


def test_lens_carrier_keyword(spans: CapturedSpans) -> None:
    """nemo-lens's _otel_carrier is accepted, and carrier_kwarg= sends it; both join the trace."""
    trace_id = int(VALID.split("-")[1], 16)
    assert sync_target(1, _otel_carrier={"traceparent": VALID})[1] == trace_id
    inspect.signature(Actor.method).bind(Actor(), 1, _otel_carrier={})
    with umbrella_span("job", "p") as parent:
        expected = parent.get_span_context().trace_id
        assert dispatch_with_trace_context(sync_target, 2, carrier_kwarg="_otel_carrier")[1] == (
            expected
        )

    def lens_style(x: int, _otel_carrier: dict[str, str] | None = None) -> dict[str, str] | None:
        return _otel_carrier

    with umbrella_span("job", "p"):
        sent = dispatch_with_trace_context(lens_style, 1, carrier_kwarg="_otel_carrier")
    assert sent is not None
    assert sent["traceparent"].startswith("00-")
    with pytest.raises(ConfigurationError, match="carrier_kwarg='carrier'"):
        dispatch_with_trace_context(lens_style, 1, carrier_kwarg="carrier")


def test_lens_carrier_declared_is_passed_through() -> None:
    """A function that declares _otel_carrier itself receives it unchanged."""

    @accepts_trace_context
    def declares(_otel_carrier: dict[str, str] | None = None) -> dict[str, str] | None:
        return _otel_carrier

    assert declares(_otel_carrier={"traceparent": VALID}) == {"traceparent": VALID}


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
    """Ids at their limits and every kind of flags byte give the exact W3C traceparent,
    with the sampled flag only (Level 1: a vendor sets the bits it does not use to zero)."""
    for trace_id, span_id in ((1, 1), (2**128 - 1, 2**64 - 1), (0xABC, 0xDEF)):
        ctx = trace.SpanContext(trace_id, span_id, False, trace.TraceFlags(flags))
        carrier = span_carrier(trace.NonRecordingSpan(ctx))
        assert carrier["traceparent"] == f"00-{trace_id:032x}-{span_id:016x}-{flags & 1:02x}"


def test_carriers_of_interleaved_traces_each_name_their_own() -> None:
    """Spans of two traces, alternating and from two threads at once: each carrier is its own.

    (The last trace id's hex is reused while requests stay in one trace.)
    """
    import threading

    pairs = [(0xA1, 1), (0xB2, 2), (0xA1, 3), (0xA1, 4), (0xB2, 5), (0xB2, 6), (0xA1, 7)]
    for trace_id, span_id in pairs:
        ctx = trace.SpanContext(trace_id, span_id, False, trace.TraceFlags(1))
        assert span_carrier(trace.NonRecordingSpan(ctx))["traceparent"] == (
            f"00-{trace_id:032x}-{span_id:016x}-01"
        )
    wrong: list[str] = []

    def hammer(trace_id: int) -> None:
        for span_id in range(1, 5001):
            ctx = trace.SpanContext(trace_id, span_id, False, trace.TraceFlags(1))
            got = span_carrier(trace.NonRecordingSpan(ctx))["traceparent"]
            if got != f"00-{trace_id:032x}-{span_id:016x}-01":
                wrong.append(got)

    threads = [threading.Thread(target=hammer, args=(t,)) for t in (2**128 - 1, 0xC3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_a_fast_span_carrier_is_what_opentelemetry_writes_for_it() -> None:
    """A fast-provider span's carrier (read from its fields) is the W3C propagator's, but
    for the flags: the sampled flag only, where OpenTelemetry also sends Level 2's random
    flag, which Trace Context Level 1 (what carriers follow) makes a bit to send as zero."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from asynctrace import FastTracerProvider

    tracer = FastTracerProvider().get_tracer("carrier")
    state = trace.TraceState([("vendor", "v1"), ("other@tenant", "x")])
    parents = [
        None,  # a root: the sampled and random flags
        trace.SpanContext(2**128 - 1, 2**64 - 1, True, trace.TraceFlags(1), state),
        trace.SpanContext(0xABC, 0xDEF, True, trace.TraceFlags(3)),
    ]
    for parent in parents:
        remote = None if parent is None else trace.NonRecordingSpan(parent)
        context = None if remote is None else trace.set_span_in_context(remote)
        span = tracer.start_span("work", context=context)
        expected: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(expected, trace.set_span_in_context(span))
        kept = 3 if parent is None else int(parent.trace_flags)  # the span's own flags
        assert expected["traceparent"][-2:] == f"{kept:02x}"
        expected["traceparent"] = expected["traceparent"][:-2] + "01"
        assert span_carrier(span) == expected
        span.end()


@pytest.mark.parametrize("ratio", [1.0, 0.0])
def test_the_carrier_of_a_managed_span_object(tmp_path: Any, ratio: float) -> None:
    """The object managed_span() returns: no carrier before it is entered, its span's inside."""
    import asynctrace

    telemetry = asynctrace.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["memory"],
            "output_dir": str(tmp_path),
            "sampling_ratio": ratio,
        }
    )
    try:
        cm = asynctrace.managed_span("generation", "work")
        assert span_carrier(cm) == {}  # not started: no context to name
        assert span_carrier(object()) == {}  # type: ignore[arg-type]  # not a span at all
        with cm as span:
            carrier = span_carrier(span)
            flags = int(carrier["traceparent"][-2:], 16)
            assert flags & 1 == (1 if ratio else 0)  # sampled, or not
            if isinstance(cm, trace.Span):  # the fast provider: the object is the span too
                assert span_carrier(cm) == carrier
            else:  # the SDK provider: a context manager, which names no span
                assert span_carrier(cm) == {}
    finally:
        telemetry.shutdown()


# ---------------------------------------------------------------------------
# W3C processing model at the carrier level.


@pytest.mark.parametrize(
    ("traceparent", "flags"),
    [
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", 0),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-ff", 1),  # unused bits: zero
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03", 1),  # random: not sent
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-02", 0),
        ("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03-future", 1),  # sampled only
        (" \t00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\t ", 1),
    ],
)
def test_traceparent_flags_and_versions(traceparent: str, flags: int) -> None:
    """The sampled flag passes on, and no other (W3C Level 1: a vendor sets the bits it
    does not use to zero); a later version is read for its sampled flag; OWS is allowed."""
    with remote_trace_context({"traceparent": traceparent}) as remote:
        assert remote.valid
        (sent,) = [current_trace_carrier()["traceparent"]]
    assert sent == f"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-{flags:02x}"


@settings(max_examples=examples(300, 20_000), deadline=None)
@given(
    trace_id=st.integers(0, 2**128 - 1) | st.sampled_from([0, 1, 2**128 - 1]),
    span_id=st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**64 - 1]),
    flags=st.integers(0, 255),
    case=st.sampled_from(["lower", "upper", "space"]),
)
def test_the_common_traceparent_reads_as_opentelemetry_reads_it(
    trace_id: int, span_id: int, flags: int, case: str
) -> None:
    """Version 00 as senders write it (a quick path): valid when OpenTelemetry's own
    propagator finds it valid, with its ids and sampled flag; the flags masked to 0x03
    (Level 2's random flag kept, reserved bits not passed on); invalid is None."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from asynctrace._carrier_read import parse_traceparent

    value = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    if case == "upper":
        value = value.upper()
    elif case == "space":
        value += " "
    ours = parse_traceparent(value)
    extracted = trace.get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": value})
    ).get_span_context()
    if not extracted.is_valid:  # all-zero ids, upper-case hex (W3C: lower-case only)
        assert ours is None
        return
    expected = trace.SpanContext(
        trace_id, span_id, True, trace.TraceFlags(flags & 0x03), trace.DEFAULT_TRACE_STATE
    )
    assert ours == expected
    assert ours is not None
    assert (ours.trace_id, ours.span_id, ours.is_remote, ours.is_valid) == (
        extracted.trace_id,
        extracted.span_id,
        True,
        True,
    )
    assert ours.trace_flags.sampled == extracted.trace_flags.sampled
    assert isinstance(ours.trace_flags, trace.TraceFlags)
    assert ours.trace_state == extracted.trace_state


def test_repeated_traceparent_is_invalid() -> None:
    """Two traceparent values (keys differing in case, or a multi-value carrier): no parent."""
    from multidict import CIMultiDict

    other = VALID.replace("0af7", "1af7")
    for carrier in (
        {"traceparent": VALID, "Traceparent": other},
        CIMultiDict([("traceparent", VALID), ("TraceParent", VALID)]),
    ):
        with remote_trace_context(carrier) as remote:  # type: ignore[arg-type]
            assert not remote.valid


def test_tracestate_headers_are_combined_in_order() -> None:
    """Several tracestate values are one list, in order; a repeated key discards it all."""
    from multidict import CIMultiDict

    carrier = CIMultiDict(
        [("traceparent", VALID), ("tracestate", "a=1, b=2"), ("TraceState", "\tc=3")]
    )
    with remote_trace_context(carrier):  # type: ignore[arg-type]
        assert current_trace_carrier()["tracestate"] == "a=1,b=2,c=3"
    carrier.add("tracestate", "a=9")
    with remote_trace_context(carrier):  # type: ignore[arg-type]
        assert "tracestate" not in current_trace_carrier()


@pytest.mark.parametrize(
    ("tracestate", "kept"),
    [
        ("foo=1,,bar=2", "foo=1,bar=2"),
        (",".join(f"k{i}=v" for i in range(32)), ",".join(f"k{i}=v" for i in range(32))),
        (",".join(f"k{i}=v" for i in range(33)), None),
        ("t" * 241 + "@" + "v" * 14 + "=x", "t" * 241 + "@" + "v" * 14 + "=x"),
        ("t" * 242 + "@v=x", None),
        ("@v=x", None),
        ("a=1," + "z" * 257 + "=1", None),
        ("", None),
        ("k=v" + ",x=y" * 3000, None),  # over 8,192 characters
    ],
)
def test_tracestate_limits(tracestate: str, kept: str | None) -> None:
    """Empty members skipped; 32 members; tenant@vendor lengths; invalid → discarded whole."""
    with remote_trace_context({"traceparent": VALID, "tracestate": tracestate}) as remote:
        assert remote.valid
        assert current_trace_carrier().get("tracestate") == kept


# ---------------------------------------------------------------------------
# Scopes across carriers (W3C baggage).


def scoped_carrier() -> dict[str, str]:
    """A carrier taken inside every scope, with the caller's own baggage entry."""
    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    import asynctrace as at

    token = otel_context.attach(baggage.set_baggage("user.tag", "a b,c"))
    try:
        with (
            at.iteration_scope(9),
            at.task_scope("item-4"),
            at.session_scope(),
            at.per_prompt_scope(),
            at.bucket_scope(at.Bucket.OVERHEAD),
            umbrella_span("job", "caller"),
        ):
            return current_trace_carrier()
    finally:
        otel_context.detach(token)


def test_scopes_travel_only_when_propagated() -> None:
    """propagate_scopes: iteration, per-prompt, task and session cross; the bucket does not."""
    import asynctrace as at

    with capture_spans("all"):
        assert "baggage" not in scoped_carrier()
    with capture_spans("all", propagate_scopes=True) as captured:
        carrier = scoped_carrier()
        assert "asynctrace.bucket" not in carrier["baggage"]
        with remote_trace_context(carrier):
            assert at.current_iteration() == 9
            assert at.current_task_id() == "item-4"
            assert at.in_per_prompt_scope()
            assert at.current_bucket() is None
            with managed_span("reward", "far"):
                pass
        assert at.current_iteration() is None
        assert not at.in_per_prompt_scope()
    (far,) = captured.by_name("far")
    attrs = dict(far.attributes or {})
    assert attrs["rl.iteration"] == 9
    assert attrs["rl.task_id"] == "item-4"
    assert attrs["rl.session_id"]
    assert not any(key.startswith("user") for key in attrs)  # baggage never becomes attributes


def test_user_baggage_passes_through_untouched() -> None:
    """The caller's own baggage entries arrive as OpenTelemetry baggage, and go on from there."""
    from opentelemetry import baggage

    with capture_spans("all", propagate_scopes=True):
        carrier = scoped_carrier()
        with remote_trace_context(carrier):
            assert baggage.get_all() == {"user.tag": "a b,c"}
            onward = current_trace_carrier()
        assert "user.tag=a+b%2Cc" in onward["baggage"].split(",")
        assert baggage.get_all() == {}


def test_the_carrier_follows_every_change_of_context() -> None:
    """Carriers made one after another reflect each span, scope, baggage and setting change.

    current_trace_carrier() keeps its last carrier for calls under the same context;
    any change in between must give a new one, and a caller changing the dict it got
    must not change the next.
    """
    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    import asynctrace as at

    with capture_spans("all", propagate_scopes=True) as captured:
        with umbrella_span("job", "outer") as outer:
            for _ in range(2):  # a carrier made, then one reused
                first = current_trace_carrier()
                first["traceparent"] = "changed by the caller"
                first["extra"] = "x"
            again = current_trace_carrier()
            assert again == {"traceparent": span_carrier(outer)["traceparent"]}
            with managed_span("reward", "inner") as inner:
                assert current_trace_carrier()["traceparent"] == span_carrier(inner)["traceparent"]
            assert current_trace_carrier() == again
            with at.iteration_scope(3):
                assert "asynctrace.iteration=3" in current_trace_carrier()["baggage"]
                with at.iteration_scope(4):
                    assert "asynctrace.iteration=4" in current_trace_carrier()["baggage"]
                assert "asynctrace.iteration=3" in current_trace_carrier()["baggage"]
            assert "baggage" not in current_trace_carrier()
            token = otel_context.attach(baggage.set_baggage("user.tag", "v"))
            try:
                assert current_trace_carrier()["baggage"] == "user.tag=v"
            finally:
                otel_context.detach(token)
            assert current_trace_carrier() == again
        assert current_trace_carrier() == {}
    assert captured.by_name("outer")
    assert captured.by_name("inner")
    with capture_spans("all"), umbrella_span("job", "plain"), at.iteration_scope(3):
        # the same scopes, propagate_scopes off: no baggage
        assert set(current_trace_carrier()) == {"traceparent"}


def test_a_receiver_without_propagate_scopes_ignores_them() -> None:
    """Scopes are restored only by a process that propagates them itself."""
    import asynctrace as at

    with capture_spans("all", propagate_scopes=True):
        carrier = scoped_carrier()
    with capture_spans("all"), remote_trace_context(carrier) as remote:
        assert remote.valid
        assert at.current_iteration() is None


@pytest.mark.anyio
async def test_restored_scopes_reach_tasks(anyio_backend: Any) -> None:
    """On asyncio, uvloop and trio: tasks started inside the block see the restored scopes."""
    import anyio

    import asynctrace as at

    seen: list[Any] = []

    async def child() -> None:
        await anyio.sleep(0)
        seen.append((at.current_iteration(), at.current_task_id(), at.in_per_prompt_scope()))

    with capture_spans("all", propagate_scopes=True):
        carrier = scoped_carrier()
        async with remote_trace_context(carrier), anyio.create_task_group() as group:
            group.start_soon(child)
            group.start_soon(child)
    assert seen == [(9, "item-4", True)] * 2


@pytest.mark.parametrize(
    "value",
    [
        "k=v," * 3000,  # oversized
        ",".join(f"k{i}=v" for i in range(10_000)),  # 10,000 entries
        ",".join(f"k{i}=v" for i in range(400)),  # past 180 entries, under 8,192 bytes
        "asynctrace.iteration=ü,ключ=значение,\u2028=1,a=\ud800",  # non-ASCII
        "=,;,==,a=b;;;,asynctrace.task_id=%ZZ,asynctrace.iteration=1e9,asynctrace.per_prompt=2",
        "asynctrace.task_id=" + "9" * 4000,
        "a=" + "v" * 5000,
        "a=b;k" + " " * 4088 + "x",  # a property's blanks, nothing a pattern may split two ways
        ("a=b;k" + " " * 4088 + "x,") * 2,
        "a=b;k" + "\t" * 4088 + "=" + "\t" * 4000 + "\x7f",
    ],
    ids=[
        "oversized",
        "10k-entries",
        "400-entries",
        "non-ascii",
        "malformed",
        "huge-int",
        "long",
        "property-blanks",
        "two-property-blanks",
        "property-tabs",
    ],
)
def test_hostile_baggage_never_raises_and_is_cheap(value: str) -> None:
    """Hostile baggage: no error, no log, no scope from a bad value, under 1 ms.

    The parse's cost is this thread's CPU time: on a loaded machine a wall-clock
    figure also counts the slices other processes took.
    """
    import time

    import asynctrace as at

    before = at.carrier_stats()
    with capture_spans("all", propagate_scopes=True):
        best = float("inf")
        for _ in range(5):
            start = time.thread_time()
            with remote_trace_context({"traceparent": VALID, "baggage": value}) as remote:
                best = min(best, time.thread_time() - start)
                assert remote.valid
                assert at.current_task_id() is None
                assert not at.in_per_prompt_scope()
    assert best < 1e-3
    after = at.carrier_stats()
    assert sum(after.values()) > sum(before.values())


@pytest.mark.slow
def test_env_carries_the_scopes_to_a_subprocess() -> None:
    """inject_env → a real child process: its spans carry the caller's scopes only when on."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    child = Path(__file__).parent / "_scopes_child.py"

    def run(mode: str, *, per_prompt: bool, propagate: bool) -> Any:
        import asynctrace as at

        with capture_spans("all", propagate_scopes=propagate):
            with at.iteration_scope(12), at.task_scope(3), at.session_scope() as session:
                with umbrella_span("job", "parent") as parent:
                    if per_prompt:
                        with at.per_prompt_scope():
                            env = inject_env()
                    else:
                        env = inject_env()
        out = subprocess.run(
            [sys.executable, str(child), mode], env=env, capture_output=True, text=True, check=True
        )
        return json.loads(out.stdout), session, parent.get_span_context().trace_id

    result, session, trace_id = run("on", per_prompt=False, propagate=True)
    (span,) = result["spans"]
    assert span["trace_id"] == trace_id
    assert (span["rl.iteration"], span["rl.task_id"], span["rl.session_id"]) == (12, 3, session)
    result, _, _ = run("on", per_prompt=True, propagate=True)
    assert result["per_prompt"] is True
    assert result["spans"] == []  # per-prompt work, and per_prompt is off over there
    result, _, _ = run("on", per_prompt=True, propagate=False)
    (span,) = result["spans"]
    assert "rl.iteration" not in span
    assert result["per_prompt"] is False


def test_a_remote_context_left_in_another_context_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Entered in one context and left in another (a generator resumed elsewhere):
    OpenTelemetry's detach reports it, nothing raises; left where it was entered,
    the span context before it is back."""
    import contextvars

    remote = remote_trace_context({"traceparent": VALID})
    entered = contextvars.copy_context()
    entered.run(remote.__enter__)
    assert entered.run(current_trace_carrier)["traceparent"] == VALID
    contextvars.copy_context().run(remote.__exit__, None, None, None)
    assert any("detach" in record.getMessage().lower() for record in caplog.records)

    again = remote_trace_context({"traceparent": VALID})
    there = contextvars.copy_context()
    there.run(again.__enter__)
    there.run(again.__exit__, None, None, None)
    assert there.run(current_trace_carrier) == {}


def test_a_remote_trace_context_entered_twice_is_refused() -> None:
    """One object holds one token: a second entry (nested, or from another task) would
    overwrite it and leave the first entry's context attached for good; it raises."""
    remote = remote_trace_context({"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"})
    with remote:
        with pytest.raises(RuntimeError, match="already entered"):
            with remote:
                pass
    assert trace.get_current_span().get_span_context().span_id == 0
    with remote:  # exited: it may be entered again
        assert trace.get_current_span().get_span_context().span_id == int("2" * 16, 16)


def test_a_carrier_whose_truth_value_raises_is_no_carrier() -> None:
    """A numpy array, or an object whose ``__len__`` raises, handed in as a carrier: no
    carrier (nothing attached), never an exception into the caller."""
    np = pytest.importorskip("numpy")

    class Broken(dict):  # type: ignore[type-arg]
        def __len__(self) -> int:
            raise RuntimeError("boom")

    for carrier in (np.array([1, 2]), Broken(traceparent=f"00-{'1' * 32}-{'2' * 16}-01")):
        with remote_trace_context(carrier):  # type: ignore[arg-type]
            pass

    @accepts_trace_context
    def work(x: int) -> int:
        return x

    assert work(3, trace_carrier=np.array([1, 2])) == 3


_TP_FUTURE = "cc-" + "1" * 32 + "-" + "2" * 16 + "-01"


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (_TP_FUTURE + "-" + " " * 100_000 + "\r", False),  # blanks, then what ends no value
        (_TP_FUTURE + "-" + "\t" * 100_000 + "\r", False),
        (_TP_FUTURE + "-" + " \t" * 50_000 + "\n", False),
        (_TP_FUTURE + "-" + " " * 100_000, True),  # blanks at the end are allowed
        (_TP_FUTURE + " " * 100_000, True),
        (" " * 100_000 + _TP_FUTURE + "-x" + "\t" * 100_000, True),
        (" " * 100_000 + VALID[:-1] + "\r" + " " * 100_000, False),
        (VALID + "-" + " " * 100_000, False),  # version 00: nothing after the flags
    ],
)
def test_a_traceparent_with_a_long_run_of_blanks_is_read_in_linear_time(
    value: str, valid: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blanks around a ``traceparent`` are read once, however many: with the 512-character
    limit raised so that 200,000 reach the pattern, it returns at once (a pattern that
    could split them two ways takes a minute here), valid or not as W3C says."""
    import time

    from asynctrace import _carrier_read

    monkeypatch.setattr(_carrier_read, "_MAX_TRACEPARENT", 10**7)
    start = time.thread_time()
    parsed = _carrier_read.parse_traceparent(value)
    assert time.thread_time() - start < 5.0  # a hang, not a speed: linear is milliseconds
    assert (parsed is not None) == valid
    if parsed is not None:
        assert (parsed.trace_id, parsed.span_id, parsed.trace_flags) == (
            int("1" * 32, 16),
            int("2" * 16, 16),
            1,
        )


@pytest.mark.parametrize("tail", [" ", "\t", " \t"])
def test_a_traceparent_at_its_length_limit_reads_as_before(tail: str) -> None:
    """At the 512-character limit: blanks at the end are allowed, a CR after them is not."""
    from asynctrace._carrier_read import parse_traceparent

    pad = (511 - len(_TP_FUTURE) - 2) // len(tail)
    assert parse_traceparent(_TP_FUTURE + "-" + tail * pad + "\r") is None
    assert parse_traceparent(_TP_FUTURE + "-" + tail * pad) is not None
    assert parse_traceparent(_TP_FUTURE + "-" + tail * 512) is None  # over the limit


def _counted(carrier: object) -> tuple[bool, dict[str, int]]:
    """Whether *carrier* is valid, and what reading it added to ``carrier_stats()``."""
    import asynctrace as at

    before = at.carrier_stats()
    with remote_trace_context(carrier) as remote:  # type: ignore[arg-type]
        valid = remote.valid
    after = at.carrier_stats()
    return valid, {k: after[k] - before[k] for k in after if after[k] != before[k]}


class _Str(str):
    """A str subclass, with methods a reader must not call."""

    def strip(self, *args: Any) -> str:
        raise AssertionError("called")

    def __str__(self) -> str:
        raise AssertionError("called")


class _Headers:
    """A multi-value mapping (aiohttp's ``getall``): every value a header was given."""

    def __init__(self, *pairs: tuple[str, object]) -> None:
        self.pairs = pairs

    def getall(self, name: str, default: object = None) -> list[object] | object:
        found = [v for k, v in self.pairs if k.lower() == name]
        return found or default


class _Getter:
    """Anything with ``get``."""

    def __init__(self, **values: object) -> None:
        self.values = values

    def get(self, name: str) -> object:
        return self.values.get(name)


TS_OK = "vendor=1"


@pytest.mark.parametrize(
    ("carrier", "valid", "counted"),
    [
        ({"traceparent": VALID, "tracestate": TS_OK}, True, {}),
        ({"traceparent": VALID, "tracestate": " , ,"}, True, {}),  # empty: nothing discarded
        ({"tracestate": TS_OK}, False, {}),  # no traceparent: the tracestate is not looked at
        ({"traceparent": VALID.upper()}, False, {"traceparent_invalid": 1}),
        ({"traceparent": "garbage", "tracestate": TS_OK}, False, {
            "traceparent_invalid": 1, "tracestate_dropped": 1}),
        ({"traceparent": VALID, "Traceparent": VALID}, False, {"traceparent_invalid": 1}),
        ({"traceparent": VALID, "tracestate": "Bad Key=1"}, True, {"tracestate_dropped": 1}),
        ({"traceparent": VALID.encode()}, False, {"carrier_values_not_str": 1}),
        ({"traceparent": VALID, "baggage": b"k=v", "tracestate": 1}, True, {
            "carrier_values_not_str": 2}),
        ({"traceparent": None}, False, {}),  # None: no value
        ({"traceparent": _Str(VALID), "tracestate": _Str(TS_OK)}, True, {}),
        ({_Str("traceparent"): VALID}, True, {}),
        (_Headers(("traceparent", VALID), ("traceparent", VALID)), False, {
            "traceparent_invalid": 1}),
        (_Headers(("traceparent", VALID), ("tracestate", b"x=1")), True, {
            "carrier_values_not_str": 1}),
        (_Headers(("traceparent", _Str(VALID))), True, {}),
        (_Getter(traceparent=bytearray(VALID.encode())), False, {"carrier_values_not_str": 1}),
        (_Getter(traceparent=_Str(VALID)), True, {}),
        (_Getter(tracestate=TS_OK), False, {}),
    ],
)  # fmt: skip
def test_what_a_carrier_refuses_is_counted_never_logged(
    carrier: object, valid: bool, counted: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    """An invalid or repeated ``traceparent``, a discarded non-empty ``tracestate`` and a
    value that is not text are counted in ``carrier_stats()``; nothing is logged. A ``str``
    subclass is read as the text it holds, whichever kind of carrier brings it."""
    import logging

    with caplog.at_level(logging.DEBUG, logger="asynctrace"):
        assert _counted(carrier) == (valid, counted)
    assert caplog.records == []


def test_a_str_subclass_tracestate_travels_as_plain_text() -> None:
    """A ``str`` subclass's value is read as the text it holds, and sent on as such."""
    with remote_trace_context({"traceparent": _Str(VALID), "tracestate": _Str(TS_OK)}):
        assert current_trace_carrier() == {"traceparent": VALID, "tracestate": TS_OK}


def test_extract_env_counts_a_value_that_is_not_text() -> None:
    """A custom environment mapping with bytes in it: not read, counted."""
    import asynctrace as at

    before = at.carrier_stats()["carrier_values_not_str"]
    with extract_env({"TRACEPARENT": VALID.encode()}) as remote:  # type: ignore[dict-item]
        assert not remote.valid
    assert at.carrier_stats()["carrier_values_not_str"] == before + 1


@pytest.mark.parametrize("propagate", [False, True])
def test_inject_env_owns_baggage_only_with_propagate_scopes(propagate: bool) -> None:
    """With ``propagate_scopes`` off, ``BAGGAGE`` is the caller's and is left as it is;
    with it on, it is asynctrace's: set to the scopes, or removed when there are none."""
    import asynctrace as at

    env = {"PATH": "/usr/bin", "BAGGAGE": "tenant=acme", "TRACESTATE": "vendor=stale"}
    with capture_spans("all", propagate_scopes=propagate):
        with umbrella_span("job", "caller"):
            outside = inject_env(dict(env))
            with at.iteration_scope(4):
                inside = inject_env(dict(env))
    assert "TRACESTATE" not in outside  # stale: removed either way
    assert outside["TRACEPARENT"] == inside["TRACEPARENT"]
    if propagate:
        assert "BAGGAGE" not in outside
        assert inside["BAGGAGE"] == "asynctrace.iteration=4"
    else:
        assert outside["BAGGAGE"] == inside["BAGGAGE"] == "tenant=acme"
    outside_any = inject_env(dict(env))  # no span: the trace variables go
    assert outside_any.get("BAGGAGE") == "tenant=acme"
