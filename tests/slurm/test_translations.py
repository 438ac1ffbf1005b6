"""The translation cache kept between cycles: a cycle that reuses it observes exactly what a fresh translation does."""

from __future__ import annotations

import operator
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compass_slurm.engine.policies.base import make_policy
from compass_slurm.service.sync import same_nodes
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState
from compass_slurm.slurm.translate import Observation, Translator
from compass_slurm.slurm.translation_cache import TranslationCache

NOW = 1.0e9
LEASE = 60


def facts(obs: Observation) -> tuple:
    """Everything an observation says; the pending jobs in their order (the queue's), the dicts by id."""
    return (obs.nodes, obs.running, [(p.slurm, p.job, p.eligible) for p in obs.pending], obs.queue_len,
            obs.pending_gpus, obs.skipped, obs.waiting, obs.slurm_jobs, obs.pending_managed)


def node(name: str, cpus_alloc: int = 0) -> SlurmNode:
    return SlurmNode(name, "mixed" if cpus_alloc else "idle", frozenset(), ("gpu",), 8, 0, None, 32, cpus_alloc,
                     256000, 0)


def pending(job_id: str, **kw) -> SlurmJob:
    fields = {"comment": "compass", "reason": "BeginTime", "gpus_per_node": 1, "eligible_time": int(NOW) + LEASE,
              "memory_per_cpu_mb": 8000, "priority": 10, **kw}
    return SlurmJob(job_id, "alice", "PENDING", "gpu", **fields)


def state(jobs, nodes=None, read_at: float = NOW) -> SlurmState:
    nodes = nodes or [node(f"n{i}") for i in range(1, 5)]
    return SlurmState(tuple(nodes), tuple(jobs), (SlurmPartition("gpu", tuple(n.name for n in nodes)),), (),
                      "22.05.8", read_at)


def check(states: list[SlurmState], **kw) -> list[Observation]:
    """Observe ``states`` in turn with one TranslationCache; each must equal a fresh translation. Returned as they
    were then (an Observation's dicts are the cache's, which its next observe changes)."""
    known, out = TranslationCache(), []
    for s in states:
        kept = Translator(s, lease=LEASE, known=known, **kw).observe()
        assert facts(kept) == facts(Translator(s, lease=LEASE, **kw).observe())
        out.append(replace(kept, running=dict(kept.running), skipped=dict(kept.skipped), waiting=dict(kept.waiting),
                           slurm_jobs=dict(kept.slurm_jobs), pending_managed=frozenset(kept.pending_managed),
                           ends=dict(kept.ends), left=dict(kept.left)))
    return out


def test_recorded_states_of_every_release_translate_as_afresh(mixed):
    backend = CliBackend(runner=mixed)
    first = backend.read_state()
    second = backend.read_state()  # the parser's memo: the same job objects
    assert all(a is b for a, b in zip(first.jobs, second.jobs))
    one, two = check([first, second])
    assert all(two.running[j] is r for j, r in one.running.items())
    assert all(a is b for a, b in zip(one.pending, two.pending))


def test_jobs_that_change_between_cycles_are_translated_anew():
    running = SlurmJob("1", "bob", "RUNNING", "gpu", nodes=("n1",), gpus_alloc={"n1": 2}, gpus_per_node=2,
                       cpus=4, start_time=int(NOW) - 100)
    jobs = [running, pending("2"), pending("3", priority=20), pending("4_[0-3]", array_job="4", array_pending="0-3",
                                                                       array_throttle=2, reason="JobArrayTaskLimit")]
    first = state(jobs)
    states = [
        first,
        first,  # nothing changed
        replace(first, read_at=NOW + 30),  # later: begin times come
        state([*jobs[:2], replace(jobs[2], priority=1), *jobs[3:]], read_at=NOW + 31),  # order changes
        state([*jobs, pending("5", required_nodes=("n2",), cpus=30)], read_at=NOW + 32),  # a pin claims CPUs
        state(jobs, [node("n1", cpus_alloc=32), *[node(f"n{i}") for i in range(2, 5)]], NOW + 33),  # fewer fit
        state([replace(jobs[1], reason="Dependency"), pending("6", gpus_per_node=9)], read_at=NOW + 34),
        state(jobs, [node(f"n{i}") for i in range(1, 4)], NOW + 35),  # a node left
    ]
    observed = check(states)
    assert [p.job.id for p in observed[1].pending] == ["3", "2", "4_0", "4_1"]
    assert [p.job.id for p in observed[3].pending] == ["2", "4_0", "4_1", "3"]
    assert observed[1].pending[0] is observed[0].pending[0]  # unchanged: the same Pending
    assert "5" in observed[4].slurm_jobs and observed[5].pending[0].eligible == frozenset({"n2", "n3", "n4"})


