"""N(eta) on a demand curve small enough to integrate by hand."""

from __future__ import annotations

import pytest

from compass_slurm.engine.model import Job
from compass_slurm.sim.sizing import cluster_size, demand_curve, demand_percentile, make_nodes, parse_mix
from compass_slurm.sim.workloads import SimJob

# Demand: 4 GPUs on [0,5), 12 on [5,10), 8 on [10,15), 0 on [15,20), 2 on [20,30).
# Sorted by level with time spent: 0 (5 s), 2 (10), 4 (5), 8 (5), 12 (5) of 30 s.
JOBS = [
    SimJob(0, 10, Job("a", 1, 4)),
    SimJob(5, 10, Job("b", 1, 8)),
    SimJob(20, 10, Job("c", 1, 2)),
    SimJob(25, 0, Job("zero", 1, 8)),  # a 0 s job adds no demand
]


def test_demand_curve():
    assert demand_curve(JOBS) == ([0, 5, 10, 15, 20, 30], [4, 12, 8, 0, 2, 0])


@pytest.mark.parametrize("eta, level", [(0.1, 0), (0.5, 2), (0.6, 4), (0.8, 8), (0.9, 12), (1.0, 12)])
def test_time_weighted_percentile(eta, level):
    assert demand_percentile(JOBS, eta) == level


def test_cluster_size_is_percentile_nodes_or_the_largest_job():
    assert cluster_size(JOBS, 0.9, 8) == 2  # ceil(12 / 8)
    assert cluster_size(JOBS, 0.5, 8) == 1
    wide = [*JOBS, SimJob(40, 1, Job("wide", 3, 8))]
    assert cluster_size(wide, 0.5, 8) == 3  # N_maxjob: three whole nodes
    packed = [SimJob(0, 1, Job("p", 5, 3))]  # two 3-GPU instances per 8-GPU node
    assert cluster_size(packed, 0.9, 8) == 3


def test_eta_out_of_range():
    with pytest.raises(ValueError, match="eta"):
        demand_percentile(JOBS, 1.5)


def test_node_mix():
    assert parse_mix("8:2, 4:1") == [(8, 2), (4, 1)]
    assert [n.gpus for n in make_nodes(parse_mix("8:2,4:1"))] == [8, 8, 4]
    for bad in ("8", "8:x", "0:3", "8:0", "1025:1"):
        with pytest.raises(ValueError, match="bad node mix"):
            parse_mix(bad)


def test_a_cluster_past_a_million_nodes_is_refused_before_any_node_is_made():
    """The engine's indexes grow with the nodes: a typo must not exhaust the memory."""
    assert len(make_nodes(parse_mix("8:999999,4:1"))) == 1_000_000
    with pytest.raises(ValueError) as err:
        parse_mix("8:99999999999999")
    assert str(err.value) == ("node mix '8:99999999999999': 99,999,999,999,999 nodes, more than the 1,000,000 a "
                              "simulation takes")
    with pytest.raises(ValueError) as err:
        cluster_size([SimJob(0, 10, Job("huge", 10**9, 1))], 0.9, 8)
    assert str(err.value) == ("N(0.9) of this workload on 8-GPU nodes: 125,000,000 nodes, more than the 1,000,000 a "
                              "simulation takes")
