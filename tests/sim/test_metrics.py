"""Metrics on timelines whose averages are computed by hand."""

from __future__ import annotations

import pytest

from compass_slurm.sim.metrics import Timeline, summarize


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


def test_averages_over_the_time_the_queue_is_non_empty():
    # queued during samples 0 (10 s) and 2 (30 s): SIF 0.25 and 0.75, use 0.5 and 0.75.
    m = summarize(timeline([1, 0, 2, 0]), [0, 10, 20, 30, 100], [10, 20], 4, 32, migrations=3, migration_gpu_s=48)
    assert m.averaged_over == "queued"
    assert m.queued_s == 40
    assert m.afr == pytest.approx((0.25 * 10 + 0.75 * 30) / 40)
    assert m.agu == pytest.approx((0.5 * 10 + 0.75 * 30) / 40)
    assert m.max_sif == 0.75
    assert m.sif_bound_frac == pytest.approx(10 / 40)  # 2/N = 0.5: only sample 0 is within
    assert m.wcc_frac == pytest.approx(30 / 40)
    assert m.ajct_s == 15
    assert m.mean_wait_s == 32
    assert m.p99_wait_s == pytest.approx(30 + 0.96 * 70)  # linear interpolation at rank 3.96
    assert m.makespan_s == 50
    assert (m.jobs, m.migrations, m.migration_gpu_s) == (2, 3, 48)


def test_a_queue_that_never_fills_averages_over_the_whole_run():
    m = summarize(timeline([0, 0, 0, 0]), [0], [10], 4, 32)
    assert m.averaged_over == "all" and m.queued_s == 0
    assert m.afr == pytest.approx((0.25 * 10 + 0.25 * 10 + 0.75 * 30) / 50)


def test_nothing_simulated_is_an_error():
    with pytest.raises(ValueError, match="nothing"):
        summarize(Timeline(), [], [], 1, 8)
