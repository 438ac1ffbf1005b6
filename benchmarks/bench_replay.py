"""``compass replay`` as a whole process against the engine alone, on the same steady-state events.

    .venv/bin/python benchmarks/bench_replay.py [--nodes 1024] [--events 100000] [--load 0.87] [--rounds 3]

Writes the event stream of benchmarks/bench_engine.py (Philly job-size mix, a cluster
filled to ``--load`` of its GPUs, then ``--events`` arrivals and departures around it)
as JSON Lines, then alternately, ``--rounds`` times:

- the engine: the same events through a Scheduler in this process (thread CPU time,
  as bench_engine.py measures it), per event;
- ``compass replay FILE --nodes N`` (summary mode) as a child process: its CPU time
  (user + system, from start-up to exit: interpreter, imports, JSON parsing, checks,
  the engine and the summary) divided by the events in the file.

Prints a markdown table of the medians over the rounds. Target (issue 12): the whole
process costs at most 3x the engine's mean time per event.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_engine import GPUS, Workload

from compass_slurm.engine.model import Job, Node
from compass_slurm.engine.policies.base import make_policy
from compass_slurm.engine.scheduler import Scheduler

TARGET_RATIO = 3.0
COMPASS = Path(sys.executable).parent / "compass"


def write_events(path: Path, nodes: int, events: int, load: float, seed: int) -> list[tuple[str, Job | str]]:
    work = Workload(nodes, load, seed)
    stream = []
    while not work.filled():
        stream.append(work.next_event())
    stream += [work.next_event() for _ in range(events)]
    with path.open("w") as out:
        for t, (kind, what) in enumerate(stream):
            if kind == "arrive":
                doc = {"t": float(t), "event": "arrive", "job": what.id, "instances": what.instances, "gpus": what.gpus}
            else:
                doc = {"t": float(t), "event": "depart", "job": what}
            out.write(json.dumps(doc) + "\n")
    return stream


def engine_us(stream: list[tuple[str, Job | str]], nodes: int, policy: str) -> tuple[float, float]:
    """Mean and median thread CPU microseconds per event through a Scheduler."""
    scheduler = Scheduler(make_policy(policy, [Node(f"n{i:05d}", GPUS) for i in range(nodes)]))
    costs = []
    gc.collect()
    clock = time.thread_time_ns
    for kind, what in stream:
        start = clock()
        if kind == "arrive":
            scheduler.arrive(what)  # type: ignore[arg-type]
        else:
            scheduler.depart(what)  # type: ignore[arg-type]
        costs.append(clock() - start)
    return sum(costs) / len(costs) / 1000, statistics.median(costs) / 1000


def process_us(path: Path, nodes: int, policy: str, events: int) -> tuple[float, float, dict]:
    """CPU and wall microseconds per event of ``compass replay`` as a child process, and its summary."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([str(COMPASS), "replay", str(path), "--nodes", str(nodes), "--policy", policy],
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / events * 1e6, wall / events * 1e6, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--events", type=int, default=100_000, help="steady-state events after the fill")
    parser.add_argument("--load", type=float, default=0.87)
    parser.add_argument("--policy", default="compass")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        stream = write_events(path, args.nodes, args.events, args.load, args.seed)
        engine, process = [], []
        for _ in range(args.rounds):
            engine.append(engine_us(stream, args.nodes, args.policy))
            cpu, wall, summary = process_us(path, args.nodes, args.policy, len(stream))
            process.append((cpu, wall))
    mean = statistics.median(e[0] for e in engine)
    median = statistics.median(e[1] for e in engine)
    cpu = statistics.median(p[0] for p in process)
    wall = statistics.median(p[1] for p in process)
    ratio = cpu / mean
    print(f"{len(stream):,} events ({len(stream) - args.events:,} to fill, {args.events:,} steady), N = {args.nodes:,}"
          f" x {GPUS} GPUs, load {args.load}, policy {args.policy}, median of {args.rounds} alternating rounds,"
          f" {os.cpu_count()} CPUs; summary: {summary}\n")
    print("| engine mean (us/event) | engine median (us/event) | `compass replay` CPU (us/event) |"
          " `compass replay` wall (us/event) | ratio (CPU / engine mean) | target <= 3x |")
    print("|---:|---:|---:|---:|---:|:---:|")
    print(f"| {mean:.1f} | {median:.1f} | {cpu:.1f} | {wall:.1f} | {ratio:.2f}x | {'met' if ratio <= TARGET_RATIO else 'MISSED'} |")
    sys.exit(0 if ratio <= TARGET_RATIO else 1)


if __name__ == "__main__":
    main()
