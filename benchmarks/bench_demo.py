"""End to end: the share of the demo's event-loop thread CPU spent inside asynctrace.

Usage: python benchmarks/bench_demo.py [--quick] [--json PATH] [--rounds N]

Figure (target in brackets): the rollout-pump demo (``asynctrace demo`` at its
default size: 8 steps x 16 prompt groups, 4 in flight, a checkpoint every 2
steps) with every span group on (``--span-groups all``) spends at most 3 % of
its event-loop thread's CPU inside asynctrace [<= 3 %], by sampling (1. below).
Exits 1 if missed. Takes about 45 s; ``--quick``: 4 steps x 8 prompt groups,
3 rounds, about 10 s (a smoke run: too few samples for a verdict).

What runs. The demo's own pieces, in this process, wired as ``run_demo`` wires
them: ``init_driver`` with the demo's configuration, as the demo builds it
(``_config.demo_config``: chrome exporter, session tracer and goodput
records, writing to a temporary directory that is removed afterwards),
the FastAPI "Gym" server on uvicorn in its own thread, and the driver
coroutine (``asynctrace_contrib.demo.driver._run``) under ``asyncio.run`` on
the main thread, which is the event-loop thread. Only that thread counts, and
only while ``asyncio.run`` runs (the CPU of ``init_driver`` and ``shutdown`` on
it is reported apart); the Gym server, the collector, the checkpoint
finalizer, worker threads and the exporters' writer threads are other threads.
Each round runs the demo once with telemetry on and once with
``{"enabled": False}`` (session tracer off too; asynctrace's scopes, helpers
and middleware still run, as no-ops where they would trace), the order
flipping every round, after one untimed warm-up run of each.

1. Sampling (the verdict). ``SIGALRM`` every 1 ms of wall time
   (``setitimer(ITIMER_REAL)``); CPython runs the handler on the main thread at
   its next bytecode boundary and hands it the interrupted frame, whose stack
   (code objects) is kept. Unlike a sampler *thread*, this does not have to win
   the GIL from the sampled thread: a thread sampler only looks where the loop
   thread lets go of the GIL (select, socket writes, hashing), and here, at the
   default 5 ms switch interval, it saw 0 of 392 busy samples inside asynctrace
   (11 % with the switch interval at 100 us, which in turn added a quarter to
   the loop's CPU; the numbers of one measurement on 2 CPUs). A sample whose
   innermost frame is the selector's ``select`` is idle; one in a ``threading``
   wait (a thread join) is blocked; neither is CPU, and the rest are the *busy*
   samples, the denominator. A busy sample is *inside asynctrace* when, walking
   from the innermost frame outwards, an asynctrace frame (``asynctrace``,
   ``asynctrace_contrib`` except ``asynctrace_contrib/demo``, a wrapper
   asynctrace compiled) comes before any application frame (the demo's code,
   this script) and before any call asynctrace makes back into its caller's
   code (``PASS_THROUGH``: the aiohttp client middleware's
   ``await handler(request)``, which is the rest of aiohttp's request, a
   ``wait_until`` predicate, a ``bind_context`` target, a user hook). What asynctrace calls
   for itself (standard library, OpenTelemetry, anyio) is inside asynctrace.
   Printed: the share with its binomial standard error (the spread between runs
   is wider: the run-by-run shares are printed too), the same share with
   telemetry off, the top 10 asynctrace functions (innermost asynctrace frame)
   and the top API entry points (outermost), and the cruder "any frame" rule
   (any asynctrace frame on the stack), an upper bound that also charges
   aiohttp's request work under the middleware.
2. CPU difference. ``time.thread_time()`` of the loop thread over the same
   runs (the sampler's handler time subtracted), on versus off:
   (on - off) / on of the medians. It sees what sampling cannot (garbage
   collection of span objects, GIL hand-offs to the exporters' threads, cache
   effects) and is noisy: the demo is timer driven, and its loop-thread CPU
   varies by 10 to 20 % from run to run; the round-by-round differences are
   printed too.
3. The anchor, in the same rounds: the same demo recorded by AReaL 1.0.4's
   ``perf_tracer`` instead (``_demo_areal.py``: its scopes, session tracer and
   ``save()`` at the same places, asynctrace off; no trace context over HTTP,
   no loop-stall watch, no goodput, which it does not have), sampled and
   classified by the same rules with AReaL's frames as the tracer's. AReaL
   writes its files on the calling thread with ``os.fsync``: a sample
   waiting in that call is blocked, not busy. Printed: its share of the loop
   thread's busy samples and its CPU difference against telemetry off, and
   ours against it. A reference, not the verdict; if AReaL cannot be loaded
   (``pip install --no-deps areal==1.0.4 orjson colorlog``), the script says
   so loudly and exits 1.
4. The floor, in the same rounds: the same demo recorded by the least a
   tracer can do at the same places (``_demo_floor.py`` with
   ``_floor_tracer.py``: the loop thread's spans as OpenTelemetry API spans
   made current in the OpenTelemetry context, an id, two clock reads and a
   tuple each; a ``traceparent`` per Gym request; the session records;
   nothing written, nothing else), asynctrace off, sampled and classified by
   the same rules with the floor tracer's frames as the tracer's. Its
   attributes are built by hand in ``_demo_floor.py``, which counts as the
   application (asynctrace's scopes do that work inside asynctrace), so the
   floor is, if anything, a little low. Printed: its share of the loop
   thread's busy samples, and ours against it: how much of the target a
   tracer recording this content uses on this machine at the least.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import linecache
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import asynctrace_contrib
from asynctrace_contrib.demo import driver as demo_driver
from asynctrace_contrib.demo._config import demo_config
from asynctrace_contrib.demo.gym import GymServer

import asynctrace as at

sys.path.insert(0, str(Path(__file__).parent))
import _demo_floor
import _floor_tracer
from _areal import AnchorMissing, load_perf_tracer

TARGET = 0.03
SAMPLE_INTERVAL_S = 0.001
DEMO = {"steps": 8, "prompts": 16, "max_inflight": 4, "checkpoint_every": 2}
QUICK_DEMO = {"steps": 4, "prompts": 8, "max_inflight": 4, "checkpoint_every": 2}


def _dir(module: Any) -> str:
    return os.path.realpath(os.path.dirname(str(module.__file__))) + os.sep


AT_DIRS = (_dir(at), _dir(asynctrace_contrib))
DEMO_DIR = _dir(demo_driver)
THIS_FILE = os.path.realpath(__file__)
ANCHOR_FILE = os.path.realpath(Path(__file__).with_name("_demo_areal.py"))
FLOOR_DEMO_FILE = os.path.realpath(_demo_floor.__file__)
FLOOR_FILE = os.path.realpath(_floor_tracer.__file__)  # the floor's tracer frames
AREAL_DIRS: tuple[str, ...] = ()  # AReaL's package, once loaded: the anchor's tracer frames

# Asynctrace frames that call back into the caller's code: the marker is the
# text of the calling line. A frame of non-asynctrace code called from such a
# line is the caller's work, not asynctrace's.
PASS_THROUGH: dict[tuple[str, str], str] = {
    (
        "aiohttp_client/_middleware.py",
        "_make_middleware.<locals>.asynctrace_middleware",
    ): "handler(",
    # (on the Gym's thread here)
    ("fastapi/_middleware.py", "AsyncTraceMiddleware.__call__"): "self.app(",
    ("_pump.py", "wait_until.<locals>.check"): "ready(",
    ("_bind_context.py", "bind_context.<locals>.bound"): ".run(fn",
    ("aiohttp_client/_options.py", "run_hook"): "hook(",
    ("<asynctrace wrapper", ""): "_at_fn(",
}

AT, APP, LIB = "asynctrace", "app", "lib"
_kinds: dict[CodeType, str] = {}
_lines: dict[tuple[CodeType, int], str] = {}


def kind(code: CodeType) -> str:
    """Whether *code* is the tracer's (asynctrace, or AReaL's for the anchor), the
    application's, or library code."""
    found = _kinds.get(code)
    if found is None:
        name = code.co_filename
        if name.startswith("<asynctrace"):
            found = AT
        elif name.startswith("<"):
            found = LIB
        else:
            real = os.path.realpath(name)
            if real.startswith(DEMO_DIR) or real in (THIS_FILE, ANCHOR_FILE, FLOOR_DEMO_FILE):
                found = APP
            elif real.startswith(AT_DIRS + AREAL_DIRS) or real == FLOOR_FILE:
                found = AT
            else:
                found = LIB
        _kinds[code] = found
    return found


