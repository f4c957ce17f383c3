"""No secret of a request reaches any exporter through what is recorded of an exception.

aiohttp's exception messages embed the raw URL; a handler's message may quote
a header or a query value. Each test makes the failure happen for real (a full
listen backlog, a 403 with ``raise_for_status``, a raising FastAPI handler on
uvicorn), with every exporter on at once (chrome JSONL, memory, console and
OTLP to a receiver on 127.0.0.1), and searches everything each one wrote.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import gzip
import io
import json
import socket
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from asynctrace_contrib.aiohttp_client import client_middleware, trace_config
from asynctrace_contrib.fastapi import instrument_fastapi
from fastapi import FastAPI, Request
from opentelemetry import trace
from opentelemetry.sdk.trace.export import ConsoleSpanExporter as Console
from opentelemetry.trace import Status, StatusCode

import asynctrace as at
from asynctrace.export import _pipeline

TOKEN = "tok-SECRET-q1"
PASSWORD = "pw-SECRET-u2"
HEADER = "hdr-SECRET-h3"
CUSTOM = "cus-SECRET-c4"  # the value of a key only a custom secret_keys names
BASIC = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
SECRETS = (TOKEN, PASSWORD, HEADER, CUSTOM, BASIC, "SECRET")


class _Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP receiver that keeps every request body, decompressed."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[bytes] = []


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        encoding = self.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Outputs:
    """Every exporter's output, searchable once telemetry has shut down."""

    telemetry: at.Telemetry
    directory: Path
    receiver: _Receiver
    console: io.StringIO
    texts: dict[str, str] = field(default_factory=dict)

    def collect(self) -> dict[str, str]:
        """Flush and shut down; each exporter's output as text."""
        memory = self.telemetry.memory_exporter
        assert self.telemetry.flush(10.0)
        finished = list(memory.get_finished_spans())
        at.shutdown()
        self.texts = {
            "chrome": "".join(p.read_text() for p in self.directory.rglob("traces*.jsonl")),
            "memory": "\n".join(span.to_json() for span in finished),
            "console": self.console.getvalue(),
            "otlp": b"".join(self.receiver.bodies).decode("utf-8", "replace"),
        }
        self.spans = finished
        return self.texts

    def assert_no_secret(self) -> None:
        """No secret in any exporter's output; every exporter wrote something."""
        texts = self.collect()
        for exporter, text in texts.items():
            assert text, f"{exporter} wrote nothing"
            for secret in SECRETS:
                assert secret not in text, f"{secret!r} reached the {exporter} exporter"


@pytest.fixture
def outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Outputs]:
    """Telemetry on with the chrome, memory, console and otlp exporters at once."""
    console = io.StringIO()  # the console exporter's stdout
    monkeypatch.setattr(_pipeline, "ConsoleSpanExporter", functools.partial(Console, out=console))
    receiver = _Receiver()
    thread = threading.Thread(target=receiver.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    host, port = receiver.server_address[:2]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{host!s}:{port}")
    telemetry = at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome", "memory", "console", "otlp"],
            "output_dir": str(tmp_path),
        }
    )
    yield Outputs(telemetry, tmp_path, receiver, console)
    at.shutdown()
    receiver.shutdown()
    receiver.server_close()
    thread.join(5)


@pytest.fixture(params=["middleware", "trace_config"])
def traced(request: pytest.FixtureRequest) -> Any:
    """Session keyword arguments for either client form; ``session`` is a secret key too."""
    keys = ["token", "key", "secret", "password", "sig", "auth", "session"]
    if request.param == "middleware":
        return {"middlewares": (client_middleware(secret_keys=keys),)}
    return {"trace_configs": [trace_config(secret_keys=keys)]}


def _exceptions(spans: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(s.name, dict(e.attributes)) for s in spans for e in s.events if e.name == "exception"]


