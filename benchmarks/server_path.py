"""What the server side of a hop costs in a loop, part by part (reference).

Usage: python benchmarks/server_path.py [--quick]

``bench_http.py`` gives the figures (a FastAPI app on uvicorn, requests
paired with the plain app's); this script shows where the middleware's
share of them goes, in one process and in a loop, where everything is in
the CPU's caches (``wake_penalty.py`` says what a request costs when it
follows a wake-up). Each statement is timed with ``perf_counter_ns`` over
loops of *n* runs, the best of 7:

- ``parse_traceparent`` of a version-00 value (the quick path), and of the
  same value with a space after it (the general path);
- ``remote_trace_context`` of a ``traceparent`` carrier: entered and exited
  (the carrier parsed once, before the loop);
- asynctrace's FastAPI middleware (``AsyncTraceMiddleware``) alone, in front
  of an ASGI app that answers at once, with a request carrying a
  ``traceparent`` and asynctrace ``baggage``: per request, less the same
  app called without it, for telemetry off (the caller's context still
  continued), the server span recorded (fast provider, spans discarded by
  the export thread) and the same with ``propagate_scopes`` (the caller's
  iteration, task and session restored from ``baggage``).

No target: a reference for the performance page.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asynctrace_contrib.fastapi import AsyncTraceMiddleware

import asynctrace as at
from asynctrace._carrier_read import parse_traceparent

sys.path.insert(0, str(Path(__file__).parent))
from _http_server import fast_provider

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
BAGGAGE = "asynctrace.iteration=412,asynctrace.task_id=7,asynctrace.session_id=0-ab12-1"
HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"user-agent", b"Python/3.11 aiohttp/3.9"),
    (b"accept", b"*/*"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"traceparent", TRACEPARENT.encode()),
    (b"baggage", BAGGAGE.encode()),
]


def best_ns(run: Callable[[], object], n: int) -> float:
    """The best of 7 loops of *n* calls, per call."""
    best = float("inf")
    for _ in range(7):
        started = time.perf_counter_ns()
        for _ in range(n):
            run()
        best = min(best, (time.perf_counter_ns() - started) / n)
    return best


async def _answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _send(message: dict[str, Any]) -> None:
    pass


def _scope() -> dict[str, Any]:
    return {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/items/7",
        "query_string": b"",
        "root_path": "",
        "headers": HEADERS,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


async def _per_request_ns(app: Any, n: int) -> float:
    for _ in range(n // 5):
        await app(_scope(), _receive, _send)
    best = float("inf")
    for _ in range(7):
        started = time.perf_counter_ns()
        for _ in range(n):
            await app(_scope(), _receive, _send)
        best = min(best, (time.perf_counter_ns() - started) / n)
    return best


def middleware_ns(n: int) -> dict[str, float]:
    """The middleware's own cost per request, in three configurations."""
    middleware = AsyncTraceMiddleware(_answer)
    middleware._mounts_seen = True  # no FastAPI app behind it to examine
    costs: dict[str, float] = {}
    for name, groups, scopes in (
        ("telemetry off", None, False),
        ("server span recorded", "http_server", False),
        ("recorded, scopes from baggage", "http_server", True),
    ):
        if groups is not None:
            at.enable_telemetry(fast_provider(), span_groups=groups, propagate_scopes=scopes)
        try:
            bare = asyncio.run(_per_request_ns(_answer, n))
            costs[name] = asyncio.run(_per_request_ns(middleware, n)) - bare
        finally:
            if groups is not None:
                at.disable_telemetry()
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    n = 2_000 if parser.parse_args().quick else 20_000
    print(f"python {sys.version.split()[0]}; best of 7 loops of {n:,} calls, per call")
    quick = best_ns(lambda: parse_traceparent(TRACEPARENT), n)
    spaced = TRACEPARENT + " "
    general = best_ns(lambda: parse_traceparent(spaced), n)
    print(f"  parse_traceparent, version 00       {quick:7.0f} ns")
    print(f"  parse_traceparent, the general path {general:7.0f} ns")
    remote = at.remote_trace_context({"traceparent": TRACEPARENT})

    def enter_exit() -> None:
        remote.__enter__()
        remote.__exit__(None, None, None)

    print(f"  remote_trace_context, enter + exit  {best_ns(enter_exit, n):7.0f} ns")
    for name, cost in middleware_ns(n).items():
        print(f"  FastAPI middleware, {name:30s} {cost / 1000:5.2f} us a request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
