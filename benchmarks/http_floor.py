"""Where a recorded aiohttp client span's cost goes: client middlewares that do less and less.

Usage: python benchmarks/http_floor.py [--rounds N]

Same harness as ``bench_http.py`` (a server in its own process, sequential
GETs, each variant's requests alternating with the plain client's in one
event loop; the ratio of median times, and of the client's CPU per request).
The variants are: a middleware that does nothing; one that sets a constant
``traceparent``; one that starts and ends an unsampled SDK span; one with a
sampled SDK span and no header; the floor (that span plus its header);
asynctrace's parts on its fast provider (the carrier of the current span,
not sent; a span started, its ``traceparent`` set and the span ended before
the request goes out); and asynctrace, recorded and with ``per_prompt`` off.
As ``bench_http.py``, the client and the server run on cores of their own
(``--no-pin``: left to the scheduler). A reference script: it has no target
and always exits 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind

import asynctrace as at

sys.path.insert(0, str(Path(__file__).parent))
from _http_server import fast_provider
from bench_http import _floor, _ours, measure, pin_cores, provider, report, server

Setup = tuple[dict[str, Any], Callable[[], None]]
_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
_ATTRS = {"http.request.method": "GET", "url.full": "u", "server.address": "h", "server.port": 1}


def _with(middleware: Any) -> Setup:
    at.enable_telemetry(provider(), span_groups="job")
    return {"middlewares": (middleware,)}, at.disable_telemetry


def _noop() -> Setup:
    async def noop(request: Any, handler: Any) -> Any:
        return await handler(request)

    return _with(noop)


def _header() -> Setup:
    async def header(request: Any, handler: Any) -> Any:
        request.headers["traceparent"] = _TRACEPARENT
        return await handler(request)

    return _with(header)


def _span(sampled: bool) -> Setup:
    tracer = (provider() if sampled else TracerProvider(sampler=ALWAYS_OFF)).get_tracer("x")

    async def span_only(request: Any, handler: Any) -> Any:
        span = tracer.start_span(request.method, None, SpanKind.CLIENT, _ATTRS)
        response = await handler(request)
        span.set_attribute("http.response.status_code", response.status)
        span.end()
        return response

    return _with(span_only)


def _carrier_only() -> Setup:
    at.enable_telemetry(fast_provider(), span_groups="job,per_prompt")

    async def carrier(request: Any, handler: Any) -> Any:
        at.current_trace_carrier()  # made, not sent
        return await handler(request)

    return {"middlewares": (carrier,)}, at.disable_telemetry


def _fast_span_and_header() -> Setup:
    at.enable_telemetry(fast_provider(), span_groups="job,per_prompt")

    async def span_and_header(request: Any, handler: Any) -> Any:
        span = at.start_span("per_prompt", request.method, kind=SpanKind.CLIENT)
        request.headers.update(at.span_carrier(span))
        at.end_span(span)
        return await handler(request)

    return {"middlewares": (span_and_header,)}, at.disable_telemetry


def main() -> int:
    """Measure and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--no-pin", action="store_true", help="leave cores to the scheduler")
    args = parser.parse_args()
    pin_cores(args.no_pin)  # as bench_http.py: the client, the servers
    with server("aiohttp") as url:
        variants: dict[str, Callable[[], Setup]] = {
            "middleware doing nothing": _noop,
            "constant traceparent": _header,
            "unsampled SDK span": lambda: _span(False),
            "sampled SDK span, no header": lambda: _span(True),
            "floor: span + traceparent": _floor,
            "asynctrace: the current carrier, not sent": _carrier_only,
            "asynctrace: fast span + its traceparent": _fast_span_and_header,
            "asynctrace, span recorded": lambda: _ours("job,per_prompt"),
            "asynctrace, per_prompt off": lambda: _ours("job"),
        }
        results = measure(
            {name: (url, {}, url, setup) for name, setup in variants.items()}, 1000, args.rounds
        )
    print("against the plain client: median time per request (and the client's CPU):")
    report(results, {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