def _full_backlog() -> tuple[socket.socket, list[socket.socket]]:
    """A listening socket that accepts nothing more: connecting to it times out."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(64):  # enough to fill the SYN and accept queues
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    return listener, fillers


def test_connection_timeout_secrets_reach_no_exporter(outputs: Outputs, traced: Any) -> None:
    """ConnectionTimeoutError names the URL: no query secret, userinfo or header value is kept."""
    listener, fillers = _full_backlog()
    port = listener.getsockname()[1]
    url = f"http://user:{PASSWORD}@127.0.0.1:{port}/step?token={TOKEN}&session_id={CUSTOM}&n=1"
    raised: list[BaseException] = []

    async def main() -> None:
        timeout = aiohttp.ClientTimeout(sock_connect=0.3)
        async with aiohttp.ClientSession(timeout=timeout, **traced) as session:
            try:
                with at.umbrella_span("job", "driver"), at.managed_span("reward", "env.call"):
                    await session.get(url, headers={"X-Api-Token": HEADER})
            except aiohttp.ConnectionTimeoutError as exc:
                raised.append(exc)

    try:
        asyncio.run(main())
    finally:
        for sock in (*fillers, listener):
            sock.close()
    assert raised
    assert TOKEN in str(raised[0])  # the exception the caller sees is untouched
    outputs.assert_no_secret()
    recorded = _exceptions(outputs.spans)
    assert {name for name, _ in recorded} == {"GET", "env.call", "driver"}
    for _, attrs in recorded:
        assert "token=REDACTED" in attrs["exception.message"]
        assert "token=REDACTED" in attrs["exception.stacktrace"]
    (client,) = [s for s in outputs.spans if s.name == "GET"]
    assert client.status.status_code is StatusCode.ERROR
    assert "token=REDACTED" in (client.status.description or "")
    assert "ConnectionTimeoutError" in outputs.texts["chrome"]


def test_client_response_error_secrets_reach_no_exporter(
    outputs: Outputs, traced: Any, aiohttp_server: Any
) -> None:
    """ClientResponseError (raise_for_status=True) names the URL: its secrets are redacted."""

    async def forbidden(request: web.Request) -> web.Response:
        return web.Response(status=403, headers={"Set-Cookie": f"sid={HEADER}"})

    app = web.Application()
    app.router.add_get("/step", forbidden)
    base = aiohttp_server(app)
    url = f"{base}/step?api_key={TOKEN}&n=1"

    async def main() -> None:
        async with aiohttp.ClientSession(raise_for_status=True, **traced) as session:
            with pytest.raises(aiohttp.ClientResponseError, match=TOKEN):
                with at.managed_span("reward", "env.call"):
                    async with session.get(url):
                        pass

    asyncio.run(main())
    outputs.assert_no_secret()
    recorded = dict(_exceptions(outputs.spans))
    assert "api_key=REDACTED" in recorded["env.call"]["exception.message"]
    if "trace_configs" in traced:  # the middleware sees the 403 itself, before the raise
        assert "api_key=REDACTED" in recorded["GET"]["exception.message"]


def test_server_error_secrets_reach_no_exporter(outputs: Outputs, asgi_server: Any) -> None:
    """A handler's message quoting the URL, a header and a query value: none of them recorded."""
    app = FastAPI()

    @app.get("/envs/{env_id}")
    async def env(env_id: int, request: Request) -> dict[str, int]:
        token = request.query_params["token"]
        raise ValueError(
            f"refused {request.url} for {request.headers['x-api-token']} ({token[::1]})"
        )

    instrument_fastapi(app)
    base = asgi_server(app)

    async def main() -> int:
        async with aiohttp.ClientSession() as session:
            async with session.get(
                f"{base}/envs/7?token={TOKEN}", headers={"X-Api-Token": HEADER}
            ) as response:
                return response.status

    assert asyncio.run(main()) == 500
    outputs.assert_no_secret()
    ((name, attrs),) = _exceptions(outputs.spans)
    assert name == "GET /envs/{env_id}"
    assert attrs["exception.message"] == (
        f"refused {base}/envs/7?token=REDACTED for REDACTED (REDACTED)"
    )
    (server,) = outputs.spans
    assert "REDACTED" in (server.status.description or "")


COOKIE = "ck-SECRET-9f3a"  # a cookie's value, sent as "sid=<it>; theme=dark"
ITEM = "it-SECRET-5b6c"  # the first item of a comma-separated header


