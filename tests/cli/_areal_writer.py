"""Write trace files with AReaL 1.0.4's own perf_tracer (run as a script by test_areal_files.py).

usage: python _areal_writer.py FILEROOT ROLE STEPS(yes|no)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _areal_loader import PerfTracerConfig, load_perf_tracer

perf_tracer = load_perf_tracer()
fileroot, role, with_steps = sys.argv[1], sys.argv[2] or None, sys.argv[3] == "yes"
config = PerfTracerConfig(
    experiment_name="exp", trial_name="trial", fileroot=fileroot, enabled=True
)
perf_tracer.configure(config, rank=0, role=role)
for step in range(2):
    step_args = {"global_step": step} if with_steps else None
    with perf_tracer.trace_scope("train.step", args=step_args):
        with perf_tracer.trace_scope("rollout.wait", category="scheduler"):
            time.sleep(0.01)
        with perf_tracer.trace_scope(
            "actor.ppo_update", category=perf_tracer.Category.COMPUTE, args=step_args
        ):
            time.sleep(0.03)
        with perf_tracer.trace_scope("ckpt.save", category="io"):
            time.sleep(0.005)
        perf_tracer.instant("batch.ready", category="scheduler", args={"n": 4})
perf_tracer.save(force=True)
