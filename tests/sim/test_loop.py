"""The event loop on hand-made traces whose completion times are worked out by hand."""

from __future__ import annotations

import random

import pytest

from compass_slurm.engine.model import Job, Migration
from compass_slurm.engine.policies.base import Compaction
from compass_slurm.engine.policies.baselines import FirstFit
from compass_slurm.sim import loop
from compass_slurm.sim.loop import InvariantError, SimConfig, Simulation, simulate
from compass_slurm.sim.sizing import make_nodes
from compass_slurm.sim.synthetic import generate
from compass_slurm.sim.workloads import SimJob, load_csv, to_jobs


def sim_job(job_id: str, submit: float, duration: float, instances: int, gpus: int) -> SimJob:
    return SimJob(submit, duration, Job(job_id, instances, gpus))


def run(jobs, nodes=1, policy="first-fit", **options) -> Simulation:
    sim = Simulation(jobs, SimConfig(policy, make_nodes([(8, nodes)]), check=True, **options))
    sim.run()
    return sim


class Mover(FirstFit):
    """First fit that, after every departure, moves what runs on node 1 onto node 0 when it fits."""

    name = "test-mover"

    def __init__(self, nodes, **config):
        super().__init__(nodes, **config)
        self.departed = False

    def _remove(self, job_id):
        self.departed = True
        return super()._remove(job_id)

    def compact(self, budget=None):
        if not self.departed:
            return Compaction()
        self.departed = False
        c = self.cluster
        moves = []
        for key, gpus in sorted(c.on_node[1].items()):
            if c.free_gpus(0) >= gpus:
                c.move(key, 0)
                moves.append(Migration(key[0], key[1], c.nodes[1].name, c.nodes[0].name))
        return Compaction(tuple(moves), len(moves))


@pytest.fixture
def mover(monkeypatch):
    # Only this test's simulations see the migrating policy; the registry stays untouched.
    monkeypatch.setattr(loop, "make_policy", lambda name, nodes: Mover(nodes))


def test_fifo_completion_times():
    # One 8-GPU node. B waits for A, C (2 GPUs) waits behind B although it would fit: strict FIFO.
    sim = run([sim_job("A", 0, 10, 1, 6), sim_job("B", 1, 5, 1, 8), sim_job("C", 2, 4, 1, 2)])
    assert sim.started == {"A": 0, "B": 10, "C": 15}
    assert sim.ended == {"A": 10, "B": 15, "C": 19}


def test_completion_frees_gpus_for_an_arrival_at_the_same_second():
    sim = run([sim_job("A", 0, 10, 1, 8), sim_job("B", 10, 5, 1, 8)])
    assert sim.started["B"] == 10
    # the state after t=10 is sampled once, with nothing waiting
    assert sim.timeline.time == [0, 10, 15] and sim.timeline.queued == [0, 0, 0]


def test_gang_starts_whole_or_not_at_all():
    # 2 nodes; B needs 2 x 8 and must wait until both nodes are empty.
    sim = run([sim_job("A", 0, 30, 1, 1), sim_job("B", 1, 10, 2, 8)], nodes=2)
    assert sim.started["B"] == 30 and sim.ended["B"] == 40


@pytest.mark.parametrize("delay, b_end", [(8.0, 108.0), (0.0, 100.0), (2.5, 102.5)])
def test_migration_delays_the_moved_job_once_per_event(mover, delay, b_end):
    # A fills node 0, B's two 4-GPU instances share node 1, C waits. When A ends at 10 both of
    # B's instances move to node 0 in one event: B pauses once, and C starts on node 1 at 10.
    jobs = [sim_job("A", 0, 10, 1, 8), sim_job("B", 0, 100, 2, 4), sim_job("C", 5, 20, 1, 8)]
    sim = run(jobs, nodes=2, migration_delay=delay)
    assert sim.ended == {"A": 10, "C": 30, "B": b_end}
    result = simulate(jobs, SimConfig("test-mover", make_nodes([(8, 2)]), migration_delay=delay))
    assert result.metrics.migrations == 2
    assert result.metrics.migration_gpu_s == delay * 8
    assert result.metrics.ajct_s == pytest.approx((10 + b_end + 25) / 3)