def _wait_for_spans(outputs: Outputs, count: int) -> None:
    """Until *count* spans have ended (a server span ends just after its response is sent)."""
    memory = outputs.telemetry.memory_exporter
    deadline = time.monotonic() + 10
    while len(memory.get_finished_spans()) < count and time.monotonic() < deadline:
        outputs.telemetry.flush(1.0)
        time.sleep(0.01)


def _client_forms() -> list[Any]:
    """Both client forms with their default secret keys."""
    return [
        pytest.param({"middlewares": (client_middleware(),)}, id="middleware"),
        pytest.param({"trace_configs": [trace_config()]}, id="trace_config"),
    ]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is Python 3.11+")
def test_an_exception_group_keeps_the_secrets_of_its_members(
    outputs: Outputs, aiohttp_server: Any
) -> None:
    """A request failing in a TaskGroup: the group escaping the step keeps its secrets."""

    async def forbidden(request: web.Request) -> web.Response:
        return web.Response(status=403)

    app = web.Application()
    app.router.add_get("/step", forbidden)
    url = f"{aiohttp_server(app)}/step?session_id={CUSTOM}&n=1"  # secret to this client only
    keys = ["token", "key", "secret", "password", "sig", "auth", "session"]
    raised: list[BaseException] = []

    async def call(session: aiohttp.ClientSession) -> None:
        async with session.get(url):
            pass

    async def main() -> None:
        tracing = trace_config(secret_keys=keys)
        async with aiohttp.ClientSession(
            raise_for_status=True, trace_configs=[tracing]
        ) as session:
            try:
                with at.umbrella_span("job", "driver"):
                    async with asyncio.TaskGroup() as group:  # type: ignore[attr-defined]
                        group.create_task(call(session))
            except Exception as exc:
                raised.append(exc)

    asyncio.run(main())
    assert type(raised[0]).__name__ == "ExceptionGroup"
    outputs.assert_no_secret()
    recorded = dict(_exceptions(outputs.spans))
    assert "session_id=REDACTED" in recorded["driver"]["exception.stacktrace"]
    assert "ClientResponseError" in recorded["driver"]["exception.stacktrace"]


def test_pieces_of_a_header_value_are_secrets_on_the_server(
    outputs: Outputs, asgi_server: Any
) -> None:
    """A handler quoting one cookie's value, or one item of a list header: neither is recorded."""
    app = FastAPI()

    @app.get("/step")
    async def step(request: Request) -> dict[str, int]:
        first = request.headers["x-env-keys"].split(",")[0]
        raise ValueError(f"session {request.cookies['sid']} refused for {first}")

    instrument_fastapi(app)
    base = asgi_server(app)

    async def main() -> int:
        headers = {"Cookie": f"sid={COOKIE}; theme=dark", "X-Env-Keys": f"{ITEM}, other-value"}
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/step", headers=headers) as response:
                return response.status

    assert asyncio.run(main()) == 500
    outputs.assert_no_secret()
    ((_, attrs),) = _exceptions(outputs.spans)
    assert attrs["exception.message"] == "session REDACTED refused for REDACTED"


@pytest.mark.parametrize("password", ["pw/SECRET+k3", "pw?SECRET", "pw#SECRET"])
def test_a_password_aiohttp_cannot_parse_is_not_recorded(
    outputs: Outputs, traced: Any, password: str
) -> None:
    """aiohttp refuses ``u:pa/ss@h`` with the raw URL in its message: no userinfo is kept."""
    url = f"http://envuser:{password}@127.0.0.1:9/envs/7/step"

    async def main() -> None:
        async with aiohttp.ClientSession(**traced) as session:
            with pytest.raises(aiohttp.InvalidUrlClientError, match="SECRET"):
                with at.managed_span("reward", "env.call"):
                    await session.get(url)

    asyncio.run(main())
    outputs.assert_no_secret()
    assert not any("envuser" in text for text in outputs.texts.values())
    recorded = dict(_exceptions(outputs.spans))
    assert "http://127.0.0.1:9/envs/7/step" in recorded["env.call"]["exception.message"]


