"""Metrics on timelines whose averages are computed by hand."""

from __future__ import annotations

import pytest

from compass_slurm.engine.model import Job
from compass_slurm.sim.metrics import Timeline, summarize, window_max, wait_class
from compass_slurm.sim.workloads import SimJob


def timeline(queued):
    # 4 nodes, 32 GPUs; samples hold for 10, 10, 30 s, the last one ends the run.
    return Timeline(
        time=[0, 10, 20, 50],
        queued=queued,
        running=[1, 1, 2, 0],
        gpus_used=[16, 4, 24, 0],
        partial=[2, 1, 4, 0],
        phi_star=[1, 0, 1, 0],
        wcc=[False, True, True, True],
    )


def sj(job_id, submit, gpus=1, instances=1):
    return SimJob(submit, 0.0, Job(job_id, instances, gpus))


#: five jobs: (submit, start, end) and their sizes; waits 0, 10, 20, 30, 100
JOBS = [sj("a", 0), sj("b", 0, 2), sj("c", 0, 8), sj("d", 0, 8, 2), sj("e", 0, 1)]
STARTED = {"a": 0, "b": 10, "c": 20, "d": 30, "e": 100}
ENDED = {"a": 5, "b": 30, "c": 25, "d": 60, "e": 101}


def test_averages_over_the_time_the_queue_is_non_empty():
    # queued during samples 0 (10 s) and 2 (30 s): SIF 0.25 and 0.75, use 0.5 and 0.75.
    m = summarize(timeline([1, 0, 2, 0]), JOBS, STARTED, ENDED, 4, 32, 8, [0, 5, 3700], migration_gpu_s=48)
    assert m.averaged_over == "queued"
    assert m.queued_s == 40
    assert m.afr == pytest.approx((0.25 * 10 + 0.75 * 30) / 40)
    assert m.agu == pytest.approx((0.5 * 10 + 0.75 * 30) / 40)
    assert m.max_sif == 0.75
    assert m.sif_bound_frac == pytest.approx(10 / 40)  # 2/N = 0.5: only sample 0 is within
    assert m.wcc_frac == pytest.approx(30 / 40)
    assert m.ajct_s == pytest.approx((5 + 30 + 25 + 60 + 101) / 5)
    assert m.mean_wait_s == 32
    assert m.p99_wait_s == pytest.approx(30 + 0.96 * 70)  # linear interpolation at rank 3.96
    assert m.makespan_s == 50
    assert (m.jobs, m.migrations, m.migration_gpu_s) == (5, 3, 48)
    assert m.migrations_per_hour_max == 2  # 0 and 5 in one hour; 3700 is more than an hour after 0, not after 5
    assert m.migrations_burst_max == 2  # 0 and 5 in 5 minutes too
    assert m.mean_wait_by_class_s == {"1": 50, "2-4": 10, "5-7": None, "whole-node": 25}
    # the price of moving: 48 GPU-s lost; 3 migrations for the 2 whole-node jobs (c and d) started
    assert m.restart_gpu_h == pytest.approx(48 / 3600)
    assert m.migrations_per_whole_node_job == 1.5
    assert m.cluster_gpus == 32
    assert m.p99_wait_by_class_s["1"] == pytest.approx(99)
    # bounded slowdown: max(1, completion / max(run, 10)) = 1, 30/20, 25/10, 60/30, 101/10
    assert m.bounded_slowdown == pytest.approx((1 + 1.5 + 2.5 + 2 + 10.1) / 5)


def test_wait_classes_go_by_gpus_per_instance():
    assert [wait_class(g, 8) for g in (1, 2, 4, 5, 7, 8)] == ["1", "2-4", "2-4", "5-7", "5-7", "whole-node"]
    assert wait_class(4, 4) == "whole-node"


def test_window_max_is_a_sliding_window():
    assert window_max([]) == 0
    assert window_max([0, 3599, 3600, 3600, 7300]) == 3  # (0, 3600] holds 3599, 3600, 3600
    assert window_max([0, 0, 0]) == 3
    assert window_max([0, 299, 300, 300, 700], 300.0) == 3  # the burst cap's 5 minutes: (0, 300]


def test_a_queue_that_never_fills_averages_over_the_whole_run():
    m = summarize(timeline([0, 0, 0, 0]), JOBS, STARTED, ENDED, 4, 32, 8)
    assert m.averaged_over == "all" and m.queued_s == 0
    assert m.afr == pytest.approx((0.25 * 10 + 0.25 * 10 + 0.75 * 30) / 50)


def test_nothing_simulated_is_an_error():
    with pytest.raises(ValueError, match="nothing"):
        summarize(Timeline(), [], {}, {}, 1, 8, 8)