def test_easy_backfill_lets_only_short_jobs_jump():
    # A holds 4 of 8 GPUs until 100; H (8 GPUs) is blocked with shadow time 100. S (2 GPUs, ends 52)
    # may jump; L (2 GPUs, would end 203) fits but would delay H, so it waits.
    jobs = [
        sim_job("A", 0, 100, 1, 4),
        sim_job("H", 1, 10, 1, 8),
        sim_job("S", 2, 50, 1, 2),
        sim_job("L", 3, 200, 1, 2),
    ]
    with_backfill = run(jobs, queue="backfill")
    assert with_backfill.started == {"A": 0, "S": 2, "H": 100, "L": 110}
    fifo = run(jobs, queue="fifo")
    assert fifo.started == {"A": 0, "H": 100, "S": 110, "L": 110}


def test_same_seed_same_result_and_other_seed_differs():
    def once(seed):
        jobs, _ = to_jobs(generate("gfs", 400, seed).records, 8)
        return simulate(jobs, SimConfig("best-fit", make_nodes([(8, 12)]), keep_timeline=False)).metrics

    assert once(3) == once(3)
    assert once(3) != once(4)


def test_mixed_node_sizes_take_8_gpu_jobs_on_8_gpu_nodes_only():
    nodes = make_nodes([(4, 2), (8, 1)])
    jobs = [sim_job("a", 0, 10, 1, 4), sim_job("b", 0, 10, 1, 4), sim_job("c", 0, 10, 1, 8), sim_job("d", 1, 10, 1, 8)]
    sim = Simulation(jobs, SimConfig("first-fit", nodes, check=True))
    sim.run()
    assert sim.started == {"a": 0, "b": 0, "c": 0, "d": 10}


def test_empty_workload_and_unplaceable_job_are_clear_errors():
    with pytest.raises(ValueError, match="empty"):
        Simulation([], SimConfig("first-fit", make_nodes([(8, 1)])))
    with pytest.raises(ValueError, match=r"job big needs 3 x 8 GPUs but the 2 nodes hold at most 2"):
        Simulation([sim_job("big", 0, 1, 3, 8)], SimConfig("first-fit", make_nodes([(8, 2)])))


def test_check_mode_catches_a_policy_that_loses_track(monkeypatch):
    class Leaky(FirstFit):
        def check(self):
            if len(self.cluster.jobs) > 1:
                raise AssertionError("two jobs at once")

    monkeypatch.setattr(loop, "make_policy", lambda name, nodes: Leaky(nodes))
    jobs = [sim_job("A", 0, 10, 1, 1), sim_job("B", 1, 10, 1, 1)]
    with pytest.raises(InvariantError, match=r"after event 2 at t=1: .*two jobs at once"):
        run(jobs)


def test_a_cycle_interval_acts_on_departures_at_the_next_cycle_and_arrivals_at_once():
    nodes = make_nodes([(8, 1)])
    jobs = [SimJob(0.0, 10.0, Job("a", 1, 8)), SimJob(1.0, 5.0, Job("b", 1, 8)), SimJob(30.0, 5.0, Job("c", 1, 8))]
    result = Simulation(jobs, SimConfig("best-fit", nodes, queue="backfill", cycle_interval=4.0)).run()
    # a ends at 10: b starts at the next cycle, 12, and ends at 17; c arrives at 30 to an idle node
    assert result.metrics.mean_wait_s == pytest.approx((0 + 11 + 0) / 3)
    event_driven = Simulation(jobs, SimConfig("best-fit", nodes, queue="backfill")).run()
    assert event_driven.metrics.mean_wait_s == pytest.approx((0 + 9 + 0) / 3)


def test_the_daemons_look_between_cycles_notices_a_departure_before_the_next_cycle():
    nodes = make_nodes([(8, 1)])
    jobs = [SimJob(0.0, 10.2, Job("a", 1, 8)), SimJob(1.0, 5.0, Job("b", 1, 8))]
    looked = Simulation(jobs, SimConfig("best-fit", nodes, queue="backfill", cycle_interval=4.0, watch=0.5)).run()
    assert looked.metrics.mean_wait_s == pytest.approx((0 + 9.5) / 2)  # a ends at 10.2, the look at 10.5
    blind = Simulation(jobs, SimConfig("best-fit", nodes, queue="backfill", cycle_interval=4.0, watch=0.0)).run()
    assert blind.metrics.mean_wait_s == pytest.approx((0 + 11) / 2)  # the next cycle, at 12


