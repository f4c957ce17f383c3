"""HTTP integration figures, side by side with OpenTelemetry's contrib instrumentations.

Usage: python benchmarks/bench_http.py [--quick]

Servers run in their own processes on 127.0.0.1; the client sends sequential
GETs over one keep-alive aiohttp session. Each figure is the time per request
relative to the uninstrumented run: every round runs every variant back to
back, and the figure is the median over rounds of the in-round ratio.

- aiohttp client (the client middleware), span recorded (per_prompt on), fast
  provider [<= 1.10x]
- aiohttp client (the client middleware), per_prompt off (header only)  [<= 1.10x]
  (the TraceConfig form is reported too: aiohttp's tracing signals alone cost
  about 8% here)
- FastAPI on uvicorn, server span recorded, fast provider [<= 1.10x]
- with ``propagate_scopes`` on (the client inside an iteration, task and
  session scope, so every request carries them in ``baggage``; the server
  restoring them): aiohttp per_prompt off [<= 1.10x], aiohttp span recorded
  [reported], FastAPI server span recorded [<= 1.10x]; the FastAPI variants all
  get the same ``baggage`` header from the client, so the ratio is the
  server's cost of restoring it
and, for reference, the same two recorded figures on the SDK provider,
OpenTelemetry's aiohttp-client instrumentation (sampled and unsampled) and its
FastAPI instrumentation in the same run, plus a floor: a middleware doing
nothing but start and end a bare SDK span and set the traceparent header.
Exits 1 if one of our targets is missed.

On a machine with two or more cores the client runs on its first core and
every server process on its second (``os.sched_setaffinity``), so neither side is
moved between cores mid-round or shares one with the other; ``--no-pin``
leaves the placement to the scheduler.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
from asynctrace_contrib.aiohttp_client import client_middleware, trace_config
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind

import asynctrace as at

sys.path.insert(0, str(Path(__file__).parent))
from _http_server import fast_provider, provider

HERE = Path(__file__).parent
PIN = False  # set by main(): the client on one core, the servers on another
SERVER_CORE = [1]


@contextlib.contextmanager
def server(kind: str) -> Iterator[str]:
    """Start a benchmark server process; yields its base URL."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "_http_server.py"), kind, str(port_file)]
        )
        if PIN:
            os.sched_setaffinity(proc.pid, {SERVER_CORE[0]})
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists() or not port_file.read_text():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} server did not start")
                time.sleep(0.05)
            url = f"http://127.0.0.1:{port_file.read_text()}"
            for _ in range(100):  # wait until it accepts
                try:
                    asyncio.run(_get_once(url))
                    break
                except aiohttp.ClientError:
                    time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


async def _get_once(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(url + "/items/1") as r:
        await r.read()


async def _requests(url: str, count: int, session_kwargs: dict[str, Any]) -> float:
    async with aiohttp.ClientSession(**session_kwargs) as session:
        for i in range(20):  # warm the connection
            async with session.get(f"{url}/items/{i}") as response:
                await response.read()
        with at.umbrella_span("job", "bench"):
            start = time.perf_counter()
            for i in range(count):
                async with session.get(f"{url}/items/{i}") as response:
                    await response.read()
            return (time.perf_counter() - start) / count


Setup = Callable[[], tuple[dict[str, Any], Callable[[], None]]]


def measure(
    variants: dict[str, tuple[str, Setup]], count: int, rounds: int
) -> dict[str, list[float]]:
    """Seconds per request of each variant (server URL, client setup), one per round.

    Every round runs every variant once, back to back, so a ratio taken within
    a round compares runs that saw the same machine.
    """
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (url, setup) in variants.items():
            kwargs, teardown = setup()
            try:
                times[name].append(asyncio.run(_requests(url, count, kwargs)))
            finally:
                teardown()
    return times


def ratio(times: dict[str, list[float]], name: str, base: str) -> float:
    """The median over rounds of *name*'s time over *base*'s in the same round."""
    return statistics.median(t / b for t, b in zip(times[name], times[base], strict=True))


def report(times: dict[str, list[float]], base: str, targets: dict[str, float]) -> bool:
    """Print each variant against *base*; False if a target is missed."""
    ok = True
    for name in times:
        if name == base:
            continue
        r = ratio(times, name, base)
        target = targets.get(name)
        good = target is None or r <= target
        ok = ok and good
        limit = f" (target <= {target:.2f}x)" if target else " (reference)"
        mark = "" if target is None else ("  ok" if good else "  MISS")
        us = statistics.median(times[name]) * 1e6
        print(f"  {name:34s} {us:7.0f} us  {r:6.3f}x{limit}{mark}")
    return ok


def _ours(
    spec: str, form: str = "middleware", kind: str = "fast", scopes: bool = False
) -> tuple[dict[str, Any], Callable[[], None]]:
    at.enable_telemetry(
        fast_provider() if kind == "fast" else provider(),
        span_groups=spec,
        propagate_scopes=scopes,
    )
    stack = contextlib.ExitStack()
    if scopes:  # what a rollout's request runs in: its step, its task and its session
        stack.enter_context(at.iteration_scope(412))
        stack.enter_context(at.task_scope(7))
        stack.enter_context(at.session_scope())

    def teardown() -> None:
        stack.close()
        at.disable_telemetry()

    if form == "middleware":
        return {"middlewares": (client_middleware(),)}, teardown
    return {"trace_configs": [trace_config()]}, teardown


# What a client with propagate_scopes sends: the FastAPI variants all get it.
SCOPE_HEADERS = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "baggage": "asynctrace.iteration=412,asynctrace.task_id=7,asynctrace.session_id=0-ab12-1",
}