@pytest.mark.parametrize("form", _client_forms())
def test_url_full_hides_every_secret_word_and_urls_inside_values(
    outputs: Outputs, aiohttp_server: Any, form: Any
) -> None:
    """The default keys are the redaction's words; a URL given as a value is redacted inside."""

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/step", ok)
    inner = (
        "https://bucket.s3.example/obj?X-Amz-Credential=cr-SECRET-1&X-Amz-Signature=sg-SECRET-2"
    )
    query = (
        "db_passwd=pw-SECRET-3&session_cookie=ck-SECRET-4&X-Amz-Credential=cr-SECRET-5"
        f"&upload_url={quote(inner, safe='')}"
        "&raw_url=https://bucket.s3.example/obj?X-Amz-Signature%3Dsg-SECRET-6&n=1"
    )

    async def main() -> None:
        async with aiohttp.ClientSession(**form) as session:
            async with session.get(f"{aiohttp_server(app)}/step?{query}") as response:
                assert await response.text() == "ok"

    asyncio.run(main())
    outputs.assert_no_secret()
    (client,) = [s for s in outputs.spans if s.kind.name == "CLIENT"]
    full = client.attributes["url.full"]
    assert "db_passwd=REDACTED" in full
    assert full.endswith("&n=1")
    assert "X-Amz-Signature%3DREDACTED" in full  # the upload URL's own query, redacted inside


def test_a_session_reason_is_recorded_redacted(tmp_path: Path) -> None:
    """``reason=exc`` or a string quoting a URL or a header: the session record keeps no secret."""
    at.configure(
        {
            "enabled": True,
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
            "session_tracer": {"enabled": True},
        }
    )

    async def main() -> None:
        with at.task_scope(1):
            async with at.session_scope():
                exc = ValueError(f"GET http://u:{PASSWORD}@env/step?token={TOKEN}")
                at.trace_session_event("finalized", status="failed", reason=exc)
            async with at.session_scope():
                reason = f"refused: {{'Authorization': 'Bearer {HEADER}'}} api_key={CUSTOM}"
                at.trace_session_event("finalized", status="rejected", reason=reason)

    try:
        asyncio.run(main())
    finally:
        at.shutdown()
    text = "".join(p.read_text() for p in tmp_path.rglob("sessions*.jsonl"))
    reasons = [json.loads(line)["reason"] for line in text.splitlines()]
    assert reasons == [
        "ValueError: GET http://env/step?token=REDACTED",
        "refused: {'Authorization': 'REDACTED'} api_key=REDACTED",
    ]
    assert "SECRET" not in text


@pytest.mark.parametrize("mounted", ["before", "after"])
def test_an_app_mounted_under_an_instrumented_one_records_no_query(
    outputs: Outputs, asgi_server: Any, mounted: str
) -> None:
    """FastAPI's own tracing is off in a mounted sub-app too: one SERVER span, no raw query."""
    sub = FastAPI()
    if not isinstance(getattr(sub, "_telemetry", None), dict):
        pytest.skip("this FastAPI has no built-in telemetry")

    @sub.get("/step")
    async def step() -> dict[str, int]:
        return {"ok": 1}

    app = FastAPI()
    if mounted == "before":
        app.mount("/env", sub)
    instrument_fastapi(app)
    if mounted == "after":  # seen at the first request
        app.mount("/env", sub)
    base = asgi_server(app)

    async def main() -> int:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/env/step?token={TOKEN}&n=1") as response:
                return response.status

    assert asyncio.run(main()) == 200
    _wait_for_spans(outputs, 1)  # the server span ends after the response is sent
    outputs.assert_no_secret()
    assert [s.kind.name for s in outputs.spans] == ["SERVER"]


def test_an_absolute_form_target_loses_its_userinfo(outputs: Outputs, asgi_server: Any) -> None:
    """``GET http://u:p@host/step HTTP/1.1``: ``url.path`` is recorded without the userinfo."""
    app = FastAPI()

    @app.get("/step")
    async def step() -> dict[str, int]:
        return {"ok": 1}

    instrument_fastapi(app)
    host, port = asgi_server(app).removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        target = f"http://user:{PASSWORD}@{host}:{port}/step"
        sock.sendall(
            f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        )
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 ")
    _wait_for_spans(outputs, 1)
    outputs.assert_no_secret()
    (server,) = outputs.spans
    assert server.attributes["url.path"] in ("/step", f"http://{host}:{port}/step")


