"""A loop-lag probe: how late the event loop runs a due timer, and who held it.

A task on the loop sleeps 1 ms at a time and measures how late each wake-up
is: the stall, the time the loop did not run a callback that was due. A
watchdog thread reads every thread's CPU clock every millisecond and, while a
wake-up is overdue, samples the loop thread's stack.

A stall is attributed in two steps. Half its samples or more in a hand-off's
sleep (``asynctrace._handoff``, the lock given to a starved export thread on
purpose), the loop thread mostly off the CPU, make it a yield: the loop
waited to get the lock back, from the worker (``telemetry-threads``, as
meant) or from a thread of the program that took it instead. Otherwise, if
the loop thread itself used at least half of the stall's time on the CPU, it
was running code, and the samples say whose: the innermost frame outside the
standard library is telemetry's (asynctrace, OpenTelemetry, the
integrations) or the program's. If it did not, it was waiting: on a lock in
telemetry's code (more than one sample says so), or for the GIL or a CPU.
Then the threads that ran during the stall say who held it: telemetry's
threads (``asynctrace-*``) when they used the most CPU and at least half the
stall, else the program's; when no thread of the process ran that much, the
machine was busy with other processes (``machine``). A garbage collection
(``gc.callbacks``) that took half the stall or more makes it the
collector's: ``gc`` on the loop thread, ``gc-`` and the kind of the thread
otherwise (``gc-telemetry``, ``gc-program``...), which holds every thread up
while it walks the whole heap (whoever allocated the object that set it off).
"""

from __future__ import annotations

import asyncio
import gc
import os
import sysconfig
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from types import FrameType

import asynctrace
from asynctrace._handoff import Handoff
from asynctrace._stall_frames import current_frames

PERIOD_S = 0.001
SAMPLE_AFTER_S = 0.0015  # sample the loop thread once a wake-up is this late

_PATHS = sysconfig.get_paths()
_STDLIB = tuple({os.path.join(_PATHS[k], "") for k in ("stdlib", "platstdlib")})
_SITES = tuple({os.path.join(_PATHS[k], "") for k in ("purelib", "platlib")})
_TELEMETRY = (
    os.path.join(os.path.dirname(os.path.abspath(asynctrace.__file__)), ""),
    f"{os.sep}opentelemetry{os.sep}",
    f"{os.sep}asynctrace_contrib{os.sep}",
)
_PROGRAM = (f"{os.sep}asynctrace_contrib{os.sep}demo{os.sep}",)
_LOOP = ("base_events.py", "events.py", "runners.py")
_YIELD = Handoff.offer.__code__


def owner(frame: FrameType | None, extra_telemetry: tuple[str, ...] = ()) -> tuple[str, str]:
    """Whose code a stack runs (``telemetry``, ``program``, ``loop``, ``idle``...), and where."""
    while frame is not None:
        path = frame.f_code.co_filename
        where = f"{os.path.basename(path)}:{frame.f_lineno} {frame.f_code.co_name}"
        stdlib = path.startswith(_STDLIB) and not path.startswith(_SITES)
        if frame.f_code is _YIELD:
            return "telemetry-yield", where  # slept to give a starved worker the lock
        if not stdlib:
            if any(part in path for part in _PROGRAM):
                return "program", where
            if any(part in path for part in (*_TELEMETRY, *extra_telemetry)):
                return "telemetry", where
            if os.path.abspath(path) == os.path.abspath(__file__):
                return "probe", where
            return "program", where
        name = os.path.basename(path)
        if name == "selectors.py" and frame.f_code.co_name == "select":
            return "idle", where
        if name == "threading.py" and frame.f_code.co_name == "start":
            return "thread-start", _caller(frame)  # waits for the OS to run a new thread
        if name in _LOOP:
            return "loop", where  # the loop's own bookkeeping between callbacks
        frame = frame.f_back
    return "loop", ""


def _kind(thread_name: str) -> str:
    """``loop``, ``telemetry`` (asynctrace's threads), ``chaos`` (the test's) or ``program``."""
    if thread_name == "loop":
        return "loop"
    if thread_name.startswith("asynctrace-"):
        return "telemetry"
    if thread_name in ("chaos", "loop-probe"):
        return "chaos"
    return "program"