def label(code: CodeType) -> str:
    """``package/module.py:qualname`` of an asynctrace function."""
    name = code.co_filename
    if not name.startswith("<"):
        real = os.path.realpath(name)
        for root in AT_DIRS + AREAL_DIRS + (os.path.dirname(FLOOR_FILE) + os.sep,):
            if real.startswith(root):
                name = os.path.basename(root.rstrip(os.sep)) + "/" + real[len(root) :]
                break
    return f"{name}:{getattr(code, 'co_qualname', code.co_name)}"


def _source_line(code: CodeType, lasti: int) -> str:
    key = (code, lasti)
    line = _lines.get(key)
    if line is None:
        number = None
        for start, end, lineno in code.co_lines():
            if start <= lasti < end:
                number = lineno
                break
        line = linecache.getline(code.co_filename, number) if number else ""
        _lines[key] = line
    return line


def calls_back(code: CodeType, lasti: int) -> bool:
    """Whether this asynctrace frame is calling into its caller's code."""
    qualname = getattr(code, "co_qualname", code.co_name)
    for (where, func), marker in PASS_THROUGH.items():
        if (where.startswith("<") and code.co_filename.startswith(where)) or (
            code.co_filename.endswith(os.sep + where) and (not func or func == qualname)
        ):
            line = _source_line(code, lasti)
            if not line and where.startswith("<"):
                return True  # a generated wrapper: no source to look at
            return marker in line
    return False


