"""aiohttp client: a URL inside a URL's path keeps no userinfo; resends (aiohttp's retry of
a stale pooled connection, redirect hops) carry http.request.resend_count; a dropped
streamed response's span ends when its session closes; header names holding secrets
are recorded REDACTED, while the words only header names make secret (pin, pass, cert...)
leave text and payload keys alone; an unrelated request between two attempts (a token
fetched) leaves the resend count be; a percent-encoded path without a URL takes the fast
path. Requests go to real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import warnings
import weakref
from collections.abc import Coroutine, Iterator
from typing import Any

import aiohttp
import pytest
import yarl
from aiohttp import web
from asynctrace_contrib._http import DEFAULT_SECRET_KEYS, SecretKeys, redact_url, url_secrets
from asynctrace_contrib.aiohttp_client import _resends, client_middleware
from asynctrace_contrib.aiohttp_client._attributes import url_attributes
from opentelemetry.trace import StatusCode

import asynctrace as at
from asynctrace._payloads import plain_payload
from asynctrace.testing import CapturedSpans

SECRET = "S3CRETPW"


def attrs(span: Any) -> dict[str, Any]:
    """A span's attributes as a dict."""
    return dict(span.attributes or {})


def recorded(span: Any) -> str:
    """Everything a span records, as one string to search."""
    return repr(attrs(span)) + repr([dict(e.attributes or {}) for e in span.events])


def app() -> web.Application:
    """/fail/...: 500; /r0 -> /r1 -> /ok: redirects; /stream: a slow body; else 200."""

    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=500)

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def r0(request: web.Request) -> web.Response:
        raise web.HTTPFound("/r1")

    async def r1(request: web.Request) -> web.Response:
        raise web.HTTPFound("/ok")

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(40):
            await response.write(b"x" * 100)
            await asyncio.sleep(0.05)
        await response.write_eof()
        return response

    application = web.Application()
    application.router.add_get("/r0", r0)
    application.router.add_get("/r1", r1)
    application.router.add_get("/stream", stream)
    application.router.add_get("/fail/{tail:.*}", fail)
    application.router.add_get("/{tail:.*}", ok)
    return application


# -- 1. a URL inside the path -------------------------------------------------------------

# As sent; as yarl normalises the percent-encoded form; percent-encoded kept as given
# (no "@" left in it); and one nobody's text redaction reads (":" raw, "@" encoded).
PROXY_PATHS = [
    f"/proxy/http://alice:{SECRET}@internal.example/data",
    f"/proxy/http%3A%2F%2Falice%3A{SECRET}%40internal.example%2Fdata",
    f"/proxy/http:%2F%2Falice:{SECRET}%40internal.example%2Fdata",
    f"/proxy/http%253A%252F%252Falice%253A{SECRET}%2540internal.example%252Fdata",
]


@pytest.mark.parametrize("path", PROXY_PATHS)
@pytest.mark.parametrize("encoded", [False, True])
def test_a_url_in_the_path_keeps_no_userinfo(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans, path: str, encoded: bool
) -> None:
    """url.full, and the message of the error raise_for_status quotes the URL in, hold
    neither the user nor the password of a URL inside the path."""
    base = aiohttp_server(app())
    url = yarl.URL(base + "/fail" + path, encoded=encoded)

    async def main() -> None:
        async with aiohttp.ClientSession(raise_for_status=True, **traced()) as session:
            with pytest.raises(aiohttp.ClientResponseError):
                async with session.get(url):
                    pass

    asyncio.run(main())
    (client,) = spans.by_name("GET")
    assert SECRET not in recorded(client)
    assert "alice" not in attrs(client)["url.full"]
    assert attrs(client)["url.full"].startswith(base + "/fail/proxy/http")


@pytest.mark.parametrize("path", PROXY_PATHS)
def test_url_secrets_and_redact_url_cover_a_url_in_the_path(path: str) -> None:
    """The password is one of the URL's secrets, as written in it; redact_url drops it."""
    url = "http://gw.example" + path
    assert SECRET in url_secrets(url, SecretKeys(DEFAULT_SECRET_KEYS))
    assert SECRET not in redact_url(url)
    assert "alice" not in redact_url(url)


