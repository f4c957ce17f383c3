"""The demo's bytecodes on the event-loop thread, charged as ``bench_demo.py`` charges samples.

Usage: python benchmarks/demo_opcodes.py [on|off|floor] [--top N]

A reference beside ``bench_demo.py`` (no target; exits 0): sampling moves by
points between runs, the bytecodes a run executes do not. Runs the demo once
untimed, then once under ``sys.settrace`` with ``f_trace_opcodes`` on the loop
thread only (the main thread while ``asyncio.run`` runs), and charges each
opcode to the tracer when, walking outwards from its frame, a tracer frame
comes before any application frame or call back into the caller's code
(``bench_demo.kind`` and ``bench_demo.calls_back``). Prints the opcodes per
prompt group (128 a run): inside the tracer in all, by the innermost tracer
function (library code it calls included), by entry point (the outermost
tracer frame), and for the top entry points, by the code that ran.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_demo as bd
from demo_calls import run_hooked

GROUPS = bd.DEMO["steps"] * bd.DEMO["prompts"]
State = tuple[str | None, str | None]  # (innermost tracer function, entry point)


class Counts:
    """The opcodes of one run, charged by frame."""

    def __init__(self) -> None:
        self.state: dict[int, State] = {}
        self.inner: Counter[str] = Counter()
        self.entry: Counter[str] = Counter()
        self.exact: Counter[tuple[str, str]] = Counter()
        self.total = 0

    def classify(self, frame: FrameType) -> State:
        back = frame.f_back
        outer = None if back is None else self.state.get(id(back)) or self.classify(back)
        entry = outer[1] if outer else None
        what = bd.kind(frame.f_code)
        if what == bd.APP:
            state: State = (None, entry)
        elif what == bd.AT:
            label = bd.label(frame.f_code)
            state = (label, entry or label)
        elif (
            back is not None
            and bd.kind(back.f_code) == bd.AT
            and bd.calls_back(back.f_code, back.f_lasti)
        ):
            state = (None, entry)
        else:
            state = (outer[0] if outer else None, entry)
        self.state[id(frame)] = state
        return state

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            self.classify(frame)
            frame.f_trace_opcodes = True
        elif event == "opcode":
            self.total += 1
            inner, entry = self.state.get(id(frame)) or self.classify(frame)
            if inner is not None and entry is not None:
                code = frame.f_code
                self.inner[inner] += 1
                self.entry[entry] += 1
                name = getattr(code, "co_qualname", code.co_name)
                self.exact[(entry, f"{Path(code.co_filename).name}:{name}")] += 1
        return self.trace


def count(mode: str) -> Counts:
    """The loop thread's opcodes in one demo run of *mode* (after one untimed run)."""
    counts = Counts()
    run_hooked(mode, sys.settrace, counts.trace)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="on", choices=("on", "off", "floor"))
    parser.add_argument("--top", type=int, default=20, help="lines per list")
    options = parser.parse_args()
    counts = count(options.mode)
    inside = sum(counts.inner.values())
    print(
        f"{options.mode}: {counts.total:,} opcodes on the loop thread, {inside:,} inside the "
        f"tracer ({inside / max(counts.total, 1):.1%}); {inside / GROUPS:,.0f} per prompt group"
    )
    for title, counter in (
        ("innermost tracer function", counts.inner),
        ("entry point", counts.entry),
    ):
        print(f"per group, by {title}:")
        for name, n in counter.most_common(options.top):
            print(f"  {n / GROUPS:8.1f}  {name}")
    by_entry: defaultdict[str, list[tuple[int, str]]] = defaultdict(list)
    for (entry, code), n in counts.exact.items():
        by_entry[entry].append((n, code))
    for entry, _ in counts.entry.most_common(8):
        print(f"per group, under {entry}, by the code that ran:")
        for n, code in sorted(by_entry[entry], reverse=True)[: options.top]:
            print(f"  {n / GROUPS:8.1f}  {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