Stack = tuple[tuple[CodeType, int], ...]  # (code, f_lasti), innermost first


class Sampler:
    """Samples the main thread's stack every *interval_s* seconds of wall time.

    ``SIGALRM`` from ``setitimer(ITIMER_REAL)``; CPython runs the handler on
    the main thread at its next bytecode boundary, with the interrupted frame,
    so a sample is where the thread is, whether or not it holds the GIL. A
    select sleeping then is interrupted (and retried, PEP 475): it shows as
    the ``select`` frame. The handler's own CPU time (on the sampled thread)
    is counted apart, in ``handler_cpu_s``.
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.stacks: list[Stack] = []
        self.handler_cpu_s = 0.0
        self._previous: Any = None

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        started = time.thread_time()
        if frame is not None and frame.f_code is _SAMPLE_CODE:
            return  # a signal during the handler itself (rare): not a sample of the demo
        stack = []
        while frame is not None:
            stack.append((frame.f_code, frame.f_lasti))
            frame = frame.f_back
        self.stacks.append(tuple(stack))
        self.handler_cpu_s += time.thread_time() - started

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the sampler samples the main thread: start it there")
        self._previous = signal.signal(signal.SIGALRM, self._sample)
        signal.setitimer(signal.ITIMER_REAL, self.interval_s, self.interval_s)

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)


_SAMPLE_CODE = Sampler._sample.__code__


@dataclass
class Tally:
    """Classified samples of one mode, summed over its runs."""

    samples: int = 0
    idle: int = 0
    blocked: int = 0
    inside: int = 0  # inside asynctrace (callbacks excluded): the figure
    any_frame: int = 0  # some asynctrace frame on the stack
    functions: Counter[str] = field(default_factory=Counter)  # innermost asynctrace frame
    entries: Counter[str] = field(default_factory=Counter)  # outermost: the API called
    added: Counter[str] = field(default_factory=Counter)  # what only the any-frame rule counts

    @property
    def busy(self) -> int:
        return self.samples - self.idle - self.blocked

    def share(self) -> float:
        return self.inside / self.busy if self.busy else 0.0

    def any_share(self) -> float:
        return self.any_frame / self.busy if self.busy else 0.0

    def error(self) -> float:
        """Binomial standard error of :meth:`share`."""
        p = self.share()
        return (p * (1 - p) / self.busy) ** 0.5 if self.busy else 0.0

    def add(self, stack: Stack) -> None:
        self.samples += 1
        if not stack:
            self.blocked += 1  # no Python frame: not running Python code
            return
        top = stack[0][0]
        if top.co_name == "select" and top.co_filename.endswith("selectors.py"):
            self.idle += 1
            return
        if top.co_filename.endswith("threading.py") and top.co_name in (
            "wait",
            "_wait_for_tstate_lock",
        ):
            self.blocked += 1
            return
        if "os.fsync(" in _source_line(top, stack[0][1]):
            self.blocked += 1  # waiting for the disk (AReaL's writes, on the calling thread)
            return
        inside: CodeType | None = None
        for i, (code, _lasti) in enumerate(stack):
            what = kind(code)
            if what == APP:
                break
            if what == AT:
                inside = code
                break
            if i + 1 < len(stack):
                outer, outer_lasti = stack[i + 1]
                if kind(outer) == AT and calls_back(outer, outer_lasti):
                    break
        ours = [code for code, _ in stack if kind(code) == AT]
        if inside is not None:
            self.inside += 1
            self.functions[label(inside)] += 1
            self.entries[label(ours[-1])] += 1
        if ours:
            self.any_frame += 1
            if inside is None:
                self.added[label(ours[-1])] += 1


@dataclass
class Run:
    """One demo run: the loop thread's CPU and wall time, its samples."""

    mode: str
    wall_s: float
    cpu_s: float  # the sampler's handler excluded
    sampler_cpu_s: float
    init_cpu_s: float
    shutdown_cpu_s: float
    rollouts: int
    trace_bytes: int
    stacks: list[Stack]