@pytest.mark.parametrize(
    "path",
    ["/proxy/http://internal/data/token=abc123", "/proxy/http://internal/login/password:abc123"],
)
def test_a_raw_url_in_the_path_is_redacted_without_userinfo_or_query(path: str) -> None:
    """A URL in the path as sent (no ``@``, ``?`` or ``%`` in the whole URL) takes the
    slow path too: its secrets go, as the server span's path loses them."""
    url = "http://gw.example" + path
    assert "abc123" not in redact_url(url)
    assert (
        "abc123"
        not in url_attributes("GET", yarl.URL(url), SecretKeys(DEFAULT_SECRET_KEYS))["url.full"]
    )


def test_a_path_without_a_url_stays_as_sent() -> None:
    """Percent-encoding alone changes nothing; a URL in the path without secrets neither."""
    for url in (
        "http://h/files/my%20doc.txt",
        "http://h/proxy/http%3A%2F%2Finternal%2Fdata",
        "http://h/proxy/http://internal/data",
    ):
        assert redact_url(url) == url
        assert url_secrets(url, SecretKeys(DEFAULT_SECRET_KEYS)) == set()


def test_a_percent_encoded_path_without_a_url_takes_the_fast_path() -> None:
    """No parsing for %20 or %40 alone: the very string given comes back, where the
    slow path builds a new one; a colon encoded once or twice still takes it."""
    for url in (
        "http://h:8080/v1/objects/my%20file.txt",
        "http://h:8080/v1/users/a%40b.com/profile",
        "http://h/a%2Fb/c%2Fd",
    ):
        assert redact_url(url) is url
    for url in (
        "http://h/proxy/http%3a%2f%2finternal%2Fdata",
        "http://h/proxy/http%253A%252F%252Finternal",
        "http://h/proxy/http:%2F%2Finternal",
        "http://h/proxy/http://internal/x%20y",
    ):
        assert redact_url(url) is not url
        assert redact_url(url) == url  # nothing secret in them: as sent


# -- 2. resends ---------------------------------------------------------------------------


