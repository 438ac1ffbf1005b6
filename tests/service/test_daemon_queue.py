"""The daemon's queue is the engine's Scheduler (its ``queue`` setting): one Slurm snapshot through both, same decisions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compass_slurm.config import CHOICES, Config
from compass_slurm.engine.policies.base import make_policy
from compass_slurm.engine.scheduler import QUEUES, Scheduler
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm.snapshot import SnapshotBackend
from compass_slurm.slurm.translate import Translator
from test_daemon_unit import Clock, cluster, nodes, pending, running, update

NOW = 1_000_000


def run(job_id: str, node: str, start: float, limit: int | None):
    return replace(running(job_id, {node: 1}), start_time=int(start), time_limit_s=limit)


def snapshot():
    """Six 8-GPU nodes, each with six 1-GPU jobs (n1-n3 end within 600-800 s, n4-n6 in 2 h), and a queue
    headed by a 2-node whole-node job that cannot fit now."""
    jobs = []
    for n in range(1, 7):
        for k in range(6):
            limit = 500 + 100 * n if n <= 3 else 7200
            jobs.append(run(f"{100 + 10 * n + k}", f"n{n}", NOW - 100, limit))
    jobs += [
        replace(pending("50", per_node=8, nodes=2, priority=1000), time_limit_s=3600),
        replace(pending("51", gpus=1, priority=900), time_limit_s=300),  # ends before the shadow time
        replace(pending("52", gpus=1, priority=800), time_limit_s=36000),  # past it: not on reserved GPUs
        replace(pending("53", gpus=1, priority=700), time_limit_s=36000),
        replace(pending("55", gpus=1, priority=500)),  # no time limit: runs forever as far as anyone knows
        replace(pending("54", gpus=1, priority=600, submit_time=5), time_limit_s=60),
    ]
    return cluster(nodes(6), jobs)


def through_the_daemon(state, **settings):
    backend = SnapshotBackend(state, out=None)
    clock = Clock()
    clock.now = NOW
    daemon = Daemon(Config(anchors="", **settings), backend, None, clock=clock)
    report = daemon.cycle()
    assert report.errors == []
    return [(d.job_id, d.gpus_per_node) for d in report.decisions], backend.commands


def through_the_scheduler(state, policy: str = Config.policy, queue: str = Config.queue):
    """What the engine alone decides for the same snapshot: adopt what runs, queue what waits, drain once."""
    obs = Translator(state).observe()
    policy = make_policy(policy, obs.nodes)
    scheduler = Scheduler(policy, queue)
    for job, where in sorted((r.engine() for r in obs.running.values()), key=lambda jn: -jn[0].gpus):
        slurm = obs.running[job.id].slurm
        scheduler.adopt(job, where, slurm.start_time, slurm.time_limit_s)
    policy.compact()
    for p in obs.pending:
        scheduler.submit(p.job, p.eligible, limit=p.slurm.time_limit_s)
    step = scheduler.drain(NOW)
    return [(d.job, d.gpus_per_node()) for d in step.decisions], scheduler.reservation


def test_the_daemon_defaults_are_the_simulators():
    """The README promises it: the daemon's queue and the simulator's are one default, from one place."""
    from compass_slurm.cli import simulate

    assert (Config.policy, Config.queue) == ("compass-easy", "backfill")
    from compass_slurm.sim import sweep

    assert simulate.DEFAULT_QUEUE == Config.queue and simulate.DEFAULT_BUDGET == Config.migrations_per_hour
    assert sweep.DEFAULT_BUDGET == Config.migrations_per_hour == "per-node"
    assert sweep.DEFAULT_SLACK == Config.slack == 0.0 and sweep.DEFAULT_QUEUE == Config.queue
    assert simulate.DEFAULT_BURST == sweep.BURST_DEFAULT == Config.migrations_burst == "10%"
    assert CHOICES["queue"] is QUEUES


def test_the_engine_s_own_slack_is_easy_s_rule_where_its_caller_names_none():
    """The one named difference (engine/disciplines.py): a Scheduler, a simulation (SimConfig) and an old sweep
    plan without a slack are EASY's rule; the daemon, `compass simulate` and a new sweep use DEFAULT_SLACK, which
    is EASY's rule too since issue 32 measured what a slack costs whole-node jobs."""
    import inspect

    from compass_slurm.engine.disciplines import DEFAULT_SLACK, EASY_SLACK
    from compass_slurm.sim import sweep
    from compass_slurm.sim.loop import SimConfig

    assert EASY_SLACK == 0.0 == DEFAULT_SLACK
    assert inspect.signature(Scheduler).parameters["slack"].default == EASY_SLACK
    assert SimConfig.slack == EASY_SLACK and sweep.Task.slack == EASY_SLACK
    assert Config.slack == DEFAULT_SLACK