def _plain_with_scope_headers() -> tuple[dict[str, Any], Callable[[], None]]:
    at.enable_telemetry(provider(), span_groups="job")
    return {"headers": SCOPE_HEADERS}, at.disable_telemetry


def _otel(sampled: bool) -> tuple[dict[str, Any], Callable[[], None]]:
    from opentelemetry.instrumentation.aiohttp_client import create_trace_config

    p = provider() if sampled else TracerProvider(sampler=ALWAYS_OFF)
    at.enable_telemetry(p, span_groups="job")
    return {"trace_configs": [create_trace_config(tracer_provider=p)]}, at.disable_telemetry


def _floor() -> tuple[dict[str, Any], Callable[[], None]]:
    """The least a recorded client span can cost: a bare SDK span and a traceparent.

    No gating, no redaction, no error status, no body coverage: a reference
    for how much of the recorded figure is the SDK span itself.
    """
    tracer = provider().get_tracer("floor")

    async def bare_span(request: Any, handler: Any) -> Any:
        url = request.url
        attributes = {
            "http.request.method": request.method,
            "url.full": str(url),
            "server.address": url.host,
            "server.port": url.port,
        }
        span = tracer.start_span(request.method, None, SpanKind.CLIENT, attributes)
        ctx = span.get_span_context()
        request.headers["traceparent"] = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"
        response = await handler(request)
        span.set_attribute("http.response.status_code", response.status)
        span.end()
        return response

    at.enable_telemetry(provider(), span_groups="job")
    return {"middlewares": (bare_span,)}, at.disable_telemetry


def _plain() -> tuple[dict[str, Any], Callable[[], None]]:
    at.enable_telemetry(provider(), span_groups="job")
    return {}, at.disable_telemetry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-pin", action="store_true", help="leave cores to the scheduler")
    args = parser.parse_args()
    global PIN
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    PIN = not args.no_pin and len(cores) >= 2
    if PIN:
        os.sched_setaffinity(0, {cores[0]})
        SERVER_CORE[0] = cores[1]
    count, rounds = (300, 3) if args.quick else (1000, 15)
    placement = "client and servers on their own cores" if PIN else "cores left to the scheduler"
    print(f"python {platform.python_version()} on {platform.machine()}; {placement}")
    with server("aiohttp") as url:
        client = measure(
            {
                "plain": (url, _plain),
                "asynctrace, span recorded": (url, lambda: _ours("job,per_prompt")),
                "asynctrace, per_prompt off": (url, lambda: _ours("job")),
                "asynctrace, per_prompt off, scopes": (
                    url,
                    lambda: _ours("job", scopes=True),
                ),
                "asynctrace, span recorded, scopes": (
                    url,
                    lambda: _ours("job,per_prompt", scopes=True),
                ),
                "asynctrace on the SDK provider, recorded": (
                    url,
                    lambda: _ours("job,per_prompt", kind="sdk"),
                ),
                "asynctrace trace_config, recorded": (url, lambda: _ours("job,per_prompt", "tc")),
                "asynctrace trace_config, off": (url, lambda: _ours("job", "tc")),
                "floor: bare SDK span middleware": (url, _floor),
                "OpenTelemetry contrib, sampled": (url, lambda: _otel(True)),
                "OpenTelemetry contrib, unsampled": (url, lambda: _otel(False)),
            },
            count,
            rounds,
        )
    plain_us = statistics.median(client["plain"]) * 1e6
    print(f"aiohttp client, sequential GETs: plain {plain_us:.0f} us/request")
    targets = {
        "asynctrace, span recorded": 1.10,
        "asynctrace, per_prompt off": 1.10,
        "asynctrace, per_prompt off, scopes": 1.10,
    }
    ok = report(client, "plain", targets)
    with contextlib.ExitStack() as stack:
        kinds = ("fastapi-plain", "fastapi-asynctrace", "fastapi-asynctrace-sdk", "fastapi-otel")
        servers = {kind: (stack.enter_context(server(kind)), _plain) for kind in kinds}
        fastapi = measure(servers, count, rounds)
    plain_us = statistics.median(fastapi["fastapi-plain"]) * 1e6
    print(f"FastAPI on uvicorn: plain {plain_us:.0f} us/request")
    ok = report(fastapi, "fastapi-plain", {"fastapi-asynctrace": 1.10}) and ok
    with contextlib.ExitStack() as stack:
        kinds = ("fastapi-plain", "fastapi-asynctrace-scopes")
        servers = {
            kind: (stack.enter_context(server(kind)), _plain_with_scope_headers) for kind in kinds
        }
        scoped = measure(servers, count, rounds)
    print("FastAPI on uvicorn, every request carrying the caller's scopes in baggage:")
    ok = report(scoped, "fastapi-plain", {"fastapi-asynctrace-scopes": 1.10}) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