async def stale_keepalive_server() -> tuple[asyncio.AbstractServer, str]:
    """Answers the first request of each connection, keeping it open; closes it, without
    an answer, at the second: a pooled connection gone stale as the client reuses it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")  # the second request: not answered
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def test_aiohttp_retry_of_a_stale_connection_is_a_resend(
    traced: Any, spans: CapturedSpans
) -> None:
    """Middleware form: the failed attempt (ERROR) then the resend, resend_count 1; the
    next request is a first attempt again. TraceConfig form: one span per request."""
    kwargs = traced()

    async def main() -> list[int]:
        server, url = await stale_keepalive_server()
        statuses = []
        async with server, aiohttp.ClientSession(**kwargs) as session:
            for path in ("/a", "/b", "/c"):
                async with session.get(url + path) as response:
                    await response.read()
                    statuses.append(response.status)
        return statuses

    assert asyncio.run(main()) == [200, 200, 200]
    got = [
        (
            attrs(s)["url.full"].rpartition("/")[2],
            attrs(s).get("http.response.status_code"),
            s.status.status_code,
            attrs(s).get("http.request.resend_count"),
        )
        for s in spans.by_name("GET")
    ]
    if "middlewares" in kwargs:
        assert got == [
            ("a", 200, StatusCode.UNSET, None),
            ("b", None, StatusCode.ERROR, None),  # the stale connection: it did fail
            ("b", 200, StatusCode.UNSET, 1),
            ("c", None, StatusCode.ERROR, None),
            ("c", 200, StatusCode.UNSET, 1),
        ]
    else:
        assert got == [
            ("a", 200, StatusCode.UNSET, None),
            ("b", 200, StatusCode.UNSET, None),
            ("c", 200, StatusCode.UNSET, None),
        ]


def test_redirect_hops_are_resends(traced: Any, aiohttp_server: Any, spans: CapturedSpans) -> None:
    """Middleware form: a span per hop, the second and third with resend_count 1 and 2;
    a request after them has none. TraceConfig form: one span for the whole chain."""
    url = aiohttp_server(app())
    kwargs = traced()

    async def main() -> None:
        async with aiohttp.ClientSession(**kwargs) as session:
            async with session.get(url + "/r0") as response:
                assert await response.text() == "ok"
            async with session.get(url + "/after") as response:
                await response.read()

    asyncio.run(main())
    got = [
        (
            attrs(s)["url.full"].rpartition("/")[2],
            attrs(s)["http.response.status_code"],
            attrs(s).get("http.request.resend_count"),
        )
        for s in spans.by_name("GET")
    ]
    if "middlewares" in kwargs:
        assert got == [("r0", 302, None), ("r1", 302, 1), ("ok", 200, 2), ("after", 200, None)]
    else:
        assert got == [("r0", 200, None), ("after", 200, None)]


def test_a_retry_middleware_resending_one_request_counts_it(
    aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """A middleware outside ours sending one request object three times: 1 and 2."""
    url = aiohttp_server(app())

    async def retry(request: Any, handler: Any) -> Any:
        for _ in range(2):
            response = await handler(request)
            if response.status < 500:
                return response
            response.release()
        return await handler(request)

    async def main() -> None:
        async with aiohttp.ClientSession(middlewares=(retry, client_middleware())) as session:
            async with session.get(url + "/fail/x") as response:
                await response.read()

    asyncio.run(main())
    counts = [attrs(s).get("http.request.resend_count") for s in spans.by_name("GET")]
    assert counts == [None, 1, 2]


@pytest.fixture
def no_pending_attempts() -> Iterator[None]:
    """Starts and ends with no session call remembered as failed or redirected."""
    gc.collect()
    _resends.PENDING.clear()
    yield
    gc.collect()
    _resends.PENDING.clear()


def test_a_token_fetched_between_attempts_keeps_the_resend_count(
    aiohttp_server: Any, spans: CapturedSpans, no_pending_attempts: None
) -> None:
    """A retry middleware outside ours that, on a 401, fetches a new token through
    another traced session and resends: the resend has resend_count 1, the token request
    none; the session calls gone, nothing of them is remembered."""
    state = {"token": "old"}

    async def api(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer new":
            return web.Response(status=401)
        return web.Response(text="ok")

    async def token(request: web.Request) -> web.Response:
        return web.Response(text="new")

    application = web.Application()
    application.router.add_get("/api", api)
    application.router.add_post("/token", token)
    base = aiohttp_server(application)

    async def main() -> None:
        async with aiohttp.ClientSession(middlewares=(client_middleware(),)) as auth:

            async def refresh(request: Any, handler: Any) -> Any:
                request.headers["Authorization"] = f"Bearer {state['token']}"
                response = await handler(request)
                if response.status == 401:
                    response.release()
                    async with auth.post(base + "/token") as got:  # traced
                        state["token"] = await got.text()
                    request.headers["Authorization"] = f"Bearer {state['token']}"
                    response = await handler(request)
                return response

            middlewares = (refresh, client_middleware())
            async with aiohttp.ClientSession(middlewares=middlewares) as session:
                for _ in range(2):  # the second: a first attempt, answered at once
                    async with session.get(base + "/api") as response:
                        assert await response.text() == "ok"

    asyncio.run(main())
    got = [
        (
            s.name,
            attrs(s)["http.response.status_code"],
            attrs(s).get("http.request.resend_count"),
        )
        for s in spans.spans
        if s.name in ("GET", "POST")
    ]
    assert got == [("GET", 401, None), ("POST", 200, None), ("GET", 200, 1), ("GET", 200, None)]
    gc.collect()
    # the collected calls left with their entries; a call not weakly referenceable (an
    # aiohttp timer on some builds) is held until newer ones push it out
    assert all(not isinstance(entry[0], weakref.ref) for entry in _resends.PENDING.values())


def test_failed_attempts_remembered_are_bounded(
    spans: CapturedSpans, no_pending_attempts: None
) -> None:
    """Calls that fail and are kept alive: at most _MAX_CALLS remembered, the oldest go
    first; the newest still counts its resend."""

    class Request:  # a ClientRequest's share in it: the call's timer
        def __init__(self) -> None:
            self._timer = aiohttp.helpers.TimerNoop()

    requests = [Request() for _ in range(_resends._MAX_CALLS + 50)]
    for request in requests:
        _resends.attempted(request)
    assert len(_resends.PENDING) == _resends._MAX_CALLS
    newest = spans.provider.get_tracer("t").start_span("newest")
    _resends.count_resend(newest, requests[-1])
    newest.end()
    oldest = spans.provider.get_tracer("t").start_span("oldest")
    _resends.count_resend(oldest, requests[0])  # forgotten: no count
    oldest.end()
    assert [attrs(s).get("http.request.resend_count") for s in spans.spans] == [1, None]
    del newest, oldest
    kept = [entry[0]() for entry in _resends.PENDING.values()]
    weak = all(isinstance(entry[0], weakref.ref) for entry in _resends.PENDING.values())
    del requests, request, kept
    gc.collect()
    if weak:  # collected calls leave with their entries
        assert _resends.PENDING == {}
    else:  # calls that cannot be referenced weakly are held, within the bound
        assert len(_resends.PENDING) == _resends._MAX_CALLS


def test_calls_not_weakly_referenceable_still_count_resends(
    spans: CapturedSpans, no_pending_attempts: None
) -> None:
    """A call whose object cannot be referenced weakly (``__slots__`` without
    ``__weakref__``, as aiohttp's timers on some builds) is held: its resend counts."""

    class Timer:
        __slots__ = ()

    class Request:
        def __init__(self, timer: Timer) -> None:
            self._timer = timer

    timer = Timer()
    _resends.attempted(Request(timer))
    resend = spans.provider.get_tracer("t").start_span("resend")
    _resends.count_resend(resend, Request(timer))  # a new request object, the same call
    resend.end()
    assert [attrs(s).get("http.request.resend_count") for s in spans.spans] == [1]


# -- 3. a streamed response dropped, then its session closed ------------------------------


def _run_without_the_collector(main: Coroutine[Any, Any, None]) -> None:
    """Run *main* with the cyclic garbage collector off: aiohttp leaves a dropped response
    in a cycle, and the collector must not be what ends its span."""
    gc.collect()
    gc.disable()
    try:
        asyncio.run(main)
    finally:
        gc.enable()
        with warnings.catch_warnings():  # aiohttp's own word on the response dropped open
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


def test_a_dropped_stream_ends_when_its_session_closes(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """A streamed response read in part and dropped, its session then closed: the span
    ends at the close, not truncated, not an error, with no garbage collection run."""
    url = aiohttp_server(app()) + "/stream"
    kwargs = traced()
    ended_in_session: list[int] = []

    async def main() -> None:
        async with aiohttp.ClientSession(**kwargs) as session:
            response = await session.get(url)
            await response.content.read(10)
            del response
        await asyncio.sleep(0.05)  # the connection's loss is reported on the next turns
        ended_in_session.append(len(spans.by_name("GET")))

    _run_without_the_collector(main())
    assert ended_in_session == [1]
    (client,) = spans.by_name("GET")
    assert attrs(client).get("asynctrace.truncated") is None
    assert client.status.status_code is not StatusCode.ERROR


def test_a_dropped_stream_whose_server_goes_away_ends_in_error(
    traced: Any, spans: CapturedSpans
) -> None:
    """A guard of what aiohttp does itself: a streamed response read in part and
    dropped, the server then aborting the connection mid-body, aiohttp releases the
    connection (its callbacks run) and the span ends then, in error, before the session
    closes; the connection's loss need not be watched for it."""
    kwargs = traced()
    ended_in_session: list[int] = []

    async def main() -> None:
        go_away = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await writer.drain()
            await go_away.wait()
            writer.transport.abort()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        async with server, aiohttp.ClientSession(**kwargs) as session:
            response = await session.get(url)
            await response.content.read(3)
            del response
            go_away.set()
            await asyncio.sleep(0.1)  # the abort, then the connection's loss, reported
            ended_in_session.append(len(spans.by_name("GET")))

    _run_without_the_collector(main())
    assert ended_in_session == [1]
    (client,) = spans.by_name("GET")
    assert client.status.status_code is StatusCode.ERROR
    assert attrs(client)["error.type"] == "ClientPayloadError"


# -- 4. header names holding secrets ------------------------------------------------------

SECRET_HEADERS = [
    "Authentication",
    "X-Authentication",
    "Bearer",
    "X-Bearer",
    "X-Sig",
    "X-Passcode",
    "X-Otp",
    "X-Pin",
    "X-Api-Pass",
    "X-Client-Cert",
    "X-Forwarded-Client-Cert",
    "Ssl-Client-Cert",
    "X-Cert-Chain",
    "X-MS-CLIENT-PRINCIPAL",
    "X_Pin_Code",
]
PLAIN_HEADERS = [
    "X-Spinner",
    "X-Signal",
    "X-Pinned",
    "X-Bypass",
    "X-Certainty",
    "X-Passenger",
    "Content-Type",
    "X-Request-Id",
    "Pass",  # one word: "Pass: 3 Fail: 0" in text says nothing secret
    "Pin",
]


# Words that name a credential only in a recorded header's name of two words or more.
QUALIFIED_ONLY = [n for n in SECRET_HEADERS if not at.is_credential_header(n)]


def test_secret_header_names_both_ways() -> None:
    """A credential word among a recorded header name's words counts; inside a longer
    word it does not. sig, otp, pin, pass, cert and principal count there only."""
    assert [n for n in SECRET_HEADERS if not at.is_credential_header(n, recorded=True)] == []
    assert [n for n in PLAIN_HEADERS if at.is_credential_header(n, recorded=True)] == []
    assert [n for n in PLAIN_HEADERS if at.is_credential_header(n)] == []
    assert QUALIFIED_ONLY == [
        "X-Sig", "X-Otp", "X-Pin", "X-Api-Pass", "X-Client-Cert", "X-Forwarded-Client-Cert",
        "Ssl-Client-Cert", "X-Cert-Chain", "X-MS-CLIENT-PRINCIPAL", "X_Pin_Code",
    ]  # fmt: skip
    assert at.redact_text("Pass: 3 Fail: 0") == "Pass: 3 Fail: 0"


# Text in which sig, otp, pin, pass, cert or principal name data: kept as it is.
DATA_TEXTS = [
    "DataLoader(pin_memory: True, num_workers: 4)",
    "pin_memory: True",
    "config error: pin_memory: True is not supported on this device",
    "cert_file: /etc/ssl/certs/ca.pem not found",
    "ssl_cert_reqs: CERT_REQUIRED",
    "first_pass: done, second_pass: failed",
    "loss_sig: 0.25",
    "principal_angle: 1.57",
    "by_pass: 12",
    "compile_pass: 3",
    "test_pass: 12 test_fail: 0",
    "x-pin: 12",
    "Header X-Pass-Count: 3",
    "ValueError: DataLoader(pin_memory=True, num_workers=4) failed",
    "argv: train.py --pin-memory 1 --epochs 3",
    "otp_window: 30",
]


def test_short_credential_words_leave_text_and_payload_keys_alone() -> None:
    """Exception text and a session payload's pairs keep their values under names holding
    sig, otp, pin, pass, cert or principal; the other credential words still redact."""
    assert [text for text in DATA_TEXTS if at.redact_text(text) != text] == []
    stages = [("first-pass", 3), ("pin-memory", True), ("x-cert-id", "abc"), ("x-otp", 5)]
    assert plain_payload({"stages": stages}) == {"stages": [list(pair) for pair in stages]}
    assert plain_payload({"h": [("x-api-key", "abc")]}) == {"h": [["x-api-key", "REDACTED"]]}
    # authentication, bearer and passcode redact everywhere, as auth does
    for text in ("auth_method: oauth", "authentication_method: oauth", "bearer_token: abc"):
        assert at.redact_text(text) == text.partition(":")[0] + ": REDACTED"
    assert at.redact_text("X-Passcode: 123456") == "X-Passcode: REDACTED"


def test_secret_headers_recorded_redacted(
    traced: Any, aiohttp_server: Any, spans: CapturedSpans
) -> None:
    """record_request_headers and record_response_headers of such names record
    REDACTED, the words that count in header names only included; a plain one as sent."""
    names = ["X-Pin", "X-Client-Cert", "Authentication", "X-MS-CLIENT-PRINCIPAL", "X-Spinner"]

    async def echo(request: web.Request) -> web.Response:
        return web.Response(text="ok", headers={f"{n}": f"answer-{n}" for n in names})

    application = web.Application()
    application.router.add_get("/echo", echo)
    url = aiohttp_server(application) + "/echo"
    kwargs = traced(record_request_headers=names, record_response_headers=names)

    async def main() -> None:
        async with aiohttp.ClientSession(**kwargs) as session:
            headers = {name: f"value-of-{name}" for name in names}
            async with session.get(url, headers=headers) as response:
                await response.read()

    asyncio.run(main())
    (client,) = spans.by_name("GET")
    for side, sent in (("request", "value-of-"), ("response", "answer-")):
        recorded_values = {
            name: attrs(client)[f"http.{side}.header.{name.lower()}"] for name in names
        }
        assert recorded_values == {
            "X-Pin": ("REDACTED",),
            "X-Client-Cert": ("REDACTED",),
            "Authentication": ("REDACTED",),
            "X-MS-CLIENT-PRINCIPAL": ("REDACTED",),
            "X-Spinner": (sent + "X-Spinner",),
        }