def test_task_names_are_recorded_redacted(tmp_path: Path) -> None:
    """``create_task(..., name=f"GET {url}")``: the chrome track's name keeps no token."""
    at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
        }
    )

    async def work() -> None:
        with at.managed_span("reward", "env.call"):
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.create_task(work(), name=f"GET http://env/step?token={TOKEN}")

    try:
        asyncio.run(main())
    finally:
        at.shutdown()
    text = "".join(p.read_text() for p in tmp_path.rglob("traces*.jsonl"))
    assert "task: GET http://env/step?token=REDACTED" in text
    assert TOKEN not in text


def test_other_instrumentations_spans_lose_their_url_secrets(
    tmp_path: Path, asgi_server: Any
) -> None:
    """On the fast provider, a span another instrumentation records keeps no URL secret.

    FastAPI's built-in telemetry (an app asynctrace does not instrument) records
    ``url.query`` as sent; a plain OpenTelemetry tracer sets ``url.full``,
    ``http.target`` and a status description quoting a URL.
    """
    telemetry = at.configure(
        {
            "enabled": True,
            "provider": "fast",
            "exporters": ["chrome", "memory"],
            "output_dir": str(tmp_path),
        }
    )
    app = FastAPI()

    @app.get("/step")
    async def step() -> dict[str, int]:
        return {"ok": 1}

    base = asgi_server(app)

    async def main() -> int:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/step?token={TOKEN}&n=1") as response:
                return response.status

    try:
        assert asyncio.run(main()) == 200
        tracer = trace.get_tracer("third.party")
        url = f"http://u:{PASSWORD}@env/step?api_key={CUSTOM}"
        with tracer.start_as_current_span("GET", attributes={"url.full": url}) as span:
            span.set_attribute("http.target", f"/step?access_token={TOKEN}")
            span.set_attributes({"url.query": f"token={TOKEN}&n=1", "n": 1})
            span.set_status(Status(StatusCode.ERROR, f"refused {url}"))
        assert telemetry.flush(10.0)
        finished = telemetry.memory_exporter.get_finished_spans()
    finally:
        at.shutdown()
    text = "".join(p.read_text() for p in tmp_path.rglob("traces*.jsonl"))
    text += "\n".join(s.to_json() for s in finished)
    assert "SECRET" not in text
    (plain,) = [s for s in finished if s.instrumentation_scope.name == "third.party"]
    assert plain.attributes["url.full"] == "http://env/step?api_key=REDACTED"
    assert plain.attributes["url.query"] == "token=REDACTED&n=1"
    assert plain.status.description == "refused http://env/step?api_key=REDACTED"
    if isinstance(getattr(app, "_telemetry", None), dict):  # FastAPI's own spans came through
        assert any(s.attributes.get("url.query") == "token=REDACTED&n=1" for s in finished)


def test_raise_for_status_after_the_span_ended_keeps_custom_secrets(
    outputs: Outputs, aiohttp_server: Any
) -> None:
    """``resp.raise_for_status()`` once the CLIENT span has ended normally: the enclosing
    span records a message naming the URL, and a custom secret key's value is not in it."""

    async def forbidden(request: web.Request) -> web.Response:
        return web.Response(status=403, text="no")

    app = web.Application()
    app.router.add_get("/step", forbidden)
    url = f"{aiohttp_server(app)}/step?rolloutpass={CUSTOM}&n=1"

    async def main() -> None:
        tracing = client_middleware(secret_keys=["rolloutpass"])
        async with aiohttp.ClientSession(middlewares=(tracing,)) as session:
            with pytest.raises(aiohttp.ClientResponseError, match=CUSTOM):
                with at.managed_span("reward", "env.call"):
                    async with session.get(url) as response:
                        await response.read()  # the body is read: the CLIENT span has ended
                        response.raise_for_status()

    asyncio.run(main())
    outputs.assert_no_secret()
    recorded = dict(_exceptions(outputs.spans))
    assert "rolloutpass=REDACTED&n=1" in recorded["env.call"]["exception.message"]


