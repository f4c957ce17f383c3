"""W3C Trace Context Level 1 across the HTTP hop: a real uvicorn server calling onward.

Each case sends raw request headers to a FastAPI app (asynctrace's middleware),
whose handler calls a second local server through asynctrace's aiohttp client;
the second server records the headers it receives. The cases follow the W3C
test harness (w3c/trace-context, test/test.py).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from asynctrace_contrib.aiohttp_client import client_middleware
from asynctrace_contrib.fastapi import SERVER_GROUP, instrument_fastapi
from fastapi import FastAPI

from asynctrace.testing import capture_spans

TRACE = "12345678901234567890123456789012"
PARENT = "1234567890123456"
TP00 = f"00-{TRACE}-{PARENT}-00"
TP01 = f"00-{TRACE}-{PARENT}-01"
KEY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-*/"
VALUE_CHARS = "".join(map(chr, [*range(0x20, 0x2C), *range(0x2D, 0x3D), *range(0x3E, 0x7F)]))


@dataclass
class Case:
    """Incoming headers and what the onward request must carry."""

    id: str
    headers: list[tuple[str, str]]
    continued: bool  # same trace id (else a new trace)
    sampled: bool | None = None  # the onward sampled flag (None: not checked)
    tracestate: str | None = None  # the onward tracestate, exactly (None: absent)
    incoming: str = TRACE  # the trace id the headers name, in lower case


def members(prefix: str, first: int, last: int) -> str:
    """``bar01=01,...`` for the numbers first..last."""
    return ",".join(f"{prefix}{i:02d}={i:02d}" for i in range(first, last + 1))


CASES = [
    Case("no-headers", [], continued=False),
    Case("sampled", [("traceparent", TP01)], True, sampled=True),
    Case("unsampled", [("traceparent", TP00)], True, sampled=False),
    Case("reserved-flags", [("traceparent", f"00-{TRACE}-{PARENT}-fc")], True, sampled=False),
    Case("random-flag", [("traceparent", f"00-{TRACE}-{PARENT}-03")], True, sampled=True),
    Case("random-flag-unsampled", [("traceparent", f"00-{TRACE}-{PARENT}-02")], True, False),
    Case("duplicated", [("traceparent", TP01), ("traceparent", TP01)], continued=False),
    Case(
        "duplicated-different",
        [("traceparent", f"00-{TRACE[:-1]}1-{PARENT}-01"), ("traceparent", TP01)],
        continued=False,
    ),
    Case("name-trace-parent", [("trace-parent", TP01)], continued=False),
    Case("name-trace.parent", [("trace.parent", TP01)], continued=False),
    Case("name-TraceParent", [("TraceParent", TP01)], True, sampled=True),
    Case("name-TrAcEpArEnT", [("TrAcEpArEnT", TP01)], True, sampled=True),
    Case("name-TRACEPARENT", [("TRACEPARENT", TP01)], True, sampled=True),
    Case("v00-trailing-dot", [("traceparent", TP01 + ".")], continued=False),
    Case("v00-future-fields", [("traceparent", TP01 + "-what-the-future-will-be-like")], False),
    Case("vcc", [("traceparent", f"cc-{TRACE}-{PARENT}-01")], True, sampled=True),
    Case(
        "vcc-future-fields",
        [("traceparent", f"cc-{TRACE}-{PARENT}-01-what-the-future-will-be-like")],
        True,
        sampled=True,
    ),
    Case("vcc-no-dash", [("traceparent", f"cc-{TRACE}-{PARENT}-01.what-the-future")], False),
    Case("vff", [("traceparent", f"ff-{TRACE}-{PARENT}-01")], continued=False),
    Case("version-.0", [("traceparent", f".0-{TRACE}-{PARENT}-01")], continued=False),
    Case("version-0.", [("traceparent", f"0.-{TRACE}-{PARENT}-01")], continued=False),
    Case("version-000", [("traceparent", f"000-{TRACE}-{PARENT}-01")], continued=False),
    Case("version-0", [("traceparent", f"0-{TRACE}-{PARENT}-01")], continued=False),
    Case(
        "upper-hex",
        [("traceparent", f"00-{TRACE[:-1]}A-{PARENT}-01")],
        continued=False,
        incoming=f"{TRACE[:-1]}a",
    ),
    Case("trace-id-zero", [("traceparent", f"00-{'0' * 32}-{PARENT}-01")], continued=False),
    Case("trace-id-illegal", [("traceparent", f"00-.{TRACE[1:]}-{PARENT}-01")], False),
    Case("trace-id-long", [("traceparent", f"00-{TRACE}3-{PARENT}-01")], continued=False),
    Case("trace-id-short", [("traceparent", f"00-{TRACE[:-1]}-{PARENT}-01")], False),
    Case("parent-id-zero", [("traceparent", f"00-{TRACE}-{'0' * 16}-01")], continued=False),
    Case("parent-id-illegal", [("traceparent", f"00-{TRACE}-{PARENT[:-1]}.-01")], False),
    Case("parent-id-long", [("traceparent", f"00-{TRACE}-{PARENT}7-01")], continued=False),
    Case("parent-id-short", [("traceparent", f"00-{TRACE}-{PARENT[:-1]}-01")], False),
    Case("flags-illegal", [("traceparent", f"00-{TRACE}-{PARENT}-.0")], continued=False),
    Case("flags-long", [("traceparent", f"00-{TRACE}-{PARENT}-001")], continued=False),
    Case("flags-short", [("traceparent", f"00-{TRACE}-{PARENT}-1")], continued=False),
    Case("traceparent-ows", [("traceparent", f"\t {TP01} \t")], True, sampled=True),
    Case("state-without-parent", [("tracestate", "foo=1,bar=2")], continued=False),
    Case(
        "state", [("traceparent", TP00), ("tracestate", "foo=1,bar=2")], True, False, "foo=1,bar=2"
    ),
    Case("state-name-trace-state", [("traceparent", TP00), ("trace-state", "foo=1")], True),
    Case(
        "state-name-TrAcEsTaTe",
        [("traceparent", TP00), ("TrAcEsTaTe", "foo=1")],
        True,
        False,
        "foo=1",
    ),
    Case(
        "state-name-TRACESTATE",
        [("traceparent", TP00), ("TRACESTATE", "foo=1")],
        True,
        False,
        "foo=1",
    ),
    Case("state-empty", [("traceparent", TP00), ("tracestate", "")], True, False, None),
    Case(
        "state-empty-after",
        [("traceparent", TP00), ("tracestate", "foo=1"), ("tracestate", "")],
        True,
        False,
        "foo=1",
    ),
    Case(
        "state-empty-before",
        [("traceparent", TP00), ("tracestate", ""), ("tracestate", "foo=1")],
        True,
        False,
        "foo=1",
    ),
    Case(
        "state-several-headers",
        [
            ("traceparent", TP00),
            ("tracestate", "foo=1,bar=2"),
            ("tracestate", "rojo=1,congo=2"),
            ("tracestate", "baz=3"),
        ],
        True,
        False,
        "foo=1,bar=2,rojo=1,congo=2,baz=3",
    ),
    Case("state-duplicated-key", [("traceparent", TP00), ("tracestate", "foo=1,foo=1")], True),
    Case("state-duplicated-value", [("traceparent", TP00), ("tracestate", "foo=1,foo=2")], True),
    Case(
        "state-duplicated-across-headers",
        [("traceparent", TP00), ("tracestate", "foo=1"), ("tracestate", "foo=2")],
        True,
    ),
    Case(
        "state-all-characters",
        [("traceparent", TP00), ("tracestate", f"{KEY_CHARS}={VALUE_CHARS}")],
        True,
        False,
        f"{KEY_CHARS}={VALUE_CHARS}",
    ),
    Case(
        "state-all-characters-vendor",
        [("traceparent", TP00), ("tracestate", f"{KEY_CHARS}@a-z0-9_-*/={VALUE_CHARS}")],
        True,
        False,
        f"{KEY_CHARS}@a-z0-9_-*/={VALUE_CHARS}",
    ),
    Case(
        "state-ows",
        [("traceparent", TP00), ("tracestate", "foo=1 \t , \t bar=2, \t baz=3")],
        True,
        False,
        "foo=1,bar=2,baz=3",
    ),
    Case(
        "state-ows-tabs",
        [("traceparent", TP00), ("tracestate", "\t foo=1 \t")],
        True,
        False,
        "foo=1",
    ),
    Case("state-key-space", [("traceparent", TP00), ("tracestate", "foo =1")], True),
    Case("state-key-upper", [("traceparent", TP00), ("tracestate", "FOO=1")], True),
    Case("state-key-dot", [("traceparent", TP00), ("tracestate", "foo.bar=1")], True),
    Case("state-vendor-empty", [("traceparent", TP00), ("tracestate", "foo@=1,bar=2")], True),
    Case("state-vendor-leading-at", [("traceparent", TP00), ("tracestate", "@foo=1,bar=2")], True),
    Case(
        "state-vendor-double-at", [("traceparent", TP00), ("tracestate", "foo@@bar=1,bar=2")], True
    ),
    Case(
        "state-vendor-two-ats",
        [("traceparent", TP00), ("tracestate", "foo@bar@baz=1,bar=2")],
        True,
    ),
    Case(
        "state-32-members",
        [
            ("traceparent", TP00),
            ("tracestate", members("bar", 1, 10)),
            ("tracestate", members("bar", 11, 20)),
            ("tracestate", members("bar", 21, 32)),
        ],
        True,
        False,
        members("bar", 1, 32),
    ),
    Case(
        "state-33-members",
        [
            ("traceparent", TP00),
            ("tracestate", members("bar", 1, 10)),
            ("tracestate", members("bar", 11, 20)),
            ("tracestate", members("bar", 21, 33)),
        ],
        True,
    ),
    Case(
        "state-key-256",
        [("traceparent", TP00), ("tracestate", "z" * 256 + "=1")],
        True,
        False,
        "z" * 256 + "=1",
    ),
    Case(
        "state-key-257", [("traceparent", TP00), ("tracestate", "foo=1," + "z" * 257 + "=1")], True
    ),
    Case(
        "state-tenant-241-vendor-14",
        [("traceparent", TP00), ("tracestate", "t" * 241 + "@" + "v" * 14 + "=1")],
        True,
        False,
        "t" * 241 + "@" + "v" * 14 + "=1",
    ),
    Case("state-tenant-242", [("traceparent", TP00), ("tracestate", "t" * 242 + "@v=1")], True),
    Case("state-vendor-15", [("traceparent", TP00), ("tracestate", "t@" + "v" * 15 + "=1")], True),
    Case(
        "state-value-256",
        [("traceparent", TP00), ("tracestate", "foo=" + "v" * 256)],
        True,
        False,
        "foo=" + "v" * 256,
    ),
    Case("state-value-257", [("traceparent", TP00), ("tracestate", "foo=" + "v" * 257)], True),
    Case("state-value-equals", [("traceparent", TP00), ("tracestate", "foo=bar=baz")], True),
    Case("state-value-empty", [("traceparent", TP00), ("tracestate", "foo=,bar=3")], True),
]


def send_raw(url: str, headers: list[tuple[str, str]]) -> bytes:
    """A raw HTTP/1.1 GET carrying exactly *headers* (repeats and odd casing included)."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    path = "/" + url.split("/", 3)[3]
    lines = b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            b"GET "
            + path.encode()
            + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + lines
            + b"\r\n"
        )
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def recorder() -> tuple[web.Application, list[list[tuple[str, str]]]]:
    """A server that records the headers of every request it receives."""
    seen: list[list[tuple[str, str]]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append([(k, v) for k, v in request.headers.items()])
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/record", record)
    return app, seen


def onward_app(record_url: str) -> FastAPI:
    """A FastAPI app whose handler calls *record_url* through asynctrace's client."""
    app = FastAPI()

    @app.get("/hop")
    async def hop() -> dict[str, Any]:
        async with aiohttp.ClientSession(middlewares=(client_middleware(),)) as session:
            async with session.get(record_url) as response:
                return {"status": response.status}

    instrument_fastapi(app)
    return app


def header_values(headers: list[tuple[str, str]], name: str) -> list[str]:
    """Every value of header *name*, case-insensitively."""
    return [v for k, v in headers if k.lower() == name]


def test_processing_model_table(asgi_server: Any, aiohttp_server: Any) -> None:
    """Every case: the onward trace id, parent relation, flags and tracestate are the spec's."""
    app, seen = recorder()
    record_url = aiohttp_server(app) + "/record"
    url = asgi_server(onward_app(record_url)) + "/hop"
    failures = []
    with capture_spans(SERVER_GROUP):
        for case in CASES:
            before = len(seen)
            response = send_raw(url, case.headers)
            assert b" 200 " in response.split(b"\r\n")[0], case.id
            assert len(seen) == before + 1, case.id
            onward = seen[-1]
            (traceparent,) = header_values(onward, "traceparent")
            version, trace_id, parent_id, flags_hex = traceparent.split("-")
            flags = int(flags_hex, 16)
            states = header_values(onward, "tracestate")
            got = {
                "continued": trace_id == case.incoming,
                "sampled": bool(flags & 1),
                "tracestate": states[0] if states else None,
            }
            want: dict[str, Any] = {"continued": case.continued, "tracestate": case.tracestate}
            want["sampled"] = case.sampled if case.sampled is not None else got["sampled"]
            if not case.continued:
                want["sampled"] = True  # a new root, recorded
            # Level 1: the sampled flag is the only one; a vendor sets the others to zero
            if got != want or version != "00" or parent_id == PARENT or flags & ~0x01:
                failures.append((case.id, traceparent, got, want))
    assert not failures, failures


def test_unsampled_parent_is_continued_without_recording(
    asgi_server: Any, aiohttp_server: Any
) -> None:
    """Flags 00: no span is recorded, and the onward call keeps the trace id and flags."""
    app, seen = recorder()
    url = asgi_server(onward_app(aiohttp_server(app) + "/record")) + "/hop"
    with capture_spans("all") as captured:
        send_raw(url, [("traceparent", TP00), ("tracestate", "foo=1")])
    assert captured.spans == []
    onward = seen[-1]
    assert header_values(onward, "traceparent")[0].split("-")[1] == TRACE
    assert header_values(onward, "traceparent")[0].endswith("-00")
    assert header_values(onward, "tracestate") == ["foo=1"]


def test_ids_pass_through_a_gated_off_server(asgi_server: Any, aiohttp_server: Any) -> None:
    """http_server off: no server span, the onward call carries the caller's own parent."""
    app, seen = recorder()
    url = asgi_server(onward_app(aiohttp_server(app) + "/record")) + "/hop"
    with capture_spans("job"):
        send_raw(url, [("traceparent", f"00-{TRACE}-{PARENT}-fd"), ("tracestate", "foo=1")])
    (traceparent,) = header_values(seen[-1], "traceparent")
    assert traceparent == f"00-{TRACE}-{PARENT}-01"  # reserved flags are not passed on
    assert header_values(seen[-1], "tracestate") == ["foo=1"]


@pytest.mark.parametrize("count", [1, 3])
def test_sent_by_asyncio_loop(count: int, asgi_server: Any, aiohttp_server: Any) -> None:
    """Concurrent requests each keep their own trace (no context bleeds between them)."""
    app, seen = recorder()
    url = asgi_server(onward_app(aiohttp_server(app) + "/record")) + "/hop"
    ids = [f"{i + 1:032x}" for i in range(count)]

    async def main() -> None:
        async with aiohttp.ClientSession() as session:

            async def one(trace_id: str) -> None:
                headers = {"traceparent": f"00-{trace_id}-{PARENT}-01"}
                async with session.get(url, headers=headers) as response:
                    assert response.status == 200

            await asyncio.gather(*(one(i) for i in ids))

    with capture_spans(SERVER_GROUP):
        asyncio.run(main())
    onward = sorted(header_values(h, "traceparent")[0].split("-")[1] for h in seen)
    assert onward == sorted(ids)


def test_unsampled_parent_keeps_the_handlers_spans_in_its_trace(
    asgi_server: Any, aiohttp_server: Any
) -> None:
    """Flags 00 with http_server on: the handler's own span is not a new sampled root.

    It inherits the caller's trace and decision: nothing is recorded, and the
    onward call carries the caller's trace id with flags 00. With flags 01 the
    same handler span is recorded in the caller's trace, under the SERVER span.
    """
    from asynctrace import managed_span

    app, seen = recorder()
    record_url = aiohttp_server(app) + "/record"
    server = FastAPI()

    @server.get("/hop")
    async def hop() -> dict[str, Any]:
        with managed_span("reward", "env.step"):
            async with aiohttp.ClientSession(middlewares=(client_middleware(),)) as session:
                async with session.get(record_url) as response:
                    return {"status": response.status}

    instrument_fastapi(server)
    url = asgi_server(server) + "/hop"
    with capture_spans("all") as captured:
        send_raw(url, [("traceparent", TP00)])
        assert captured.spans == []
        (onward,) = header_values(seen[-1], "traceparent")
        assert onward.split("-")[1] == TRACE
        assert onward.endswith("-00")
        send_raw(url, [("traceparent", TP01)])
    by_name = {span.name: span for span in captured.spans}
    step, server_span = by_name["env.step"], by_name["GET /hop"]
    assert step.context.trace_id == server_span.context.trace_id == int(TRACE, 16)
    assert step.parent is not None
    assert step.parent.span_id == server_span.context.span_id