def config(mode: str, out: Path, demo: Mapping[str, int]) -> dict[str, Any]:
    """The demo's own configuration, built by the demo itself as ``run_demo`` builds it
    (every span group; the chrome exporter only, not those the environment names), or
    telemetry off (also for the anchor's and the floor's runs)."""
    if mode == "on":
        return demo_config(out, "all", [], dict(demo))
    return {"enabled": False, "output_dir": str(out)}


def flush_threshold(out: Path, demo: Mapping[str, int]) -> int:
    """Session records per write in the demo's configuration: the anchor writes as often."""
    threshold = config("on", out, demo)["session_tracer"]["flush_threshold"]
    assert isinstance(threshold, int)
    return threshold


def run_demo(mode: str, demo: Mapping[str, int]) -> Run:
    """Run the demo once, sampling its loop thread: *mode* "on", "off", "floor"
    (asynctrace off, the floor tracer recording) or "areal" (asynctrace off,
    AReaL's tracer recording)."""
    with tempfile.TemporaryDirectory(prefix="asynctrace-bench-demo-") as tmp:
        out = Path(tmp)
        cpu = time.thread_time()
        telemetry = at.init_driver(config(mode, out, demo))
        if mode == "areal":
            _demo_areal.configure(out, flush_threshold(out, demo))
        init_cpu = time.thread_time() - cpu
        gym = GymServer()
        sampler = Sampler(SAMPLE_INTERVAL_S)
        try:
            gym.start()
            wall, cpu = time.perf_counter(), time.thread_time()
            sampler.start()
            try:
                sizes = (
                    demo["steps"],
                    demo["prompts"],
                    demo["max_inflight"],
                    demo["checkpoint_every"],
                    gym.url,
                )
                if mode == "areal":
                    rollouts = asyncio.run(_demo_areal.run(*sizes))
                elif mode == "floor":
                    rollouts = asyncio.run(_demo_floor.run(*sizes))
                else:
                    rollouts = asyncio.run(demo_driver._run(out, *sizes))
            finally:
                sampler.stop()
            cpu = time.thread_time() - cpu - sampler.handler_cpu_s
            wall = time.perf_counter() - wall
        finally:
            gym.stop()
            shutdown_cpu = time.thread_time()
            telemetry.shutdown()
            shutdown_cpu = time.thread_time() - shutdown_cpu
        pattern = "traces-*.jsonl" if mode != "areal" else "**/perf_tracer/*.jsonl"
        trace_bytes = sum(p.stat().st_size for p in out.glob(pattern))
    if mode == "floor":  # the floor keeps its records in memory: their count, not bytes
        trace_bytes = len(_floor_tracer.records)
    if len(rollouts) != demo["steps"] * demo["prompts"]:
        expected = demo["steps"] * demo["prompts"]
        raise RuntimeError(f"the demo finished {len(rollouts)} rollouts, not {expected}")
    if mode != "off" and not trace_bytes:
        raise RuntimeError(f"the demo wrote no trace ({mode})")
    return Run(
        mode,
        wall,
        cpu,
        sampler.handler_cpu_s,
        init_cpu,
        shutdown_cpu,
        len(rollouts),
        trace_bytes,
        sampler.stacks,
    )