@pytest.mark.parametrize("policy", ["compass-easy", "compass"])
@pytest.mark.parametrize("queue", QUEUES)
def test_every_policy_and_queue_decides_alike_through_the_daemon_and_the_scheduler(policy, queue):
    state = snapshot()
    daemon, _ = through_the_daemon(state, policy=policy, queue=queue)
    engine, reservation = through_the_scheduler(state, policy, queue)
    assert daemon == engine
    if queue == "fifo":  # strict order: the blocked head stops every later job
        assert daemon == [] and reservation is None


def test_one_snapshot_gives_the_same_decisions_through_the_daemon_and_the_scheduler():
    state = snapshot()
    daemon, commands = through_the_daemon(state)
    engine, reservation = through_the_scheduler(state)
    assert daemon == engine
    # EASY as Slurm's backfill: the head reserves the two nodes that free first, at the later of their ends
    assert (reservation.job, reservation.shadow) == ("50", NOW + 600)
    assert sorted(policy_nodes(reservation)) == ["n1", "n2"]
    placed = dict(daemon)
    assert "50" not in placed
    assert placed["51"] == {"n1": 1} and placed["54"] == {"n1": 1}  # short: may use the reserved GPUs
    assert all(not set(placed[j]) & {"n1", "n2"} for j in ("52", "53", "55"))  # long: elsewhere
    assert list(placed) == ["51", "52", "53", "54", "55"]  # Slurm's priority order (54 and 55 by priority)
    assert commands[:2] == [update("51", "n1", 1, 1), update("52", "n3", 1, 1)]
    assert commands[-1] == ["scontrol", "update", "JobId=50", "StartTime=now+60"]  # the head keeps its lease


def policy_nodes(reservation) -> list[str]:
    return [f"n{i + 1}" for i in reservation.nodes]


def test_without_time_limits_nothing_is_reserved_and_every_job_that_fits_starts():
    """Slurm's backfill cannot plan without limits either: the queue then behaves as before (work-conserving)."""
    state = snapshot()
    state = replace(state, jobs=tuple(replace(j, time_limit_s=None) for j in state.jobs))
    daemon, _ = through_the_daemon(state)
    engine, reservation = through_the_scheduler(state)
    assert daemon == engine and reservation is None
    assert {"51", "52", "53", "54", "55"} <= dict(daemon).keys()


def states():
    """Cycles of one queue as Slurm changes it: jobs leave the queue and the cluster, new ones come,
    a queued job's time limit and another's excluded nodes change."""
    first = snapshot()
    jobs = {j.id: j for j in first.jobs}
    second = dict(jobs)
    for gone in ("111", "112", "121", "53"):  # two running on n1 ended, one on n2; a queued job cancelled
        del second[gone]
    second["60"] = replace(pending("60", gpus=2, priority=650), time_limit_s=900)
    second["54"] = replace(jobs["54"], time_limit_s=7200)
    third = dict(second)
    third["52"] = replace(second["52"], excluded_nodes=("n3", "n4"))
    third["61"] = replace(pending("61", per_node=8, nodes=1, priority=2000), time_limit_s=60)
    return [first, replace(first, jobs=tuple(second.values())), replace(first, jobs=tuple(third.values()))]


def test_the_daemon_s_kept_queue_decides_as_a_queue_built_afresh_each_cycle():
    def run(fresh: bool):
        backend = SnapshotBackend(states()[0], out=None)
        clock = Clock()
        clock.now = NOW
        daemon = Daemon(Config(anchors=""), backend, None, clock=clock)
        out = []
        for k, state in enumerate(states() * 2):
            backend.state = state
            clock.now = NOW + 10 * k
            if fresh:
                daemon.scheduler = None  # as before the queue was kept: a Scheduler per cycle
            report = daemon.cycle()
            assert report.errors == []
            out.append(([(d.job_id, d.action, d.gpus_per_node) for d in report.decisions],
                        [(m.job_id, m.src, m.dst) for m in report.migrations]))
        return out, backend.commands

    kept, fresh = run(False), run(True)
    assert kept == fresh
    assert any(decisions for decisions, _ in kept[0])  # the cycles decided something
