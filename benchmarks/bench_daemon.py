"""One daemon cycle (sync + decide, no Slurm calls) on a recorded 4,096-node, 20,000-job state.

    .venv/bin/python benchmarks/bench_daemon.py [--nodes 4096] [--jobs 20000] [--policy compass] [--keep FILE]

Builds a synthetic Slurm state (8-GPU nodes, a GFS-like mix of 1/2/4/8-GPU and
2-node jobs, ~97% of GPUs busy, the rest of the jobs pending and managed), saves
it in the snapshot format and runs the daemon on it through the snapshot
backend: scontrol commands are recorded, not run, and no decision log is
written. Reports the cold cycle (adopt every running job: a daemon restart) and
a steady cycle (1% of the jobs ended, as many new ones queued). Target (issue 4):
<= 0.5 s per cycle.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from compass_slurm.config import Config
from compass_slurm.daemon import Daemon
from compass_slurm.slurm.snapshot import SnapshotBackend, load, save
from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState

TARGET_S = 0.5
GPUS = 8
#: (GPUs in all, nodes, weight): mostly 1-GPU jobs, some FF sizes, whole nodes and 2-node jobs
MIX = ((1, 1, 60), (2, 1, 10), (4, 1, 8), (3, 1, 1), (8, 1, 15), (16, 2, 6))
MARKERS = ("", "compass", "compass:migratable")


def build(nodes: int, jobs: int, busy: float, seed: int) -> SlurmState:
    rng = random.Random(seed)
    names = [f"gpu{i:04d}" for i in range(1, nodes + 1)]
    free = dict.fromkeys(names, GPUS)
    target = busy * nodes * GPUS
    used, out = 0, []
    sizes, weights = [m[:2] for m in MIX], [m[2] for m in MIX]
    cursor = 0
    for k in range(jobs):
        gpus, count = rng.choices(sizes, weights)[0]
        job_id = str(1000 + k)
        comment = rng.choice(MARKERS)
        if used + gpus <= target:
            per = gpus // count
            alloc: dict[str, int] = {}
            for name in names[cursor:] + names[:cursor]:  # first fit from a moving cursor
                if free[name] >= per and name not in alloc:
                    alloc[name] = per
                    if len(alloc) == count:
                        break
            if len(alloc) == count:
                for name in alloc:
                    free[name] -= per
                used += gpus
                cursor = names.index(next(iter(alloc)))
                out.append(SlurmJob(job_id, "u%d" % (k % 50), "RUNNING", "gpu", nodes=tuple(alloc),
                                    gpus_alloc=alloc, num_nodes=count, gpus_per_node=per, comment=comment))
                continue
        out.append(SlurmJob(job_id, "u%d" % (k % 50), "PENDING", "gpu", num_nodes=count,
                            gpus_per_node=gpus // count if count > 1 else None,
                            gpus_per_job=None if count > 1 else gpus, comment=comment or "compass",
                            reason="BeginTime", priority=rng.randint(1, 10_000), submit_time=k))
    node_objs = tuple(SlurmNode(n, "mixed" if free[n] < GPUS else "idle", frozenset(), ("gpu",), GPUS,
                                GPUS - free[n], None, 128, 0, 1_024_000, 0) for n in names)
    return SlurmState(node_objs, tuple(out), (SlurmPartition("gpu", tuple(names)),), (), "22.05.8", time.time())


def churn(state: SlurmState, share: float, seed: int) -> SlurmState:
    """``share`` of the running jobs ended; as many new managed 1-GPU jobs queued."""
    rng = random.Random(seed)
    running = [j for j in state.jobs if j.running]
    ended = {j.id for j in rng.sample(running, int(len(running) * share))}
    base = max(int(j.id) for j in state.jobs) + 1
    new = tuple(SlurmJob(str(base + i), "u0", "PENDING", "gpu", gpus_per_job=rng.choice((1, 2, 4, 8)),
                         comment="compass", reason="BeginTime", priority=5_000) for i in range(len(ended)))
    return replace(state, jobs=tuple(j for j in state.jobs if j.id not in ended) + new)


def timed(daemon: Daemon) -> tuple[float, int]:
    started = time.perf_counter()
    report = daemon.cycle()
    assert report.skipped is None, report.skipped
    return time.perf_counter() - started, len(report.decisions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--busy", type=float, default=0.97, help="share of GPUs running jobs")
    parser.add_argument("--policy", default="compass")
    parser.add_argument("--keep", type=Path, help="also keep the recorded state in this file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "state.json"
        save(build(args.nodes, args.jobs, args.busy, seed=1), path)
        started = time.perf_counter()
        state = load(path)
        load_s = time.perf_counter() - started
    backend = SnapshotBackend(state, out=None)
    daemon = Daemon(Config(policy=args.policy, anchors=""), backend, None)
    cold, cold_n = timed(daemon)
    backend.state = churn(state, 0.01, seed=2)
    steady, steady_n = timed(daemon)
    running = sum(1 for j in state.jobs if j.running)
    print(f"| daemon cycle, {args.nodes:,} nodes, {len(state.jobs):,} jobs ({running:,} running), {args.policy} "
          f"| cold {cold:.3f} s ({cold_n} placed) | steady {steady:.3f} s ({steady_n} placed) "
          f"| target <= {TARGET_S} s: {'met' if max(cold, steady) <= TARGET_S else 'MISSED'} "
          f"| snapshot load {load_s:.3f} s |")


if __name__ == "__main__":
    main()
