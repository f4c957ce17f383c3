"""The aiohttp client under another OpenTelemetry runtime context (``OTEL_PYTHON_CONTEXT``):
the context it reads is that runtime's, so ``suppress_http_instrumentation()`` is honoured.
In a child process: the runtime context is chosen once, before the client is imported."""

from __future__ import annotations

import subprocess
import sys

_CHILD = """
import asyncio
from contextvars import ContextVar

from opentelemetry import context as otel_context
from opentelemetry.context.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext


class OwnRuntime(ContextVarsRuntimeContext):
    # A runtime keeping its context in a variable of its own (the parent's stays unused).
    def __init__(self):
        super().__init__()
        self._own = ContextVar("own", default=Context())

    def attach(self, context):
        return self._own.set(context)

    def get_current(self):
        return self._own.get()

    def detach(self, token):
        self._own.reset(token)


otel_context._RUNTIME_CONTEXT = OwnRuntime()  # what OTEL_PYTHON_CONTEXT installs

import aiohttp
from aiohttp import web
from opentelemetry.instrumentation.utils import suppress_http_instrumentation

from asynctrace.testing import capture_spans
from asynctrace_contrib.aiohttp_client import client_middleware


async def main():
    app = web.Application()
    app.router.add_get("/", lambda request: web.Response(text="ok"))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    with capture_spans("all") as captured:
        async with aiohttp.ClientSession(middlewares=(client_middleware(),)) as session:
            with suppress_http_instrumentation():
                async with session.get(f"http://127.0.0.1:{port}/") as response:
                    suppressed = response.request_info.headers.get("traceparent")
                    await response.text()
            async with session.get(f"http://127.0.0.1:{port}/") as response:
                sent = response.request_info.headers.get("traceparent")
                await response.text()
    await runner.cleanup()
    print("suppressed", suppressed)
    print("sent", sent is not None)
    print("client spans", sum(1 for span in captured if span.kind.name == "CLIENT"))


asyncio.run(main())
"""


def test_another_runtime_context_is_read_and_its_suppression_honoured() -> None:
    """Inside ``suppress_http_instrumentation()`` nothing is sent or recorded; outside it,
    the request gets its span and ``traceparent``."""
    result = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "suppressed None" in result.stdout, result.stdout
    assert "sent True" in result.stdout, result.stdout
    assert "client spans 1" in result.stdout, result.stdout