def _caller(frame: FrameType) -> str:
    """Who started a thread: the first frame outside the standard library, and its kind."""
    outer = frame.f_back
    while outer is not None:
        path = outer.f_code.co_filename
        if not (path.startswith(_STDLIB) and not path.startswith(_SITES)):
            kind, where = owner(outer)
            return f"{kind} {where}"
        outer = outer.f_back
    return ""


@dataclass
class Stall:
    """One late wake-up: when, how late, the loop thread's CPU share, who was running."""

    at_s: float
    late_s: float
    cpu_share: float
    samples: Counter[str] = field(default_factory=Counter)
    places: Counter[str] = field(default_factory=Counter)
    threads: dict[str, float] = field(default_factory=dict)  # CPU share by thread name
    collecting_s: float = 0.0  # garbage collections within the stall, on any thread
    collector: str = ""  # the kind of thread that collected longest (``_kind``)

    @property
    def owner(self) -> str:
        """Who held the loop: see the module's docstring for the kinds.

        ``telemetry``: the loop thread ran telemetry's code, or was blocked in
        it. ``telemetry-yield``: it slept in a hand-off
        (``asynctrace._handoff``), giving the lock to a starved export thread,
        and waited to get it back from a thread of the program that took it
        instead.
        ``telemetry-start``: telemetry started a thread from the loop and
        waited for the OS to run it. ``telemetry-threads``: the loop waited
        while telemetry's threads used the CPU (the GIL, most likely).
        ``program``, ``loop`` (its own bookkeeping), ``machine`` (no thread of
        this process ran: other processes had the CPUs), ``gc`` (a garbage
        collection on the loop thread took half the stall or more; on
        another thread: ``gc-`` and that thread's kind).
        """
        if self.collecting_s * 2 >= self.late_s:  # one collection holds every thread up
            return "gc" if self.collector in ("loop", "") else f"gc-{self.collector}"
        total = sum(self.samples.values())
        # Mostly off the CPU, the loop thread was waiting. Blocked on a lock in telemetry's
        # code, it leaves the sampler a sample a millisecond; waiting for the interpreter
        # lock or a CPU, it starves the sampler too, and one lone sample cannot tell which.
        if (
            total
            and self.samples["telemetry"] * 2 >= total
            and (self.cpu_share >= 0.5 or total > 1)
        ):
            return "telemetry"  # running telemetry's code, or blocked in it
        if self.samples["telemetry-yield"] * 2 >= total > 0 and self.cpu_share < 0.5:
            # Waiting to get the lock back after a hand-off's sleep: the worker took it,
            # as meant (the loop pays its time), or another thread of the program did.
            kind = self._busiest()
            return "telemetry-threads" if kind == "telemetry" else "telemetry-yield"
        starts = sum(n for place, n in self.places.items() if place.startswith("thread-start"))
        if total and starts * 2 >= total:
            started_by = [p for p in self.places if p.startswith("thread-start telemetry")]
            return "telemetry-start" if started_by else "thread-start"
        if self.cpu_share >= 0.5:
            best = self.samples.most_common(1)
            return best[0][0] if best and best[0][0] != "idle" else "loop"
        kind = self._busiest(0.5)
        if not kind:
            return "machine"
        return "telemetry-threads" if kind == "telemetry" else kind

    def _busiest(self, least: float = 0.0) -> str:
        """The kind of thread (not the loop) that used the most CPU in the stall, if *least*."""
        kinds: Counter[str] = Counter()
        for name, share in self.threads.items():
            kinds[_kind(name)] += share
        del kinds["loop"]
        kind, share = max(kinds.items(), key=lambda item: item[1], default=("", 0.0))
        return kind if share >= least and share > 0 else ""


