"""The command line over 1,000,000 trace events: ``convert`` and ``goodput``.

Usage: python benchmarks/bench_cli.py [--quick] [--events N] [--keep DIR]

Writes a synthetic two-rank run (a driver with steps, per-prompt spans on
concurrent tasks, efficiency waits, two-span checkpoints; a worker whose
leaves are children of the driver's steps) and times each command in a child
process, reading the child's peak RSS with ``getrusage(RUSAGE_CHILDREN)``.
Targets: ≤ 15 s each; peak RSS ≤ 500 MB for convert, ≤ 200 MB for goodput.
Exits 1 if any target is missed.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"convert": (15.0, 500.0), "goodput": (15.0, 200.0)}
PROMPTS = 32  # per-prompt tasks per step (two spans each, plus the task's track name)
WORKER_LEAVES = 20  # worker-side leaves per step
TRACE = "0af7651916cd43dd8448eb211c80319c"


def _x(name: str, cat: str, ts: int, dur: int, pid: int, tid: int, args: str) -> str:
    return (
        f'{{"ph":"X","name":"{name}","cat":"{cat}","ts":{ts},"dur":{dur},"pid":{pid},'
        f'"tid":{tid},"args":{{{args}}}}}\n'
    )


def _ids(span: int, parent: int | None) -> str:
    ids = f'"trace_id":"{TRACE}","span_id":"{span:016x}"'
    return ids + (f',"parent_span_id":"{parent:016x}"' if parent else "")


def _process(pid: int, rank: int) -> str:
    meta = {
        "name": f"bench rank {rank}/2 (pid {pid})",
        "service": "bench",
        "rank": rank,
        "world_size": 2,
        "role": None,
        "run_id": "bench",
        "host": f"node-{rank}",
    }
    return json.dumps({"ph": "M", "name": "process_name", "pid": pid, "args": meta}) + "\n"


def generate(directory: Path, events: int) -> tuple[int, int]:
    """Write ``traces-r0.jsonl`` and ``traces-r1.jsonl``; return (events, steps)."""
    driver = open(directory / "traces-r0.jsonl", "w")  # noqa: SIM115
    worker = open(directory / "traces-r1.jsonl", "w")  # noqa: SIM115
    driver.write(_process(100, 0))
    worker.write(_process(100, 1))
    written = 2
    job = 1
    next_id = 2
    next_tid = 2
    t = 1_700_000_000_000_000
    step = 0
    pending_finalize: list[str] = []
    while written < events:
        step += 1
        sid = next_id
        next_id += 1
        start = t
        it = f'"rl.iteration":{step}'
        lines: list[str] = []
        # Waiting for the buffer (idle), then the per-prompt fan-out on concurrent tasks.
        lines.append(
            _x(
                "rl.idle.buffer_starvation",
                "idle",
                t,
                2_000,
                100,
                1,
                f'{it},"rl.bucket":"idle","rl.efficiency.category":"idle/buffer_starvation",'
                f'"rl.idle.polls":40,{_ids(next_id, sid)}',
            )
        )
        next_id += 1
        t += 2_000
        names = []
        for p in range(PROMPTS):
            tid = next_tid
            next_tid += 1
            gp, put = next_id, next_id + 1
            next_id += 2
            begin = t + p * 10
            lines.append(
                _x(
                    "rl.data_plane.put",
                    "asynctrace",
                    begin + 8_000,
                    900,
                    100,
                    tid,
                    f'{it},"rl.data_plane.op":"put",{_ids(put, gp)}',
                )
            )
            lines.append(
                _x(
                    "rl.generate_and_push",
                    "asynctrace",
                    begin,
                    9_000 + p,
                    100,
                    tid,
                    f'{it},"rl.rollout.attempt":0,{_ids(gp, sid)}',
                )
            )
            names.append(
                f'{{"ph":"M","name":"thread_name","pid":100,"tid":{tid},'
                f'"args":{{"name":"task: prompt-{tid} [MainThread]"}}}}\n'
            )
        t += 9_500
        for name, bucket in (
            ("rl.generate", "productive"),
            ("rl.reward", "productive"),
            ("rl.logprob", "overhead"),
            ("rl.advantage", "overhead"),
            ("rl.data_processing", "overhead"),
            ("rl.policy_training", "productive"),
        ):
            lines.append(
                _x(
                    name,
                    bucket,
                    t,
                    3_000,
                    100,
                    1,
                    f'{it},"rl.bucket":"{bucket}",{_ids(next_id, sid)}',
                )
            )
            next_id += 1
            t += 3_000
        if step % 10 == 0:
            staging = next_id
            next_id += 1
            lines.append(
                _x(
                    "rl.checkpointing",
                    "overhead",
                    t,
                    1_000,
                    100,
                    1,
                    f'{it},"rl.bucket":"overhead",{_ids(staging, sid)}',
                )
            )
            pending_finalize.append(
                _x(
                    "rl.checkpoint.finalize",
                    "asynctrace",
                    t + 500,
                    60_000,
                    100,
                    0,
                    f"{it},{_ids(next_id, staging)}",
                )
            )
            next_id += 1
            t += 1_000
        t += 500
        lines.append(
            _x("rl.step", "asynctrace", start, t - start, 100, 1, f"{it},{_ids(sid, job)}")
        )
        lines.append(
            f'{{"ph":"i","s":"t","name":"step.done","cat":"asynctrace","ts":{t},"pid":100,'
            f'"tid":1,"args":{{{it}}}}}\n'
        )
        if len(pending_finalize) > 1:  # a finalize ends during a later step
            lines.append(pending_finalize.pop(0))
        lines.extend(names)
        driver.write("".join(lines))
        written += len(lines)
        work = []
        for k in range(WORKER_LEAVES):
            work.append(
                _x(
                    "rl.policy.microbatch",
                    "productive",
                    start + 20_000 + k * 100,
                    90,
                    100,
                    1,
                    f'"rl.bucket":"productive",{_ids(next_id, sid)}',
                )
            )
            next_id += 1
        worker.write("".join(work))
        written += len(work)
        t += 100
    driver.writelines(pending_finalize)
    driver.write(_x("rl.job", "asynctrace", 1_700_000_000_000_000, t, 100, 1, _ids(job, None)))
    written += len(pending_finalize) + 1
    driver.close()
    worker.close()
    return written, step


def measure(stdout: Path, command: list[str]) -> None:
    """Child mode: run *command* (stdout to a file), print its wall time and peak RSS."""
    begin = time.perf_counter()
    with open(stdout, "wb") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - begin
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # this child's only child
    print(
        json.dumps(
            {
                "wall_s": wall,
                "peak_rss_mb": peak_kb / 1024,
                "code": done.returncode,
                "stderr": done.stderr.decode(errors="replace")[-2000:],
            }
        )
    )


def _run(stdout: Path, command: list[str]) -> dict[str, object]:
    wrapper = [sys.executable, __file__, "--measure", str(stdout), "--", *command]
    done = subprocess.run(wrapper, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="write the inputs and outputs here")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("command", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.command)
        return 0
    events = 100_000 if args.quick else args.events
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        begin = time.perf_counter()
        total, steps = generate(directory, events)
        size = sum(p.stat().st_size for p in directory.glob("traces-*.jsonl"))
        print(
            f"inputs: {total:,} events, {steps:,} steps, {size / 2**20:.0f} MiB in 2 files "
            f"(generated in {time.perf_counter() - begin:.1f} s); "
            f"Python {platform.python_version()}"
        )
        cli = [sys.executable, "-m", "asynctrace"]
        trace = directory / "trace.json"
        table = directory / "goodput.json"
        results = {
            "convert": _run(
                directory / "convert.out",
                [*cli, "convert", str(directory), "-o", str(trace), "-q"],
            ),
            "goodput": _run(table, [*cli, "goodput", str(directory), "--json"]),
        }
        failed = False
        print(f"{'command':<8}  {'wall':>8}  {'target':>7}  {'peak RSS':>9}  {'target':>8}  ok")
        for name, result in results.items():
            wall_limit, rss_limit = TARGETS[name]
            wall = float(str(result["wall_s"]))
            rss = float(str(result["peak_rss_mb"]))
            ok = result["code"] == 0 and wall <= wall_limit and rss <= rss_limit
            failed |= not ok
            print(
                f"{name:<8}  {wall:>6.2f} s  {wall_limit:>5.0f} s  {rss:>6.0f} MB  "
                f"{rss_limit:>5.0f} MB  {'yes' if ok else 'NO'}"
            )
            if result["code"] != 0:
                print(f"  {name} exited {result['code']}: {result['stderr']}")
        document = json.loads(table.read_text() or "{}")
        found = document.get("total", {}).get("steps")
        violations = len(document.get("violations", []))
        print(f"goodput: {found} steps (expected {steps}), {violations} violations")
        if found != steps or violations:
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
