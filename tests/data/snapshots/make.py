#!/usr/bin/env python3
"""Snapshots for the CLI tests: the recorded 16-node dev-cluster state, and a synthetic 2,000-node one.

    python3 tests/data/snapshots/make.py        # rewrites mixed-16x8.json from tests/data/slurm/mixed-16x8

``large_state()`` builds the 2,000-node state in memory (the tests call it; a file
that size would only bloat the repository): 2,000 nodes of 8 GPUs in two
partitions, a seeded mix of running 1/2/4/8-GPU jobs, some nodes down or
drained, and pending jobs of which a few cannot start.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from compass_slurm.slurm import snapshot  # noqa: E402
from compass_slurm.slurm.cli_backend import CliBackend  # noqa: E402
from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState  # noqa: E402

RECORDED = REPO / "tests" / "data" / "slurm" / "mixed-16x8"
#: a fixed read time, so JSON output is the same on every run
READ_AT = 1796003000.0


def recorded_state() -> SlurmState:
    """The mixed-16x8 scenario, parsed from the Slurm output recorded on the dev cluster."""
    answers = json.loads((RECORDED / "commands.json").read_text())

    def replay(argv: list[str], timeout: float) -> tuple[int, str, str]:
        return 0, (RECORDED / answers[" ".join(argv)]).read_text(), ""

    state = CliBackend(runner=replay).read_state()
    return SlurmState(state.nodes, state.jobs, state.partitions, state.reservations, state.version, READ_AT)


def large_state(nodes: int = 2000, seed: int = 7) -> SlurmState:
    """A busy 2,000 x 8 cluster: nodes 1-1500 in partition ``a100``, the rest in ``h100``."""
    rng = random.Random(seed)
    names = [f"gpu{k:04d}" for k in range(1, nodes + 1)]
    split = nodes * 3 // 4
    used = [0] * nodes
    jobs: list[SlurmJob] = []
    job_id = 1000
    down = {names[k] for k in range(9, split, 97)}
    drained = {names[k] for k in range(19, split, 131)}
    # a100: a mix of whole-node and small jobs. h100: full but for one empty node and a few
    # partial ones, so whole-node requests there wait ("needs 2 empty nodes, 1 free").
    for i in range(nodes):
        if names[i] in down:
            continue
        if i >= split:
            g = 0 if i == split else (3 if i % 50 == 8 else 8)
        elif i % 10 < 6:
            g = 8
        elif i % 10 < 8:
            while used[i] < 8:
                job_id += 1
                g = min(rng.choice((1, 2, 4)), 8 - used[i])
                jobs.append(_running(job_id, names[i], g, "a100", migratable=rng.random() < 0.5))
                used[i] += g
            continue
        else:
            g = rng.choice((0, 0, 1, 2, 3, 4, 6))
        if g:
            job_id += 1
            jobs.append(_running(job_id, names[i], g, _partition(i, split)))
            used[i] = g
    node_objs = []
    for i, name in enumerate(names):
        state = "down" if name in down else ("idle" if used[i] == 0 else ("allocated" if used[i] == 8 else "mixed"))
        flags = frozenset({"DRAIN"}) if name in drained else frozenset()
        node_objs.append(SlurmNode(name, state, flags, (_partition(i, split),), 8, 0 if name in down else used[i],
                                   None, 64, 0, 512000, 0, "maintenance" if name in down | drained else ""))
    for pending in (("9001", 8 * 700, "a100"), ("9002", 16, "h100"), ("9003", 4, "a100"), ("9004", 1, "h100")):
        job, gpus, part = pending
        jobs.append(SlurmJob(job, "alice", "PENDING", part, gpus_per_job=gpus, reason="Resources",
                             comment="compass", submit_time=1796002000, priority=100))
    jobs.append(SlurmJob("9005", "bob", "PENDING", "h100", num_nodes=3, gpus_per_node=8, reason="Resources",
                         submit_time=1796002100, priority=90))
    parts = (SlurmPartition("a100", tuple(names[:split]), default=True), SlurmPartition("h100", tuple(names[split:])))
    return SlurmState(tuple(node_objs), tuple(jobs), parts, (), "22.05.8", READ_AT)


def _partition(i: int, split: int) -> str:
    return "a100" if i < split else "h100"


def _running(job_id: int, node: str, gpus: int, partition: str, migratable: bool = False) -> SlurmJob:
    return SlurmJob(str(job_id), f"user{job_id % 17}", "RUNNING", partition, (node,), {node: gpus},
                    gpus_per_job=gpus, comment="compass:migratable" if migratable else "")


if __name__ == "__main__":
    snapshot.save(recorded_state(), HERE / "mixed-16x8.json")
    print(f"wrote {HERE / 'mixed-16x8.json'}")