def test_a_priority_recalculation_keeps_each_job_s_translation_in_the_new_order():
    # slurmctld recalculates every pending job's priority (PriorityCalcPeriod): each is a new object at a new
    # priority. Its engine job stays the very object (the Scheduler keeps its entry), in the new order; a job
    # changed beyond its priority is translated anew.
    jobs = [pending("1", priority=30), pending("2", priority=20), pending("3_[0-1]", array_job="3",
                                                                          array_pending="0-1", priority=10)]
    known = TranslationCache()
    first = Translator(state(jobs), lease=LEASE, known=known).observe()
    repriced = [jobs[0].with_priority(5), jobs[1].with_priority(40), replace(jobs[2].with_priority(50), cpus=2)]
    s = state(repriced)
    second = Translator(s, lease=LEASE, known=known).observe()
    assert facts(second) == facts(Translator(s, lease=LEASE).observe())
    assert [p.job.id for p in second.pending] == ["3_0", "3_1", "2", "1"]
    before = {p.job.id: p.job for p in first.pending}
    assert [p.job is before[p.job.id] for p in second.pending] == [False, False, True, True]
    assert [p.slurm.priority for p in second.pending] == [50, 50, 40, 5]


@pytest.mark.parametrize("change", [{"migratable": "never"}, {"partitions": ["other"]}])
def test_a_changed_config_starts_afresh(change):
    jobs = [pending("1", comment="compass:migratable"), pending("2")]
    known = TranslationCache()
    Translator(state(jobs), lease=LEASE, known=known).observe()
    s = state(jobs)
    kept = Translator(s, lease=LEASE, known=known, **change).observe()
    assert facts(kept) == facts(Translator(s, lease=LEASE, **change).observe())


def test_the_same_job_twice_is_sorted_as_given():
    job = pending("1")
    check([state([job, pending("2")]), state([job, job, pending("2")])])


def test_a_kept_task_waits_for_its_begin_until_the_read_reaches_it():
    # its begin (less the lease) is 10 s past the first read and past its submission: it waits while the
    # read is more than BEGIN_SLACK earlier, also when its translation is kept from an earlier cycle
    later = pending("7", eligible_time=int(NOW) + LEASE + 10, submit_time=int(NOW) - 5)
    first = state([later])
    observed = check([first, replace(first, read_at=NOW + 8), replace(first, read_at=NOW + 9)])
    assert all(o.skipped["7"].startswith("waits for its begin time") for o in observed[:2])
    assert [p.job.id for p in observed[2].pending] == ["7"]
    # submitted after the read, with a begin just past its submission: due at once (the usual lease)
    during = pending("8", eligible_time=int(NOW) + LEASE + 40, submit_time=int(NOW) + 40)
    assert [p.job.id for o in check([state([during]), state([during])]) for p in o.pending] == ["8", "8"]


def test_equal_eligible_node_keys_share_one_token_until_the_context_changes():
    known = TranslationCache()
    known.begin("one")
    a, b = known.token(("gpu", 4, 1000)), known.token(("gpu", 8, 1000))
    assert a != b and known.token(("gpu", 4, 1000)) == a
    known.begin("one")
    assert known.token(("gpu", 8, 1000)) == b  # a new cycle keeps them
    known.begin("two")
    assert known.token(("gpu", 8, 1000)) == 0  # a new context starts afresh


