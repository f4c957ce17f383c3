"""HTTP integration figures, side by side with OpenTelemetry's contrib instrumentations.

Usage: python benchmarks/bench_http.py [--quick]

Servers run in their own processes on 127.0.0.1; the client sends sequential
GETs, each over a keep-alive aiohttp session. Each figure is the time per
request relative to the uninstrumented one, measured in pairs: one event loop
holds two sessions, the variant's and the baseline's, and sends its requests
alternately through one and the other (a client variant and the plain client
to the same server; the plain client to an instrumented server and to the
plain one), so the two sides of every pair see the same machine, a few
hundred microseconds apart. In a round, each variant runs once (the variants
in turn) and its ratio is the median time of its requests over the median of
its baseline's; the figure is the median of the rounds' ratios. Whole runs of
1,000 requests per variant, one after the other, measured the VM's drift as
much as the code: its speed moves by more than these figures' margins within
seconds, and one such ratio read 1.11 while the two variants' median times
were in the other order. Printed beside each figure: the CPU per request
over the baseline's, of the client's thread for a client variant and of the
server's whole process (its exporter's thread included) for a server
variant. CPU ratios read higher than time ratios: a request's time also
holds the other end's work, which one end's instrumentation does not add to.

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
from dataclasses import dataclass, field
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
SERVER_PIDS: dict[str, int] = {}  # base URL -> the server's process id


def process_cpu_ns(pid: int) -> int:
    """CPU time of every thread of process *pid*, in nanoseconds (Linux schedstat; else 0)."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # no /proc: the server's CPU is not reported
        return 0
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):  # a thread that ended
            total += int((task / "schedstat").read_text().split()[0])
    return total


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
            SERVER_PIDS[url] = proc.pid
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


async def _get_once(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(url + "/items/1") as r:
        await r.read()


@dataclass
class Side:
    """One side of a pairing: seconds per request, and CPU per request on each end."""

    wall: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    server_cpu_s: float = 0.0  # the server process's CPU over the timed requests


async def _paired(
    base_url: str, base_kwargs: dict[str, Any], url: str, kwargs: dict[str, Any], count: int
) -> tuple[Side, Side]:
    """*count* requests through each session, alternately: the baseline's side, the variant's."""
    base, ours = Side(), Side()
    clock, cpu = time.perf_counter, time.thread_time
    async with (
        aiohttp.ClientSession(**base_kwargs) as base_session,
        aiohttp.ClientSession(**kwargs) as session,
    ):
        sides = ((base_session, base_url, base), (session, url, ours))
        for i in range(10):  # warm both connections
            for s, u, _ in sides:
                async with s.get(f"{u}/items/{i}") as response:
                    await response.read()
        # Two servers: each one's CPU is its side's (one server: the client's CPU only).
        pids = [SERVER_PIDS[base_url], SERVER_PIDS[url]] if base_url != url else []
        before = [process_cpu_ns(pid) for pid in pids]
        with at.umbrella_span("job", "bench"):
            for i in range(count):  # which side goes first alternates too
                for s, u, side in sides if i % 2 == 0 else sides[::-1]:
                    wall, used = clock(), cpu()
                    async with s.get(f"{u}/items/{i}") as response:
                        await response.read()
                    side.client_cpu.append(cpu() - used)
                    side.wall.append(clock() - wall)
        for side, pid, start in zip((base, ours), pids, before, strict=False):
            side.server_cpu_s = (process_cpu_ns(pid) - start) / 1e9
    return base, ours


Setup = Callable[[], tuple[dict[str, Any], Callable[[], None]]]
# A variant: the baseline's URL and session arguments, the variant's URL and setup.
Variant = tuple[str, dict[str, Any], str, Setup]


@dataclass
class Paired:
    """A variant against its baseline: the ratios of each round, and their medians."""

    client_cpu: list[float] = field(default_factory=list)  # mean CPU per request, ours/base
    server_cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)  # median seconds per request, ours/base
    us: list[tuple[float, float]] = field(default_factory=list)  # median wall, ours and base
    cpu_us: list[tuple[float, float]] = field(default_factory=list)  # mean CPU, ours and base

    def ratio(self, what: str) -> float:
        return statistics.median(getattr(self, what))


def measure(variants: dict[str, Variant], count: int, rounds: int) -> dict[str, Paired]:
    """Each variant paired with its baseline, request by request, once per round."""
    results = {name: Paired() for name in variants}
    for _ in range(rounds):
        for name, (base_url, base_kwargs, url, setup) in variants.items():
            kwargs, teardown = setup()
            try:
                base, ours = asyncio.run(_paired(base_url, base_kwargs, url, kwargs, count))
            finally:
                teardown()
            paired = results[name]
            paired.client_cpu.append(sum(ours.client_cpu) / sum(base.client_cpu))
            if base.server_cpu_s:
                paired.server_cpu.append(ours.server_cpu_s / base.server_cpu_s)
                ours_cpu, base_cpu = ours.server_cpu_s, base.server_cpu_s
            else:
                ours_cpu, base_cpu = sum(ours.client_cpu), sum(base.client_cpu)
            paired.cpu_us.append((ours_cpu / count * 1e6, base_cpu / count * 1e6))
            wall, base_wall = statistics.median(ours.wall), statistics.median(base.wall)
            paired.wall.append(wall / base_wall)
            paired.us.append((wall * 1e6, base_wall * 1e6))
    return results