class LoopProbe:
    """Start with :meth:`start` on the loop to watch, stop with :meth:`stop`."""

    def __init__(self, threshold_s: float = 0.005, extra_telemetry: tuple[str, ...] = ()) -> None:
        self.threshold_s = threshold_s
        self.extra_telemetry = extra_telemetry
        self.stalls: list[Stall] = []
        self.ticks = 0
        self.worst_late_s = 0.0
        self._due = 0.0
        self._epoch = 0
        self._samples: dict[int, tuple[Counter[str], Counter[str]]] = {}
        self._clocks: list[tuple[float, dict[str, float]]] = []  # (time, CPU by kind)
        self._collections: list[tuple[float, float, str]] = []  # start, stop, thread kind
        self._collecting = 0.0
        self._stop = threading.Event()
        self._loop_thread = 0
        self._task: asyncio.Task[None] | None = None
        self._watchdog = threading.Thread(target=self._watch, name="loop-probe", daemon=True)

    def start(self) -> None:
        """Start the probe task on the running loop and its watchdog thread."""
        self._loop_thread = threading.get_ident()
        gc.callbacks.append(self._collected)
        self._due = time.perf_counter() + PERIOD_S
        self._task = asyncio.get_running_loop().create_task(self._tick(), name="loop-probe")
        self._watchdog.start()

    async def stop(self) -> None:
        """Stop both; the stalls seen so far stay in :attr:`stalls`."""
        self._stop.set()
        if self._task is not None:
            await self._task
        self._watchdog.join(5)
        gc.callbacks.remove(self._collected)
        for stall in self.stalls:
            end = stall.at_s + PERIOD_S + stall.late_s
            stall.threads = self._cpu_between(stall.at_s, end)
            by: Counter[str] = Counter()
            for start, stop, kind in self._collections:
                overlap = min(end, stop) - max(stall.at_s, start)
                if overlap > 0:
                    by[kind] += overlap
            stall.collecting_s = sum(by.values())
            stall.collector = by.most_common(1)[0][0] if by else ""

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        """A garbage collection's start or stop (``gc.callbacks``), on whichever thread.

        Collections do not nest: start and stop come in pairs. (Finalizers run
        during one may let another thread run a while; its time is counted to
        the collection.)
        """
        if phase == "start":
            self._collecting = time.perf_counter()
        else:
            ident = threading.get_ident()
            kind = "loop" if ident == self._loop_thread else _kind(threading.current_thread().name)
            self._collections.append((self._collecting, time.perf_counter(), kind))

    def _cpu_between(self, start: float, end: float) -> dict[str, float]:
        """Each kind of thread's CPU time from *start* to *end*, as a share of the time."""
        before = [c for c in self._clocks if c[0] <= start] or self._clocks[:1]
        after = [c for c in self._clocks if c[0] >= end] or self._clocks[-1:]
        (t0, cpu0), (t1, cpu1) = before[-1], after[0]
        if t1 <= t0:
            return {}
        shares = {name: (cpu1[name] - cpu0.get(name, 0.0)) / (t1 - t0) for name in cpu1}
        return {name: round(share, 2) for name, share in shares.items() if share >= 0.01}

    async def _tick(self) -> None:
        started = time.perf_counter()
        cpu = time.thread_time()
        while not self._stop.is_set():
            self._due = started + PERIOD_S
            await asyncio.sleep(PERIOD_S)
            now, cpu_now = time.perf_counter(), time.thread_time()
            late = now - started - PERIOD_S
            self.ticks += 1
            self.worst_late_s = max(self.worst_late_s, late)
            samples, places = self._samples.pop(self._epoch, (Counter(), Counter()))
            self._epoch += 1
            if late > self.threshold_s:
                share = (cpu_now - cpu) / (now - started)
                self.stalls.append(Stall(started, late, round(share, 2), samples, places))
            started, cpu = now, cpu_now

    def _read_clocks(self) -> None:
        """Every thread's CPU clock, summed by name (ended threads keep their last reading)."""
        totals: dict[str, float] = {}
        for thread in threading.enumerate():
            try:
                clock = time.pthread_getcpuclockid(thread.ident or 0)
                used = time.clock_gettime(clock)
            except (OSError, OverflowError):
                continue
            name = "loop" if thread.ident == self._loop_thread else thread.name
            self._used[thread.ident or 0] = (name, used)
        for name, used in self._used.values():
            totals[name] = totals.get(name, 0.0) + used
        self._clocks.append((time.perf_counter(), totals))

    def _watch(self) -> None:
        self._used: dict[int, tuple[str, float]] = {}
        while not self._stop.wait(PERIOD_S):
            self._read_clocks()
            if time.perf_counter() - self._due < SAMPLE_AFTER_S:
                continue
            epoch = self._epoch
            frame = current_frames().get(self._loop_thread)  # safe from 3.11's hang
            whose, where = owner(frame, self.extra_telemetry)
            del frame
            samples, places = self._samples.setdefault(epoch, (Counter(), Counter()))
            samples[whose] += 1
            places[f"{whose} {where}"] += 1

    def by_owner(self) -> Counter[str]:
        """How many stalls past the threshold each owner had."""
        return Counter(stall.owner for stall in self.stalls)
