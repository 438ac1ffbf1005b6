"""Engine cost per event: compass against best-fit, side by side, on a steady-state cluster.

    .venv/bin/python benchmarks/bench_engine.py [--nodes 64 1024 16384] [--events 20000] [--load 0.87]

Each cluster is filled to ``--load`` of its GPUs with jobs drawn from the Philly
job-size mix (compass_slurm.sim.synthetic), then driven by a stream that departs
a random live job when the offered demand is above the load and admits a new one
otherwise, so arrivals and departures alternate around the target. Both policies
see the same event stream through a Scheduler (Place or Remove, then Compact,
then whatever the queue can start), and the two are timed on every event in
alternating order, so machine noise lands on both. Costs are the thread's CPU
time (``--wall`` for wall-clock time), so that other processes on a shared
machine do not show up as engine cost. Prints a markdown table of median and
p99 microseconds per event. Targets (issue 2): compass median
<= 100 us at every N and within 3x of best-fit.
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import sys
import time

import numpy as np

from compass_slurm.engine.model import Job, Node
from compass_slurm.engine.policies.base import make_policy
from compass_slurm.engine.scheduler import Scheduler
from compass_slurm.sim.synthetic import MIXES

POLICIES = ("compass", "best-fit")
GPUS = 8
TARGET_US = 100.0
TARGET_RATIO = 3.0


class Workload:
    """One seeded stream of arrivals and departures holding the offered demand near a target."""

    def __init__(self, nodes: int, load: float, seed: int) -> None:
        self.rng = random.Random(seed)
        mix = MIXES["philly"]
        self.shapes = list(mix)
        self.weights = [mix[s] for s in self.shapes]
        self.target = load * nodes * GPUS
        self.live: dict[str, Job] = {}
        self.live_ids: list[str] = []  # for O(1) random choice; order is irrelevant
        self.demand = 0
        self.count = 0

    def filled(self) -> bool:
        return self.demand >= self.target

    def next_event(self) -> tuple[str, Job | str]:
        if self.filled():
            k = self.rng.randrange(len(self.live_ids))
            self.live_ids[k], self.live_ids[-1] = self.live_ids[-1], self.live_ids[k]
            job = self.live.pop(self.live_ids.pop())
            self.demand -= job.total_gpus
            return "depart", job.id
        instances, gpus = self.rng.choices(self.shapes, self.weights)[0]
        self.count += 1
        job = Job(f"j{self.count}", instances, gpus)
        self.live[job.id] = job
        self.live_ids.append(job.id)
        self.demand += job.total_gpus
        return "arrive", job


def apply(scheduler: Scheduler, kind: str, what: Job | str) -> None:
    if kind == "arrive":
        scheduler.arrive(what)  # type: ignore[arg-type]
    else:
        scheduler.depart(what)  # type: ignore[arg-type]


def run(nodes: int, events: int, load: float, seed: int, wall: bool) -> dict[str, dict[str, float]]:
    cluster = [Node(f"n{i:05d}", GPUS) for i in range(nodes)]
    schedulers = {name: Scheduler(make_policy(name, cluster)) for name in POLICIES}
    work = Workload(nodes, load, seed)
    while not work.filled():  # warm-up: not timed
        event = work.next_event()
        for s in schedulers.values():
            apply(s, *event)
    gc.collect()
    costs = {name: np.empty(events) for name in POLICIES}
    order = list(POLICIES)
    clock = time.perf_counter_ns if wall else time.thread_time_ns
    for k in range(events):
        event = work.next_event()
        order.reverse()
        for name in order:
            s = schedulers[name]
            start = clock()
            apply(s, *event)
            costs[name][k] = clock() - start
    out = {}
    for name in POLICIES:
        c = schedulers[name].policy.cluster
        us = costs[name] / 1000
        out[name] = {
            "median": float(np.median(us)),
            "p99": float(np.percentile(us, 99)),
            "used": sum(c.used) / (nodes * GPUS),
            "queued": len(schedulers[name].queue),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 1024, 16384])
    parser.add_argument("--events", type=int, default=20_000, help="timed events per cluster size")
    parser.add_argument("--load", type=float, default=0.87, help="offered demand as a share of all GPUs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--wall", action="store_true", help="time with the wall clock instead of thread CPU time")
    args = parser.parse_args()

    machine = platform.processor() or platform.machine()
    clock = "wall-clock" if args.wall else "thread CPU"
    print(f"Python {platform.python_version()} on {machine}; {args.events:,} timed events per N, load {args.load},"
          f" {clock} time\n")
    print("| N | compass median us | compass p99 us | best-fit median us | best-fit p99 us | ratio (median) |"
          " GPUs used (compass / best-fit) | target met |")
    print("|---:|---:|---:|---:|---:|---:|---:|:---:|")
    ok = True
    for n in args.nodes:
        r = run(n, args.events, args.load, args.seed, args.wall)
        cm, bf = r["compass"], r["best-fit"]
        ratio = cm["median"] / bf["median"]
        met = cm["median"] <= TARGET_US and ratio <= TARGET_RATIO
        ok = ok and met
        print(
            f"| {n:,} | {cm['median']:.1f} | {cm['p99']:.1f} | {bf['median']:.1f} | {bf['p99']:.1f} | {ratio:.2f}x"
            f" | {cm['used']:.1%} / {bf['used']:.1%} | {'yes' if met else 'NO'} |"
        )
        sys.stdout.flush()
    print(f"\ntargets: compass median <= {TARGET_US:.0f} us at every N, and <= {TARGET_RATIO:.0f}x best-fit")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