def report(results: dict[str, Paired], targets: dict[str, float]) -> bool:
    """Print each variant against its baseline; False if a target is missed."""
    ok = True
    for name, paired in results.items():
        r = paired.ratio("wall")
        target = targets.get(name)
        good = target is None or r <= target
        ok = ok and good
        limit = f" (target <= {target:.2f}x)" if target else " (reference)"
        mark = "" if target is None else ("  ok" if good else "  MISS")
        us = statistics.median(u for u, _ in paired.us)
        base_us = statistics.median(b for _, b in paired.us)
        cpu = paired.server_cpu or paired.client_cpu
        cpu_us = statistics.median(u for u, _ in paired.cpu_us)
        base_cpu_us = statistics.median(b for _, b in paired.cpu_us)
        print(
            f"  {name:40s} {us:5.0f} vs {base_us:4.0f} us {r:6.3f}x{limit}{mark}"
            f"  (rounds {min(paired.wall):.3f}-{max(paired.wall):.3f}; "
            f"{'server' if paired.server_cpu else 'client'} CPU {cpu_us:.0f} vs "
            f"{base_cpu_us:.0f} us, {statistics.median(cpu):.3f}x)"
        )
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


def pin_cores(no_pin: bool) -> bool:
    """The client (this process) on the first core, servers started later on the second.

    Nothing is pinned with *no_pin*, or with fewer than two cores; returns whether
    it pinned.
    """
    global PIN
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    PIN = not no_pin and len(cores) >= 2
    if PIN:
        os.sched_setaffinity(0, {cores[0]})
        SERVER_CORE[0] = cores[1]
    return PIN


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-pin", action="store_true", help="leave cores to the scheduler")
    args = parser.parse_args()
    pin_cores(args.no_pin)
    count, rounds = (200, 2) if args.quick else (1000, 8)
    placement = "client and servers on their own cores" if PIN else "cores left to the scheduler"
    print(f"python {platform.python_version()} on {platform.machine()}; {placement}")
    print(f"{rounds} rounds of {count} request pairs per variant")
    with server("aiohttp") as url:
        client_variants: dict[str, Setup] = {
            "asynctrace, span recorded": lambda: _ours("job,per_prompt"),
            "asynctrace, per_prompt off": lambda: _ours("job"),
            "asynctrace, per_prompt off, scopes": lambda: _ours("job", scopes=True),
            "asynctrace, span recorded, scopes": lambda: _ours("job,per_prompt", scopes=True),
            "asynctrace on the SDK provider, recorded": lambda: _ours(
                "job,per_prompt", kind="sdk"
            ),
            "asynctrace trace_config, recorded": lambda: _ours("job,per_prompt", "tc"),
            "asynctrace trace_config, off": lambda: _ours("job", "tc"),
            "floor: bare SDK span middleware": _floor,
            "OpenTelemetry contrib, sampled": lambda: _otel(True),
            "OpenTelemetry contrib, unsampled": lambda: _otel(False),
        }
        client = measure(
            {name: (url, {}, url, setup) for name, setup in client_variants.items()},
            count,
            rounds,
        )
    print("aiohttp client, sequential GETs, against the plain client:")
    targets = {
        "asynctrace, span recorded": 1.10,
        "asynctrace, per_prompt off": 1.10,
        "asynctrace, per_prompt off, scopes": 1.10,
    }
    ok = report(client, targets)
    with contextlib.ExitStack() as stack:
        kinds = ("fastapi-plain", "fastapi-asynctrace", "fastapi-asynctrace-sdk", "fastapi-otel")
        urls = {kind: stack.enter_context(server(kind)) for kind in kinds}
        plain = urls.pop("fastapi-plain")
        fastapi = measure(
            {kind: (plain, {}, url, _plain) for kind, url in urls.items()}, count, rounds
        )
    print("FastAPI on uvicorn, against the plain app:")
    ok = report(fastapi, {"fastapi-asynctrace": 1.10}) and ok
    with contextlib.ExitStack() as stack:
        plain = stack.enter_context(server("fastapi-plain"))
        url = stack.enter_context(server("fastapi-asynctrace-scopes"))
        scoped = measure(
            {
                "fastapi-asynctrace-scopes": (
                    plain,
                    {"headers": SCOPE_HEADERS},
                    url,
                    _plain_with_scope_headers,
                )
            },
            count,
            rounds,
        )
    print("FastAPI on uvicorn, every request carrying the caller's scopes in baggage:")
    ok = report(scoped, {"fastapi-asynctrace-scopes": 1.10}) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
