"""Fuzz: arbitrary raw request headers through the ASGI middleware, in process.

Names and values are raw bytes as an ASGI server hands them over (any byte,
any case, repeated). Whatever they hold, the app's response is unchanged, the
handler runs exactly once, and it runs in the caller's trace exactly when one
well-formed ``traceparent`` came.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import _fuzz
import pytest
from _budget import examples
from asynctrace_contrib.fastapi import SERVER_GROUP, AsyncTraceMiddleware
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import asynctrace as at
from asynctrace.testing import capture_spans

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
_VALID = re.compile(rb"[ \t]*[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[^\r\n]*)?[ \t]*")

_names = st.sampled_from(
    [b"traceparent", b"TraceParent", b"tracestate", b"baggage", b"BAGGAGE", b"x-other"]
) | st.binary(max_size=14)
_values = st.one_of(
    st.just(f"00-{TRACE}-00f067aa0ba902b7-01".encode()),
    st.just(f"00-{TRACE}-00f067aa0ba902b7-00".encode()),
    st.builds(
        lambda p: f"{p}-{TRACE}-00f067aa0ba902b7-01".encode(), st.sampled_from(["01", "ff", "0"])
    ),
    st.just(b"asynctrace.iteration=7,asynctrace.per_prompt=1,k=v"),
    st.binary(max_size=60),
    st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
request_headers = st.lists(st.tuples(_names, _values), max_size=6)

BODY = b"unchanged"


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A bare ASGI app that records the context it runs in."""
    scope["seen"].append(trace.get_current_span().get_span_context())
    with at.managed_span("reward", "handler"):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": BODY})


async def _request(app: Any, headers: list[tuple[bytes, bytes]]) -> tuple[list[Any], list[Any]]:
    sent: list[Any] = []
    seen: list[Any] = []
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/x",
        "query_string": b"token=q",
        "headers": headers,
        "seen": seen,
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent, seen


@pytest.mark.fuzz
@pytest.mark.parametrize("trust_incoming", [True, False])
@pytest.mark.parametrize("groups", [f"all,{SERVER_GROUP}", "reward"])
def test_fuzz_raw_headers_never_change_the_response(trust_incoming: bool, groups: str) -> None:
    """Any raw headers: the same response, one handler call, the caller's trace only if valid."""
    app = AsyncTraceMiddleware(_app, trust_incoming=trust_incoming)
    loop = asyncio.new_event_loop()
    try:
        with capture_spans(groups, propagate_scopes=True) as captured:

            @settings(
                max_examples=examples(100, 10_000),
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            )
            @given(request_headers)
            def check(headers: list[tuple[bytes, bytes]]) -> None:
                sent, seen = loop.run_until_complete(_request(app, headers))
                assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
                assert sent[1]["body"] == BODY
                (context,) = seen
                parents = [v for n, v in headers if n.lower() == b"traceparent"]
                valid = len(parents) == 1 and _VALID.fullmatch(parents[0]) is not None
                continued = context.is_valid and format(context.trace_id, "032x") == TRACE
                if trust_incoming:
                    assert not continued or valid, headers
                else:
                    assert not continued, headers  # a new trace, or none
                captured.clear()

            _fuzz.run(check)
    finally:
        loop.close()


def test_trace_headers_are_read_whatever_their_case_or_buffer_type() -> None:
    """Lower-case bytes (what servers give), capitals, bytearray and memoryview names
    and values: each trace header is read, repeated ones combined in order."""
    from asynctrace_contrib.fastapi._request import request_headers as read

    parent = f"00-{TRACE}-00f067aa0ba902b7-01"
    headers: list[tuple[Any, Any]] = [
        (b"x-other", b"1"),
        (b"TraceParent", parent.encode()),
        (bytearray(b"tracestate"), b"a=1"),
        (memoryview(b"BAGGAGE"), bytearray(b"k=v")),
        (b"tracestate", memoryview(b"b=2")),
        (b"baggage", b"m=w"),
        (b"user-agent", b"x"),
        (b"a-very-long-header-name", b"traceparent"),
        ("traceparent", b"a str name is not ASGI: skipped"),
        (b"Host", b"h.example:81"),
        (bytearray(b"X-Forwarded-Host"), b"edge.example"),
        (b"host", b"second.example"),
    ]
    named: list[str | None] = [None, None, None, None]
    assert read({"headers": headers}, named=named) == {
        "traceparent": parent,
        "tracestate": "a=1,b=2",
        "baggage": "k=v,m=w",
    }
    assert named == [None, "edge.example", "h.example:81", "x"]  # the first of each
    assert read({"headers": headers}, trust=False) == {
        "traceparent": parent,
        "tracestate": "a=1,b=2",
    }


