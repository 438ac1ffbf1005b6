"""Simulator speed on the Philly trace: events per second per policy, and the full-trace time.

    .venv/bin/python benchmarks/bench_sim.py [--slice 20000] [--eta 0.9] [--queue backfill] [--no-full]

Runs one policy at a time in this process (no parallelism, so the figures are
per core) and prints markdown tables. The trace is read from ../shared/traces
next to the repository; it is never copied into it. Conditions are the
simulator's defaults (the daemon's): EASY backfill, 12 migrations per sliding
hour. Target (issues 3 and 9): the full trace for the default policy under
backfill in <= 60 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from compass_slurm.engine.policies.base import policy_names
from compass_slurm.sim.loop import SimConfig, simulate
from compass_slurm.sim.sizing import cluster_size, make_nodes
from compass_slurm.sim.workloads import load, to_jobs

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "philly_rfold.csv"
FULL_TRACE_POLICIES = ("compass-easy", "compass", "best-fit")
BUDGET = 12
TARGET_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--slice", type=int, default=20_000, help="jobs in the per-policy slice")
    parser.add_argument("--eta", type=float, default=0.90)
    parser.add_argument("--queue", choices=("fifo", "backfill"), default="backfill")
    parser.add_argument("--policy", action="append", help="only these policies in the slice table")
    parser.add_argument("--no-full", dest="full", action="store_false", help="skip the full-trace runs")
    args = parser.parse_args()
    if not args.trace.is_file():
        sys.exit(f"trace not found: {args.trace}")

    started = time.perf_counter()
    jobs, _ = to_jobs(load(args.trace).records, 8)
    machine = platform.processor() or platform.machine()
    print(f"loaded {len(jobs):,} jobs in {time.perf_counter() - started:.1f} s on {machine}\n")

    part = jobs[: args.slice]
    nodes = make_nodes([(8, cluster_size(part, args.eta, 8))])
    print(f"### Philly, first {len(part):,} jobs, {len(nodes)} nodes (N({args.eta})), queue {args.queue}\n")
    print("| policy | events | wall s | events/s | AFR | AJCT s | AGU |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.policy or policy_names():
        r = simulate(part, SimConfig(name, nodes, queue=args.queue, keep_timeline=False, migrations_per_hour=BUDGET))
        m = r.metrics
        rate = r.events / r.wall_s
        print(f"| {name} | {r.events:,} | {r.wall_s:.2f} | {rate:,.0f} | {m.afr:.4f} | {m.ajct_s:,.0f} | {m.agu:.4f} |")

    if not args.full:
        return
    nodes = make_nodes([(8, cluster_size(jobs, args.eta, 8))])
    print(f"\n### Philly, full trace ({len(jobs):,} jobs, {len(nodes)} nodes, N({args.eta}), queue {args.queue})", end="")
    print(f", target <= {TARGET_S:.0f} s\n")
    # CPU time beside wall time: on a shared machine the wall clock also counts other people's work.
    print("| policy | events | wall s | CPU s | events per CPU s | within target (CPU) |")
    print("|---|---:|---:|---:|---:|---|")
    for name in FULL_TRACE_POLICIES:
        cpu = time.process_time()
        r = simulate(jobs, SimConfig(name, nodes, queue=args.queue, keep_timeline=False, migrations_per_hour=BUDGET))
        cpu = time.process_time() - cpu
        ok = "yes" if cpu <= TARGET_S else "NO"
        print(f"| {name} | {r.events:,} | {r.wall_s:.1f} | {cpu:.1f} | {r.events / cpu:,.0f} | {ok} |")


if __name__ == "__main__":
    main()
