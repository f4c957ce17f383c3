"""A generated trace of known durations for the live goodput tests and benchmark.

Spans are recorded through the running telemetry's provider with explicit
times and ended in end-time order, as a program ends them, except for the
stall spans, which end (as the loop-stall monitor ends them) just after the
step they stretched.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

MS = 1_000_000  # ns
BASE = 1_700_000_000_000 * MS // 1000  # a fixed epoch time, in ns


@dataclass
class Planned:
    """A span to record: name, times (ns), attributes, parent (index or None)."""

    name: str
    start: int
    end: int
    attributes: dict[str, Any]
    parent: int | None
    late: bool = False  # ended after a later span (a stall span)


@dataclass
class Plan:
    """The spans, and what the steps must add up to."""

    spans: list[Planned] = field(default_factory=list)
    expected_productive_ms: dict[int, float] = field(default_factory=dict)

    def add(self, name: str, start: int, end: int, parent: int | None, **attributes: Any) -> int:
        self.spans.append(Planned(name, start, end, attributes, parent))
        return len(self.spans) - 1


def plan(steps: int = 6, seed: int = 0, prompts: int = 4) -> Plan:
    """A job with *steps* steps exercising every rule the rollup has.

    - group ``step`` steps under a job span, each with productive and overhead
      leaves; every third step has no bucketed leaf at all (a zero-leaf step);
    - per-prompt spans (unbucketed, stamped) whose productive children overlap
      each other (an over-wall step);
    - a two-span checkpoint: the bucketed staging span and its unbucketed
      finalize child ending long after the step, with children of its own;
    - a detached bucketed child ending 0.3 s after its step (within the grace);
    - a loop-stall span ended after its step;
    - a stamped umbrella without group ``step`` (a candidate step, confirmed when
      the job ends) with a stamped span nested in it (not a step).
    """
    rng = random.Random(seed)
    p = Plan()
    t = BASE
    job = p.add("rl.job", t, 0, None, **{"asynctrace.group": "job"})
    t += 5 * MS
    for i in range(1, steps + 1):
        start = t
        wall = rng.randint(200, 400) * MS
        step = p.add("rl.step", start, start + wall, job, **{"asynctrace.group": "step"})
        p.spans[step].attributes["rl.iteration"] = i
        productive = 0.0
        if i % 3 != 0:
            gen = rng.randint(50, 100) * MS
            p.add(
                "rl.policy_update",
                start + 10 * MS,
                start + 10 * MS + gen,
                step,
                **{"rl.bucket": "productive", "rl.iteration": i},
            )
            productive += gen / MS
            p.add(
                "rl.data",
                start + 120 * MS,
                start + 150 * MS,
                step,
                **{"rl.bucket": "overhead", "rl.iteration": i},
            )
            for k in range(prompts):  # per-prompt spans, overlapping each other
                s0 = start + 150 * MS + k * 5 * MS
                prompt = p.add(
                    "rl.sc.generate_and_push",
                    s0,
                    s0 + 40 * MS,
                    step,
                    **{"asynctrace.group": "per_prompt", "rl.iteration": i},
                )
                p.add(
                    "rl.generate",
                    s0 + 1 * MS,
                    s0 + 39 * MS,
                    prompt,
                    **{"rl.bucket": "productive", "rl.iteration": i},
                )
                productive += 38
        if i % 2 == 0 and i % 3 != 0:  # a checkpoint: staging, a finalize ending much later
            stage = p.add(
                "rl.checkpointing",
                start + wall - 40 * MS,
                start + wall - 10 * MS,
                step,
                **{"rl.bucket": "overhead", "asynctrace.group": "checkpoint", "rl.iteration": i},
            )
            fin_start = start + wall - 15 * MS
            fin = p.add(
                "rl.checkpoint.finalize",
                fin_start,
                fin_start + 500 * MS,
                stage,
                **{"asynctrace.group": "checkpoint", "rl.iteration": i},
            )
            p.add("rl.checkpoint.write", fin_start + 5 * MS, fin_start + 450 * MS, fin)
        if i % 2 == 1 and i % 3 != 0:  # a detached bucketed child outliving its step by 0.3 s
            p.add(
                "rl.detached",
                start + wall - 50 * MS,
                start + wall + 300 * MS,
                step,
                **{"rl.bucket": "idle", "rl.iteration": i},
            )
        p.expected_productive_ms[i] = productive
        stall = p.add(
            "asynctrace.loop_stall",
            start + wall - 90 * MS,
            start + wall - 60 * MS,
            step,
            **{"asynctrace.group": "loop_stall", "rl.iteration": i},
        )
        p.spans[stall].late = True
        t = start + wall + 20 * MS
    # A candidate step: stamped, unbucketed, no group; a stamped span nested in it.
    cand = p.add("rl.sc.step", t, t + 100 * MS, job, **{"rl.iteration": steps + 1})
    inner = p.add("rl.sc.inner", t + 10 * MS, t + 60 * MS, cand, **{"rl.iteration": steps + 1})
    p.add("rl.train", t + 20 * MS, t + 50 * MS, inner, **{"rl.bucket": "productive"})
    p.expected_productive_ms[steps + 1] = 30.0
    t += 200 * MS
    p.spans[job].end = t + 2000 * MS  # after the last finalize
    return p


def record(provider: Any, p: Plan) -> None:
    """Start every span (in start order) and end them as a program would."""
    tracer = provider.get_tracer("generated")
    started: list[Any] = [None] * len(p.spans)
    for index in sorted(range(len(p.spans)), key=lambda i: p.spans[i].start):
        planned = p.spans[index]
        context = (
            trace.set_span_in_context(started[planned.parent])
            if planned.parent is not None
            else None
        )
        started[index] = tracer.start_span(
            planned.name, context, attributes=planned.attributes, start_time=planned.start
        )
    order = sorted(range(len(p.spans)), key=lambda i: p.spans[i].end)
    late: list[int] = []
    for index in order:
        if p.spans[index].late:
            late.append(index)
            continue
        started[index].end(end_time=p.spans[index].end)
        if p.spans[index].attributes.get("asynctrace.group") == "step":
            for held in late:  # a stall span ends just after the step it stretched
                started[held].end(end_time=p.spans[held].end)
            late.clear()
    for held in late:
        started[held].end(end_time=p.spans[held].end)
