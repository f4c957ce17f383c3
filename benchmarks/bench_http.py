"""HTTP integration figures, side by side with OpenTelemetry's contrib instrumentations.

Usage: python benchmarks/bench_http.py [--quick]

Servers run in their own processes on 127.0.0.1; the client sends sequential
GETs over one keep-alive aiohttp session. Each figure is the time per request
relative to the uninstrumented run, interleaved and repeated (minimum kept).

- aiohttp client (the client middleware), span recorded (per_prompt on) [<= 1.25x]
- aiohttp client (the client middleware), per_prompt off (header only)  [<= 1.10x]
  (the TraceConfig form is reported too: aiohttp's tracing signals alone cost
  about 8% here)
- FastAPI on uvicorn, server span recorded            [<= 1.30x]
and, for reference, OpenTelemetry's aiohttp-client instrumentation (sampled
and unsampled) and its FastAPI instrumentation in the same run.
Exits 1 if one of our targets is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
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

import asynctrace as at

sys.path.insert(0, str(Path(__file__).parent))
from _http_server import provider

HERE = Path(__file__).parent


@contextlib.contextmanager
def server(kind: str) -> Iterator[str]:
    """Start a benchmark server process; yields its base URL."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "_http_server.py"), kind, str(port_file)]
        )
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


def measure(
    variants: dict[str, Callable[[], tuple[dict[str, Any], Callable[[], None]]]],
    url: str,
    count: int,
    repeats: int,
) -> dict[str, float]:
    """Seconds per request of each variant: interleaved repeats, minimum kept."""
    best = {name: float("inf") for name in variants}
    for _ in range(repeats):
        for name, setup in variants.items():
            kwargs, teardown = setup()
            try:
                best[name] = min(best[name], asyncio.run(_requests(url, count, kwargs)))
            finally:
                teardown()
    return best


def _ours(spec: str, form: str = "middleware") -> tuple[dict[str, Any], Callable[[], None]]:
    at.enable_telemetry(provider(), span_groups=spec)
    if form == "middleware":
        return {"middlewares": (client_middleware(),)}, at.disable_telemetry
    return {"trace_configs": [trace_config()]}, at.disable_telemetry


def _otel(sampled: bool) -> tuple[dict[str, Any], Callable[[], None]]:
    from opentelemetry.instrumentation.aiohttp_client import create_trace_config

    p = provider() if sampled else TracerProvider(sampler=ALWAYS_OFF)
    at.enable_telemetry(p, span_groups="job")
    return {"trace_configs": [create_trace_config(tracer_provider=p)]}, at.disable_telemetry


def _plain() -> tuple[dict[str, Any], Callable[[], None]]:
    at.enable_telemetry(provider(), span_groups="job")
    return {}, at.disable_telemetry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count, repeats = (300, 3) if args.quick else (2000, 5)
    print(f"python {platform.python_version()} on {platform.machine()}")
    ok = True
    with server("aiohttp") as url:
        client = measure(
            {
                "plain": _plain,
                "asynctrace, span recorded": lambda: _ours("job,per_prompt"),
                "asynctrace, per_prompt off": lambda: _ours("job"),
                "asynctrace trace_config, recorded": lambda: _ours("job,per_prompt", "tc"),
                "asynctrace trace_config, off": lambda: _ours("job", "tc"),
                "OpenTelemetry contrib, sampled": lambda: _otel(True),
                "OpenTelemetry contrib, unsampled": lambda: _otel(False),
            },
            url,
            count,
            repeats,
        )
    base = client["plain"]
    print(f"aiohttp client, sequential GETs: plain {base * 1e6:.0f} us/request")
    targets = {"asynctrace, span recorded": 1.25, "asynctrace, per_prompt off": 1.10}
    for name, seconds in client.items():
        if name == "plain":
            continue
        ratio = seconds / base
        target = targets.get(name)
        mark = "" if target is None else ("  ok" if ratio <= target else "  MISS")
        ok = ok and (target is None or ratio <= target)
        limit = f" (target <= {target:.2f}x)" if target else " (reference)"
        print(f"  {name:34s} {seconds * 1e6:7.0f} us  {ratio:5.2f}x{limit}{mark}")
    server_times: dict[str, float] = {}
    for kind in ("fastapi-plain", "fastapi-asynctrace", "fastapi-otel"):
        with server(kind) as url:
            server_times[kind] = measure({kind: _plain}, url, count, repeats)[kind]
    base = server_times["fastapi-plain"]
    print(f"FastAPI on uvicorn: plain {base * 1e6:.0f} us/request")
    for kind, target in (("fastapi-asynctrace", 1.30), ("fastapi-otel", None)):
        ratio = server_times[kind] / base
        good = target is None or ratio <= target
        ok = ok and good
        limit = f" (target <= {target:.2f}x)" if target else " (reference)"
        mark = "" if target is None else ("  ok" if good else "  MISS")
        print(f"  {kind:34s} {server_times[kind] * 1e6:7.0f} us  {ratio:5.2f}x{limit}{mark}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