def summary(runs: list[Run]) -> tuple[Tally, dict[str, float]]:
    """The samples of *runs* classified, and the medians of their timings."""
    tally = Tally()
    for run in runs:
        for stack in run.stacks:
            tally.add(stack)
    shares = []
    for run in runs:
        alone = Tally()
        for stack in run.stacks:
            alone.add(stack)
        shares.append(alone.share())
    figures = {
        "share_run_min": min(shares),
        "share_run_median": statistics.median(shares),
        "share_run_max": max(shares),
        "wall_s": statistics.median(r.wall_s for r in runs),
        "loop_cpu_s": statistics.median(r.cpu_s for r in runs),
        "sampler_cpu_s": statistics.median(r.sampler_cpu_s for r in runs),
        "init_cpu_s": statistics.median(r.init_cpu_s for r in runs),
        "shutdown_cpu_s": statistics.median(r.shutdown_cpu_s for r in runs),
        "trace_bytes": statistics.median(r.trace_bytes for r in runs),
    }
    return tally, figures


def _tally_json(tally: Tally) -> dict[str, Any]:
    return {
        "samples": tally.samples,
        "idle_select": tally.idle,
        "blocked": tally.blocked,
        "busy": tally.busy,
        "inside_asynctrace": tally.inside,
        "share": round(tally.share(), 4),
        "share_stderr": round(tally.error(), 4),
        "any_frame": tally.any_frame,
        "any_frame_share": round(tally.any_share(), 4),
        "top_functions": dict(tally.functions.most_common(10)),
        "top_entry_points": dict(tally.entries.most_common(10)),
        "any_frame_adds": dict(tally.added.most_common(5)),
    }


def _reference(
    runs: list[Run], cpu_off_s: float
) -> tuple[Tally, dict[str, float], list[float], float, dict[str, Any]]:
    """A reference mode (the floor, the anchor): its samples, timings, loop-thread CPU
    per run, CPU against telemetry off, and all of it as JSON."""
    tally, figures = summary(runs)
    cpu = [r.cpu_s for r in runs]
    diff = (figures["loop_cpu_s"] - cpu_off_s) / figures["loop_cpu_s"]
    as_json = {**_tally_json(tally), **figures, "loop_cpu_runs_s": cpu}
    as_json["estimate_cpu_difference"] = round(diff, 4)
    return tally, figures, cpu, diff, as_json


def _ms(values: list[float]) -> str:
    return " ".join(f"{v * 1e3:.0f}" for v in values)


