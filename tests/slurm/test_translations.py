"""Translations kept between cycles: a cycle that reuses them observes exactly what a fresh translation does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState
from compass_slurm.slurm.translate import Observation, Translations, Translator

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
    """Observe ``states`` in turn with one Translations; each must equal a fresh translation."""
    known, out = Translations(), []
    for s in states:
        kept = Translator(s, lease=LEASE, known=known, **kw).observe()
        assert facts(kept) == facts(Translator(s, lease=LEASE, **kw).observe())
        out.append(kept)
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


@pytest.mark.parametrize("change", [{"migratable": "never"}, {"partitions": ["other"]}])
def test_a_changed_config_starts_afresh(change):
    jobs = [pending("1", comment="compass:migratable"), pending("2")]
    known = Translations()
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
    known = Translations()
    known.begin("one")
    a, b = known.token(("gpu", 4, 1000)), known.token(("gpu", 8, 1000))
    assert a != b and known.token(("gpu", 4, 1000)) == a
    known.begin("one")
    assert known.token(("gpu", 8, 1000)) == b  # a new cycle keeps them
    known.begin("two")
    assert known.token(("gpu", 8, 1000)) == 0  # a new context starts afresh