def test_a_traceparent_sent_twice_starts_a_new_trace_and_is_counted() -> None:
    """Two ``traceparent`` headers are invalid (W3C: start a new trace): the handler runs
    in a trace of its own, and the refusal is counted with the tracestate that came."""
    before = at.carrier_stats()
    headers = [
        (b"traceparent", f"00-{TRACE}-00f067aa0ba902b7-01".encode()),
        (b"tracestate", b"a=1"),
        (b"traceparent", f"00-{TRACE}-00f067aa0ba902b8-01".encode()),
    ]
    with capture_spans(f"all,{SERVER_GROUP}"):
        sent, seen = asyncio.run(
            _request(AsyncTraceMiddleware(_app, trust_incoming=True), headers)
        )
    assert sent[-1]["body"] == BODY
    (context,) = seen
    assert f"{context.trace_id:032x}" != TRACE
    after = at.carrier_stats()
    assert after["traceparent_invalid"] == before["traceparent_invalid"] + 1
    assert after["tracestate_dropped"] == before["tracestate_dropped"] + 1


def test_a_traceparent_sent_twice_never_parents_under_another_layers_server_span() -> None:
    """With another instrumentation's SERVER span current (OpenTelemetry's middleware
    outside), the handler runs under that span, whatever two ``traceparent`` headers say."""
    headers = [
        (b"traceparent", f"00-{TRACE}-00f067aa0ba902b7-01".encode()),
        (b"traceparent", f"00-{TRACE}-00f067aa0ba902b8-01".encode()),
    ]
    with capture_spans(f"all,{SERVER_GROUP}"):
        outer = TracerProvider().get_tracer("another.instrumentation")  # its own SDK

        async def under_outer_server_span() -> tuple[list[Any], list[Any], Any]:
            with outer.start_as_current_span("GET", kind=trace.SpanKind.SERVER) as span:
                sent, seen = await _request(AsyncTraceMiddleware(_app), headers)
            return sent, seen, span.get_span_context()

        sent, seen, server = asyncio.run(under_outer_server_span())
    assert sent[-1]["body"] == BODY
    (context,) = seen
    assert context.trace_id == server.trace_id != int(TRACE, 16)


@pytest.mark.parametrize(
    ("forwarded", "forwarded_host", "host", "expected"),
    [
        (None, None, "h.example", ("h.example", 80)),
        (None, None, "h.example:", ("h.example", 80)),
        (None, None, "h.example:8080", ("h.example", 8080)),
        (None, None, "[::1]:9", ("::1", 9)),
        (None, None, "[", None),
        (None, None, "[]", None),
        (None, None, "[::1", None),
        (None, None, "[::1]x", None),
        (None, None, "::1", None),  # an IPv6 address needs its brackets
        (None, None, "h:99999", None),
        (None, None, "h:" + "9" * 5000, None),  # int() would refuse the digits
        (None, None, "h:+80", None),
        (None, None, "h:٣", None),  # a digit, but not an ASCII one
        (None, None, ":80", None),
        (None, None, "user@h.example", None),
        (None, None, "h.example/x", None),
        ("for=1.2.3.4", None, "h.example", ("h.example", 80)),  # no host in it
        ('host="[::2]:7";proto=https, host=second', None, None, ("::2", 7)),
        ("HOST=edge", None, None, ("edge", 80)),
        ("host=", "x.example", None, ("x.example", 80)),
        (None, " , later", "h.example", ("h.example", 80)),
    ],
)
def test_the_server_authority_parser_passes_over_what_does_not_parse(
    forwarded: str | None,
    forwarded_host: str | None,
    host: str | None,
    expected: tuple[str, int] | None,
) -> None:
    """``Forwarded``/``X-Forwarded-Host``/``Host`` values: each either names a host (and a
    port in range) or is passed over; nothing raises, whatever the bytes."""
    from asynctrace_contrib._http_values import request_authority

    assert request_authority(forwarded, forwarded_host, host, "http") == expected


@pytest.mark.parametrize(("setting", "known"), [("", True), ("  ", True), ("GET,BREW", False)])
def test_the_known_methods_variable_replaces_the_list_unless_empty(
    setting: str, known: bool
) -> None:
    """``OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS`` replaces the known methods (read at
    import); set but empty, it is as if unset, as every variable here."""
    import os
    import subprocess
    import sys

    code = (
        "from asynctrace_contrib._http_values import method_attributes as m;"
        "print(m('POST')[0], m('BREW')[0])"
    )
    env = {**os.environ, "OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS": setting}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == (["POST", "HTTP"] if known else ["HTTP", "BREW"])