@pytest.mark.parametrize("form", ["middleware", "trace_config"])
def test_raise_for_status_after_the_span_ended_keeps_short_custom_secrets(
    outputs: Outputs, aiohttp_server: Any, form: str
) -> None:
    """``secret_keys=["token", "sk"]``: ``url.full`` lost ``sk``'s value, but a span recording
    ``raise_for_status()``'s error kept it (words under 3 characters were dropped)."""

    async def forbidden(request: web.Request) -> web.Response:
        return web.Response(status=403, text="no")

    app = web.Application()
    app.router.add_get("/step", forbidden)
    url = f"{aiohttp_server(app)}/step?sk={CUSTOM}&task=t-9"
    keys = ["token", "sk"]
    session_options: dict[str, Any] = (
        {"middlewares": (client_middleware(secret_keys=keys),)}
        if form == "middleware"
        else {"trace_configs": [trace_config(secret_keys=keys)]}
    )

    async def main() -> None:
        async with aiohttp.ClientSession(**session_options) as session:
            with pytest.raises(aiohttp.ClientResponseError, match=CUSTOM):
                with at.managed_span("reward", "env.call"):
                    async with session.get(url) as response:
                        await response.read()  # the body is read: the CLIENT span has ended
                        response.raise_for_status()

    asyncio.run(main())
    outputs.assert_no_secret()
    (client,) = [s for s in outputs.spans if s.kind.name == "CLIENT"]
    assert str(client.attributes["url.full"]).endswith("/step?sk=REDACTED&task=REDACTED")
    recorded = dict(_exceptions(outputs.spans))
    assert "sk=REDACTED&task=REDACTED'" in recorded["env.call"]["exception.message"]


def test_credential_headers_asked_for_are_recorded_redacted(
    outputs: Outputs, aiohttp_server: Any
) -> None:
    """``record_request_headers=["authorization", ...]``: credential values are REDACTED."""

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok", headers={"Set-Cookie": f"sid={HEADER}", "X-Id": "r-1"})

    app = web.Application()
    app.router.add_get("/step", ok)
    tracing = trace_config(
        record_request_headers=["Authorization", "X-Api-Key", "X-Request-Id"],
        record_response_headers=["Set-Cookie", "X-Id"],
    )

    async def main() -> None:
        headers = {"Authorization": f"Basic {BASIC}", "X-Api-Key": HEADER, "X-Request-Id": "q-1"}
        async with aiohttp.ClientSession(trace_configs=[tracing]) as session:
            async with session.get(f"{aiohttp_server(app)}/step", headers=headers) as response:
                assert await response.text() == "ok"

    asyncio.run(main())
    outputs.assert_no_secret()
    (client,) = [s for s in outputs.spans if s.kind.name == "CLIENT"]
    attrs = client.attributes
    assert tuple(attrs["http.request.header.authorization"]) == ("REDACTED",)
    assert tuple(attrs["http.request.header.x-api-key"]) == ("REDACTED",)
    assert tuple(attrs["http.request.header.x-request-id"]) == ("q-1",)
    assert tuple(attrs["http.response.header.set-cookie"]) == ("REDACTED",)
    assert tuple(attrs["http.response.header.x-id"]) == ("r-1",)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (f"/proxy/http://user:{PASSWORD}@env/x", "/proxy/http://env/x"),
        (f"/files;token={TOKEN}/list", "/files;token=REDACTED/list"),
    ],
)
def test_a_url_or_a_secret_parameter_in_the_path_is_not_recorded(
    outputs: Outputs, asgi_server: Any, path: str, expected: str
) -> None:
    """``url.path`` starting with "/" was recorded as sent: userinfo of a URL in it, and the
    value of a secret-like path parameter, are redacted."""
    app = FastAPI()

    @app.get("/{rest:path}")
    async def anything(rest: str) -> dict[str, int]:
        return {"ok": 1}

    instrument_fastapi(app)
    host, port = asgi_server(app).removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200")
    _wait_for_spans(outputs, 1)
    outputs.assert_no_secret()
    (server,) = outputs.spans
    assert server.attributes["url.path"] == expected