def test_time_limits_from_the_trace_are_the_estimates_backfill_plans_with():
    nodes = make_nodes([(8, 2)])
    # a holds one node until 100; b (two nodes) waits for it; c would end by 50 but its limit says 200
    jobs = [SimJob(0.0, 100.0, Job("a", 1, 8)), SimJob(1.0, 10.0, Job("b", 2, 8)),
            SimJob(2.0, 50.0, Job("c", 1, 8), limit=200.0)]
    result = Simulation(jobs, SimConfig("best-fit", nodes, queue="backfill")).run()
    assert result.metrics.mean_wait_s == pytest.approx((0 + 99 + 108) / 3)  # c may not backfill: it starts after b
    trusting = [*jobs[:2], SimJob(2.0, 50.0, Job("c", 1, 8))]
    assert Simulation(trusting, SimConfig("best-fit", nodes, queue="backfill")).run().metrics.mean_wait_s == (
        pytest.approx((0 + 99 + 0) / 3))


def _orphan_churn(seed: int) -> tuple[list[SimJob], int]:
    """Small clusters, jobs of 1-16 GPUs arriving close together: orphans and vacancies on several nodes at once."""
    rng = random.Random(seed)
    nodes = rng.randint(2, 6)
    rows = ["job_id,submit_time_s,duration_s,num_gpus"]
    for k in range(rng.randint(20, 120)):
        rows.append(f"j{k},{k * rng.randint(1, 30)},{rng.randint(30, 900)},{rng.choice((1, 1, 1, 2, 3, 4, 8, 16))}")
    jobs, _ = to_jobs(load_csv("\n".join(rows) + "\n").records, 8)
    return jobs, nodes


@pytest.mark.parametrize(("seed", "budget", "queue"), [(19, 30, "fifo"), (45, 20, "backfill"), (90, 29, "backfill"),
                                                       (124, 11, "fifo"), (134, 27, "backfill")])
def test_compass_easy_under_a_scarce_budget_never_overfills_a_slot(seed, budget, queue):
    # Re-homing orphans kept one destination for all of them; a vacancy that an orphan of a later
    # node filled in place stayed that destination, and the next orphan overfilled the slot.
    jobs, nodes = _orphan_churn(seed)
    run(jobs, nodes, "compass-easy", queue=queue, migrations_per_hour=budget)


def _ties() -> list[SimJob]:
    """Four 1-GPU jobs ending at one instant on one 8-GPU node, and a queue behind them that the order of those
    departures decides: two 4-GPU jobs, then 1-GPU jobs."""
    jobs = [sim_job(f"r{i}", 0.0, 100.0, 1, 1) for i in range(4)]
    jobs += [sim_job(f"w{i}", 0.0, 100.0 + 10 * i, 1, 1) for i in range(4)]
    jobs += [sim_job("big", 1.0, 50.0, 1, 8)] + [sim_job(f"s{i}", 1.0, 30.0 + i, 1, 1) for i in range(6)]
    return jobs


def test_perturb_breaks_same_instant_ties_in_a_seeded_order():
    plain = run(_ties(), policy="best-fit")
    again = [run(_ties(), policy="best-fit", perturb=seed) for seed in (1, 1)]
    assert again[0].ended == again[1].ended  # a seed is one order
    orders = {tuple(sorted(run(_ties(), policy="best-fit", perturb=seed).started.items())) for seed in range(12)}
    assert len(orders) > 1  # ties broken otherwise change who starts when
    # every order runs every job once, on the same cluster
    assert all(len(dict(order)) == len(_ties()) for order in orders)
    assert plain.ended == run(_ties(), policy="best-fit").ended  # no perturbation: start order, as before


def test_perturbed_arrivals_keep_submit_order():
    jobs = [sim_job(f"j{i}", float(i // 3), 5.0, 1, 1) for i in range(12)]
    sim = Simulation(jobs, SimConfig("first-fit", make_nodes([(8, 1)]), perturb=7))
    assert [sj.submit for sj in sim.jobs] == sorted(sj.submit for sj in jobs)
    assert [sj.job.id for sj in sim.jobs] != [sj.job.id for sj in jobs]  # ties shuffled
