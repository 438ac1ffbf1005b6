"""No starvation under EASY: a 4-node job behind a steady stream of 1-GPU jobs starts when its reservation said."""

from __future__ import annotations

import random

import pytest

from compass_slurm.engine.model import Job
from compass_slurm.sim.loop import SimConfig, Simulation
from compass_slurm.sim.sizing import make_nodes
from compass_slurm.sim.workloads import SimJob


def stream(seed: int = 1) -> list[SimJob]:
    """The dev-cluster scenario of issue 9: 128 fill jobs, the 4 x 8 job, then 2 jobs/s for 5 minutes."""
    rng = random.Random(seed)
    jobs = [SimJob(0.0, rng.uniform(20, 120), Job(f"fill{k}", 1, 1)) for k in range(128)]
    jobs.append(SimJob(1.0, 60.0, Job("big", 4, 8)))
    jobs += [SimJob(1.0 + k / 2, rng.uniform(30, 60), Job(f"s{k}", 1, 1)) for k in range(600)]
    return jobs


@pytest.mark.parametrize("policy", ["compass-easy", "compass", "best-fit", "slurm-default"])
@pytest.mark.parametrize("delay", [0.0, 8.0])
def test_the_big_job_starts_by_its_first_reservation(policy, delay):
    sim = Simulation(stream(), SimConfig(policy, make_nodes([(8, 16)]), delay, "backfill", check=True))
    sim.run()
    promised = sim.promised["big"]
    assert sim.started["big"] <= promised + 1e-9, (sim.started["big"], promised)
    assert promised <= 121  # the fill jobs end by 120 s: four nodes are free by then at the latest
    # and the stream kept flowing past it: most 1-GPU jobs started at once
    waits = sorted(sim.started[f"s{k}"] - (1.0 + k / 2) for k in range(600))
    assert waits[len(waits) // 2] < 60


@pytest.mark.parametrize("policy", ["compass-easy", "best-fit"])
def test_slack_for_one_node_heads_leaves_the_multi_node_job_its_promise(policy):
    sim = Simulation(stream(), SimConfig(policy, make_nodes([(8, 16)]), 8.0, "backfill", check=True, slack=1.0))
    sim.run()
    assert sim.started["big"] <= sim.promised["big"] + 1e-9 and sim.promised["big"] <= 121


def test_under_fifo_the_stream_waits_behind_the_big_job():
    sim = Simulation(stream(), SimConfig("best-fit", make_nodes([(8, 16)]), 0.0, "fifo", check=True))
    sim.run()
    assert "big" not in sim.promised  # no reservations in strict FIFO
    assert all(sim.started[f"s{k}"] >= sim.started["big"] for k in range(600))