def test_a_node_keeps_its_engine_node_while_its_layout_and_availability_stay():
    # The policy holds the Nodes it was built with: same_nodes compares those by identity first.
    known = TranslationCache()

    def read(*changed: SlurmNode) -> Observation:
        nodes = {n.name: n for n in [node(f"n{i}") for i in range(1, 5)] + list(changed)}
        return Translator(state([], nodes=list(nodes.values())), lease=LEASE, known=known).observe()

    first = read()
    policy = make_policy("best-fit", first.nodes)
    busy = read(node("n1", cpus_alloc=4))  # another read of n1 (CPUs in use): the same engine node
    assert all(map(operator.is_, busy.nodes, first.nodes)) and same_nodes(policy, busy)
    drained = read(replace(node("n2"), state="down"))
    assert [a is b for a, b in zip(drained.nodes, first.nodes)] == [True, False, True, True]
    assert not drained.nodes[1].available and same_nodes(policy, drained)
    assert not same_nodes(policy, read(replace(node("n3"), gpus=4)))
    assert not same_nodes(policy, read(replace(node("n3"), gpu_type="a100")))


def _job_pool(rng) -> list[SlurmJob]:
    """Jobs of every kind the translation tells apart: running (array tasks too), plain pending ones, pins
    that claim CPUs, array records under a throttle, held, begin times, dependencies, reservations, non-GPU."""
    names = [f"n{i}" for i in range(1, 5)]
    pool = []
    for k in range(40):
        job_id, kind = str(100 + k), rng.randrange(9)
        if kind == 0:
            node_name = rng.choice(names)
            array = rng.choice(["", "90"])
            pool.append(SlurmJob(f"90_{k}" if array else job_id, "bob", "RUNNING", "gpu", nodes=(node_name,),
                                 gpus_alloc={node_name: 2}, gpus_per_node=2, cpus=rng.choice([1, 8]),
                                 start_time=int(NOW) - 100, array_job=array))
        elif kind == 1:
            pool.append(pending("90_[0-5]", array_job="90", array_pending="0-5", array_throttle=rng.choice([0, 2, 3]),
                                reason=rng.choice(["JobArrayTaskLimit", "BeginTime"]), priority=rng.randrange(5)))
        elif kind == 2:
            pool.append(pending(job_id, required_nodes=tuple(rng.sample(names, 1)), cpus=rng.choice([4, 30]),
                                held=rng.random() < 0.2))
        elif kind == 3:
            pool.append(pending(job_id, eligible_time=int(NOW) + LEASE + rng.randrange(0, 20),
                                submit_time=int(NOW) - 5))
        elif kind == 4:
            pool.append(pending(job_id, reason=rng.choice(["Dependency", "Resources", "QOSMaxGRESPerUser"]),
                                held=rng.random() < 0.3, reservation=rng.choice(["", "maint"])))
        elif kind == 5:
            pool.append(SlurmJob(job_id, "carol", "PENDING", "gpu", comment="compass"))  # not a GPU job
        else:
            pool.append(pending(job_id, priority=rng.randrange(4), gpus_per_node=rng.choice([1, 2, 8, 9]),
                                cpus=rng.choice([1, 16]), excluded_nodes=tuple(rng.sample(names, rng.randrange(2))),
                                comment=rng.choice(["compass", "compass:migratable", ""])))
    return pool


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32))
def test_a_kept_translation_equals_a_fresh_one_over_changing_states(seed):
    # States as the parsers hand them over: most job objects kept by identity, some gone, some new (an
    # equal copy is a new object), now and then a job twice; nodes whose CPUs fill up or that leave service;
    # reads whose time passes begin times (or goes back before them).
    rng = random.Random(seed)
    pool = _job_pool(rng)
    jobs, states = rng.sample(pool, 12), []
    for step in range(8):
        nodes = [SlurmNode(f"n{i}", rng.choice(["idle", "idle", "idle", "down"]), frozenset(), ("gpu",), 8, 0, None,
                           32, rng.choice([0, 0, 8, 30]), 256000, 0) for i in range(1, 5)]
        states.append(state(jobs, nodes, read_at=NOW + rng.choice([3 * step, rng.randrange(25)])))  # now and then back
        jobs = [j for j in jobs if rng.random() > 0.2] + rng.sample(pool, rng.randrange(4))
        jobs = [replace(j) if rng.random() < 0.1 else j for j in jobs]
        # a priority recalculation: new objects at new priorities (the parsers' with_priority)
        jobs = [j.with_priority(j.priority + rng.randrange(-2, 3)) if rng.random() < 0.3 else j for j in jobs]
        rng.shuffle(jobs)
    check(states)