def _top(title: str, counts: Counter[str], busy: int, n: int) -> None:
    print(title)
    for name, count in counts.most_common(n):
        print(f"  {count:6,}  {count / busy:6.2%}  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller demo, fewer rounds")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument(
        "--rounds", type=int, help="rounds of one on and one off run (10; quick 3)"
    )
    options = parser.parse_args()
    demo = QUICK_DEMO if options.quick else DEMO
    rounds = options.rounds or (3 if options.quick else 10)
    started = time.perf_counter()
    print(
        f"python {platform.python_version()} on {platform.machine()} ({platform.system()}), "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"demo: {demo['steps']} steps x {demo['prompts']} prompt groups, "
        f"{demo['max_inflight']} in flight, checkpoint every {demo['checkpoint_every']}; "
        f"{rounds} rounds of on/off after a warm-up; loop thread sampled every "
        f"{SAMPLE_INTERVAL_S * 1e3:g} ms (SIGALRM)"
    )
    anchor = load_anchor()
    modes = ("on", "off", "floor", "areal") if anchor else ("on", "off", "floor")
    for mode in modes:
        run_demo(mode, demo)  # warm-up: imports, first calls, the OS's socket buffers
    runs: dict[str, list[Run]] = {mode: [] for mode in modes}
    for i in range(rounds):
        for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:  # the order rotates
            runs[mode].append(run_demo(mode, demo))
    on, on_fig = summary(runs["on"])
    off, off_fig = summary(runs["off"])

    for mode, tally, fig in (("on ", on, on_fig), ("off", off, off_fig)):
        what = "span_groups=all" if mode == "on " else "enabled=False"
        print(
            f"{mode} {what}: per run (median) wall {fig['wall_s']:.2f} s, loop-thread CPU "
            f"{fig['loop_cpu_s'] * 1e3:.0f} ms (sampler handler {fig['sampler_cpu_s'] * 1e3:.1f}"
            f" ms subtracted; apart: init_driver {fig['init_cpu_s'] * 1e3:.1f} ms, shutdown "
            f"{fig['shutdown_cpu_s'] * 1e3:.1f} ms), trace {fig['trace_bytes'] / 1e3:.0f} kB"
        )
        print(
            f"    samples {tally.samples:,}: idle in select {tally.idle:,}, blocked "
            f"{tally.blocked:,}, busy {tally.busy:,}; inside asynctrace {tally.inside:,} = "
            f"{tally.share():.2%} +- {tally.error():.2%} of busy (any-frame rule: "
            f"{tally.any_frame:,} = {tally.any_share():.2%}); run by run: median "
            f"{fig['share_run_median']:.1%}, from {fig['share_run_min']:.1%} to "
            f"{fig['share_run_max']:.1%}"
        )
    _top(
        "top 10 asynctrace functions, telemetry on (innermost asynctrace frame; samples, "
        "share of busy):",
        on.functions,
        on.busy,
        10,
    )
    _top(
        "top asynctrace entry points, telemetry on (outermost asynctrace frame):",
        on.entries,
        on.busy,
        8,
    )
    if off.entries:
        _top("top asynctrace entry points, telemetry off:", off.entries, off.busy, 5)
    if on.added:
        _top(
            "what the any-frame rule adds, telemetry on (outermost asynctrace frame):",
            on.added,
            on.busy,
            3,
        )
    cpu_on = [r.cpu_s for r in runs["on"]]
    cpu_off = [r.cpu_s for r in runs["off"]]
    print(f"loop-thread CPU per run, ms: on {_ms(cpu_on)}; off {_ms(cpu_off)}")
    share = on.share()
    cpu_on_s, cpu_off_s = on_fig["loop_cpu_s"], off_fig["loop_cpu_s"]
    diff = (cpu_on_s - cpu_off_s) / cpu_on_s
    print(
        f"estimate 1, sampling: {share:.2%} +- {on.error():.2%} of the loop thread's busy "
        f"samples inside asynctrace ({on.inside:,} of {on.busy:,}; about "
        f"{share * cpu_on_s * 1e3:.0f} ms per run); telemetry off: {off.share():.2%}"
    )
    paired = sorted((a - b) / a for a, b in zip(cpu_on, cpu_off, strict=True))
    print(
        f"estimate 2, loop-thread CPU on vs off: ({cpu_on_s * 1e3:.0f} - {cpu_off_s * 1e3:.0f})"
        f" / {cpu_on_s * 1e3:.0f} ms = {diff:.2%} (medians over {rounds} runs each; "
        f"round by round: median {statistics.median(paired):.1%}, from {paired[0]:.1%} "
        f"to {paired[-1]:.1%})"
    )
    floor, floor_fig, cpu_floor, floor_diff, floor_json = _reference(runs["floor"], cpu_off_s)
    print(
        f"floor, the least a tracer does at the same places (_floor_tracer.py: a current "
        f"OpenTelemetry span, an id, two clock reads and a tuple a span, the attributes "
        f"built by hand; "
        f"{floor_fig['trace_bytes']:.0f} records a run, kept in memory): per run (median) "
        f"loop-thread CPU {floor_fig['loop_cpu_s'] * 1e3:.0f} ms "
        f"({_ms(cpu_floor)}); samples {floor.samples:,}, busy {floor.busy:,}; inside the floor "
        f"tracer {floor.inside:,} = {floor.share():.2%} +- {floor.error():.2%} of busy; CPU "
        f"against off: {floor_diff:.2%}"
    )
    _top("top floor functions (innermost tracer frame):", floor.functions, floor.busy, 3)
    floor_json["records"] = floor_json.pop("trace_bytes")
    if floor.share():
        print(f"ours / the floor's, sampled share: {share / floor.share():.1f}")
    anchor_json: dict[str, Any] | None = None
    if anchor:
        areal, areal_fig, cpu_areal, areal_diff, anchor_json = _reference(runs["areal"], cpu_off_s)
        print(
            f"anchor, AReaL's perf_tracer in the same demo: per run (median) loop-thread CPU "
            f"{areal_fig['loop_cpu_s'] * 1e3:.0f} ms ({_ms(cpu_areal)}), trace "
            f"{areal_fig['trace_bytes'] / 1e3:.0f} kB; samples {areal.samples:,}, busy "
            f"{areal.busy:,} (blocked {areal.blocked:,}, in its fsync among them); inside "
            f"AReaL's tracer {areal.inside:,} = {areal.share():.2%} +- {areal.error():.2%} of "
            f"busy; CPU against off: {areal_diff:.2%}"
        )
        _top("top AReaL functions (innermost tracer frame):", areal.functions, areal.busy, 5)
        ratio = share / areal.share() if areal.share() else math.inf
        print(
            f"ours / AReaL's, sampled share: {ratio:.2f}  (ours records more: HTTP spans "
            "with trace context, loop stalls, goodput)"
        )
    else:
        print("MISSING anchor: AReaL's perf_tracer could not be loaded; no reference figure")
    ok = share <= TARGET
    print(
        f"{'ok  ' if ok else 'MISS'} demo with --span-groups all: {share:.2%} of its event-loop "
        f"thread's CPU inside asynctrace  (target <= {TARGET:.0%}; sampling estimate)"
    )
    elapsed = time.perf_counter() - started
    print(f"took {elapsed:.0f} s")
    if options.json:
        results = {
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "demo": dict(demo),
            "rounds": rounds,
            "sample_interval_s": SAMPLE_INTERVAL_S,
            "on": {**_tally_json(on), **on_fig, "loop_cpu_runs_s": cpu_on},
            "off": {**_tally_json(off), **off_fig, "loop_cpu_runs_s": cpu_off},
            "floor": floor_json,
            "anchor_areal": anchor_json,
            "estimate_sampling": round(share, 4),
            "estimate_cpu_difference": round(diff, 4),
            "cpu_difference_by_round": [round(d, 4) for d in paired],
            "target": TARGET,
            "ok": ok,
            "seconds": round(elapsed, 1),
        }
        options.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if ok and anchor else 1


def load_anchor() -> bool:
    """Load AReaL's tracer and the demo recorded by it; say so loudly when it cannot."""
    global AREAL_DIRS, _demo_areal
    try:
        perf_tracer = load_perf_tracer()
        import _demo_areal as module
    except AnchorMissing as exc:
        print(f"MISSING anchor: {exc}", file=sys.stderr)
        return False
    _demo_areal = module
    AREAL_DIRS = (os.path.realpath(Path(perf_tracer.__file__).parents[1]) + os.sep,)
    _kinds.clear()
    return True


_demo_areal: Any = None  # the anchor's demo (_demo_areal.py), once load_anchor() loaded it


if __name__ == "__main__":
    sys.exit(main())
