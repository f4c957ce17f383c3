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
import socket
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from asynctrace_contrib.aiohttp_client import client_middleware, trace_config
from asynctrace_contrib.fastapi import instrument_fastapi
from fastapi import FastAPI, Request
from opentelemetry.sdk.trace.export import ConsoleSpanExporter as Console
from opentelemetry.trace import StatusCode

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