def test_plain_request_headers_do_not_redact_a_stack_trace(
    outputs: Outputs, asgi_server: Any
) -> None:
    """``Upgrade-Insecure-Requests: 1``, ``Sec-Fetch-Mode: navigate``... are no secrets: the
    handler's message and the line numbers of its stack trace keep them."""
    app = FastAPI()

    @app.get("/step")
    async def step(request: Request) -> dict[str, int]:
        raise IndexError(f"cannot navigate: item 1 of {request.headers['x-env-key']} is gone")

    instrument_fastapi(app)
    base = asgi_server(app)

    async def main() -> int:
        headers = {
            "Upgrade-Insecure-Requests": "1",
            "Sec-CH-UA-Mobile": "?0",
            "Priority": "u=0, i",
            "Sec-Fetch-Mode": "navigate",
            "X-Env-Key": HEADER,
        }
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/step", headers=headers) as response:
                return response.status

    assert asyncio.run(main()) == 500
    outputs.assert_no_secret()
    ((_, attrs),) = _exceptions(outputs.spans)
    assert attrs["exception.message"] == "cannot navigate: item 1 of REDACTED is gone"
    assert ", line REDACTED" not in attrs["exception.stacktrace"]


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_nemo_lens_spans_record_exceptions_redacted(provider: str) -> None:
    """lens's ``span_cm`` and ``traced_remote_call``: OpenTelemetry's use_span and the SDK's
    record_exception wrote message, stack trace and status as raised, on either provider."""
    from asynctrace_contrib import nemo_lens

    from asynctrace.testing import capture_spans

    url = f"http://user:{PASSWORD}@env/x?token={TOKEN}"

    def remote() -> None:
        raise ValueError(f"fetch {url}")

    with capture_spans("all", provider=provider) as captured:
        with pytest.raises(ValueError), nemo_lens.span_cm("rl.setup"):
            raise ValueError(f"fetch {url}")
        with pytest.raises(ValueError), nemo_lens.span_cm("rl.quiet", record_exception=False):
            raise ValueError(f"fetch {url}")
        with pytest.raises(ValueError):
            nemo_lens.traced_remote_call(remote)(_otel_carrier={})
    assert sorted(s.name for s in captured.spans) == sorted(
        ["rl.setup", "rl.quiet", remote.__qualname__]
    )
    for span in captured.spans:
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "ValueError: fetch http://env/x?token=REDACTED"
        events = [dict(e.attributes) for e in span.events if e.name == "exception"]
        assert len(events) == (0 if span.name == "rl.quiet" else 1)
        text = json.dumps(events)
        for secret in (PASSWORD, TOKEN):
            assert secret not in text


@pytest.mark.parametrize(
    ("url", "expected", "secrets"),
    [
        (
            f"http://h/cb?next=http://u:{PASSWORD}@h2/&n=1",
            "http://h/cb?next=http%3A%2F%2Fh2%2F&n=1",
            {PASSWORD},
        ),
        (
            f"http://h/cb?next={quote(f'http://u:{PASSWORD}@h2/?token={TOKEN}', safe='')}",
            "http://h/cb?next=http%3A%2F%2Fh2%2F%3Ftoken%3DREDACTED",
            {PASSWORD, TOKEN},
        ),
        (f"http://h/files;token={TOKEN}/list", "http://h/files;token=REDACTED/list", {TOKEN}),
    ],
)
def test_url_full_and_url_secrets_look_inside_url_values_and_path_parameters(
    url: str, expected: str, secrets: set[str]
) -> None:
    """A URL as a query value (as sent or encoded) and ``;token=`` path parameters: redacted
    in ``url.full``, and their values among the request's secrets."""
    from asynctrace_contrib._http import DEFAULT_SECRET_KEYS, SecretKeys, redact_url, url_secrets

    assert redact_url(url) == expected
    assert secrets <= url_secrets(url, SecretKeys(DEFAULT_SECRET_KEYS))
