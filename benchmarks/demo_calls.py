"""The demo's calls into the tracer, per prompt group, on the event-loop thread.

Usage: python benchmarks/demo_calls.py [--top N]

A reference beside ``bench_demo.py`` (no target; exits 0). The sampled share
moves by a percentage point between runs of this host; what the code does
per prompt group does not. This script runs the same demo once in each of
``bench_demo.py``'s modes (telemetry on with every group, telemetry off, and
the floor tracer), with a ``sys.setprofile`` hook on the loop thread only
(the main thread, while ``asyncio.run`` runs; the Gym server's thread is not
counted), and counts:

- *Python calls*: frames of the tracer's code (asynctrace and its contrib
  integrations, or the floor tracer: ``bench_demo.kind``), plus the frames of
  library code that tracer code calls directly (OpenTelemetry's API, yarl's
  properties, asyncio's helpers);
- *C calls*: built-in functions and methods the tracer's code calls.

Each count is divided by the demo's 128 prompt groups (a group's session, its
scopes, spans, phases and HTTP request, plus its share of the steps' own
spans). A coroutine frame counts once per resumption, and time-driven work
(polls, heartbeats) runs more often under the hook, which slows the run: read
those lines as rough.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_demo as bd

GROUPS = bd.DEMO["steps"] * bd.DEMO["prompts"]


def count(mode: str) -> Counter[str]:
    """The tracer's calls during one demo run in *mode* (after one untimed run)."""
    calls: Counter[str] = Counter()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call":
            what = bd.kind(code)
            if what == bd.AT:
                calls[bd.label(code)] += 1
            elif (
                what == bd.LIB
                and frame.f_back is not None
                and bd.kind(frame.f_back.f_code) == bd.AT
            ):
                name = getattr(code, "co_qualname", code.co_name)
                calls[f"lib:{Path(code.co_filename).name}:{name}"] += 1
        elif event == "c_call" and bd.kind(code) == bd.AT:
            calls[f"C:{getattr(arg, '__qualname__', '?')}"] += 1

    run_hooked(mode, sys.setprofile, hook)
    return calls


def run_hooked(mode: str, install: Callable[[Any], object], hook: Any) -> None:
    """Run the demo in *mode* once untimed, then once with ``install(hook)`` on the loop
    thread (the main thread, while ``asyncio.run`` runs; not the Gym server's thread)."""
    run = asyncio.run

    def hooked(main: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return run(main, **kwargs)  # the Gym server's own loop
        install(hook)
        try:
            return run(main, **kwargs)
        finally:
            install(None)

    bd.run_demo(mode, bd.DEMO)  # warm: imports, first-run caches
    asyncio.run = hooked  # type: ignore[assignment]
    try:
        bd.run_demo(mode, bd.DEMO)
    finally:
        asyncio.run = run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=12, help="functions listed per mode")
    options = parser.parse_args()
    print(f"python {sys.version.split()[0]}; the demo's {GROUPS} prompt groups, one run per mode")
    for mode in ("on", "off", "floor"):
        calls = count(mode)
        python = sum(n for name, n in calls.items() if not name.startswith("C:"))
        builtin = sum(n for name, n in calls.items() if name.startswith("C:"))
        print(
            f"{mode:>5}: {python / GROUPS:6.1f} Python calls and {builtin / GROUPS:6.1f} C calls "
            f"of the tracer per prompt group"
        )
        frames = [(name, n) for name, n in calls.most_common() if not name.startswith("C:")]
        for name, n in frames[: options.top]:
            print(f"         {n / GROUPS:6.2f}  {name}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
