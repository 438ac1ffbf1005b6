"""Node groups (one capacity, one GPU type): ABS, migrations and the bound per group (docs/concepts.md)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compass_slurm.engine.cluster import ClusterState
from compass_slurm.engine.fragmentation import measure
from compass_slurm.engine.model import Job, Node
from compass_slurm.engine.policies.base import make_policy, policy_names
from compass_slurm.engine.scheduler import Scheduler

SIZES = [1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8]
TYPES = ["a100", "h100", "l40"]


def test_groups_are_one_capacity_and_one_gpu_type_ordered_by_capacity_then_type():
    c = ClusterState([Node("h0", 8, gpu_type="h100"), Node("a0", 8, gpu_type="a100"), Node("u0", 4),
                      Node("h1", 8, gpu_type="h100"), Node("s0", 4, gpu_type="a100")])
    assert [(g.capacity, g.gpu_type, g.members) for g in c.groups] == [
        (4, None, (2,)), (4, "a100", (4,)), (8, "a100", (1,)), (8, "h100", (0, 3))]
    assert c.group_of == [3, 2, 0, 3, 1]
    assert Node("x", 8).gpu_type is None  # every constructor without a type still works


def test_measure_reports_every_group_and_their_sum():
    policy = make_policy("compass", [Node("a0", 8, gpu_type="a100"), Node("a1", 8, gpu_type="a100"),
                                     Node("h0", 4, gpu_type="h100")])
    policy.place(Job("x", 1, 3), {"a0", "a1"})
    policy.place(Job("y", 1, 2), {"h0"})
    frag = measure(policy.cluster)
    assert [(g.gpu_type, g.capacity, g.nodes, g.gpus_used, g.partial, g.phi_star, g.wcc) for g in frag.groups] == [
        ("h100", 4, 1, 2, 1, 1, True), ("a100", 8, 2, 3, 1, 1, False)]
    assert (frag.partial, frag.phi_star, frag.wcc) == (2, 2, False)
    assert frag.sif_bound == 2 * 2 / 3  # two per group
    assert frag.groups[1].as_dict()["gpus_free"] == 13


def _pool_pair(types: tuple[str | None, str | None]):
    """Two 8-GPU nodes of the given types, each a partial pool node: one group would merge them."""
    policy = make_policy("compass", [Node("n0", 8, gpu_type=types[0]), Node("n1", 8, gpu_type=types[1])])
    for k, node in enumerate(["n0", "n0", "n1"]):
        policy.adopt(Job(f"p{k}", 1, 1), [node])  # not confined by an eligible set
    return policy


def test_the_pool_drain_stays_within_a_group():
    merged = _pool_pair(("a100", "a100"))
    assert [(m.src, m.dst) for m in merged.compact().moves] == [("n1", "n0")]
    apart = _pool_pair(("a100", "h100"))
    assert apart.compact().moves == ()
    apart.check()


def test_a_new_slot_pulls_fillers_from_its_own_group_only():
    policy = make_policy("compass", [Node("a0", 8, gpu_type="a100"), Node("h0", 8, gpu_type="h100")])
    policy.adopt(Job("one", 1, 1), ["h0"])
    decision = policy.place(Job("three", 1, 3), {"a0"})
    assert decision.migrations == ()  # the 1-GPU job on h0 is no filler for a0's slot
    assert policy.abs.slots[0][0].vacancy == 1


def test_slot_passes_and_repair_work_per_group():
    # {4, 2} and {4} on two a100 nodes merge by repair; the same shapes across two types stay.
    for types, moved in [(("a100", "a100"), True), (("a100", "h100"), False)]:
        policy = make_policy("compass", [Node("n0", 8, gpu_type=types[0]), Node("n1", 8, gpu_type=types[1])])
        for job, gpus, node in [("a", 4, "n0"), ("b", 2, "n0"), ("c", 4, "n1")]:
            policy.adopt(Job(job, 1, gpus), [node])
        assert bool(policy.compact().moves) is moved
        policy.check()


def test_a_job_confined_to_part_of_a_group_is_never_moved_outside_its_eligible_nodes():
    # q may use n0 only (n1 lacks a feature it asked for): the pool drain may not bring it to n1.
    policy = make_policy("compass", [Node("n0", 8), Node("n1", 8)])
    policy.adopt(Job("p0", 1, 1), ["n1"])
    policy.adopt(Job("p1", 1, 1), ["n1"])
    policy.place(Job("q", 1, 1), {"n0"})
    assert policy.compact().moves == ()
    # an unconfined job in q's place moves to the fuller pool node
    policy.remove("q")
    policy.adopt(Job("r", 1, 1), ["n0"])
    assert [(m.job, m.src, m.dst) for m in policy.compact().moves] == [("r", "n0", "n1")]
    policy.check()


def test_an_adopted_job_is_confined_to_the_eligible_nodes_it_was_adopted_with():
    """A daemon restarted, or Slurm starting a job elsewhere, adopts running jobs: their eligible nodes still hold."""
    policy = make_policy("compass", [Node("n0", 8), Node("n1", 8)])
    policy.adopt(Job("p0", 1, 1), ["n1"])
    policy.adopt(Job("p1", 1, 1), ["n1"])
    policy.adopt(Job("q", 1, 1), ["n0"], {"n0"})
    assert policy.compact().moves == ()
    # an eligible set that holds the whole group confines nothing
    policy.remove("q")
    policy.adopt(Job("r", 1, 1), ["n0"], {"n0", "n1"})
    assert [(m.job, m.src, m.dst) for m in policy.compact().moves] == [("r", "n0", "n1")]
    policy.check()


def test_a_running_job_moves_within_its_eligible_nodes_as_they_are_now():
    """An admin takes a feature off n1 while q runs on n0: q may no longer move there; given back, it may again."""
    policy = make_policy("compass", [Node("n0", 8), Node("n1", 8)])
    policy.adopt(Job("p0", 1, 1), ["n1"])
    policy.adopt(Job("p1", 1, 1), ["n1"])
    policy.adopt(Job("q", 1, 1), ["n0"])
    policy.confine("q", frozenset({"n0"}))
    assert policy.compact().moves == ()
    policy.confine("q", None)
    assert [(m.job, m.src, m.dst) for m in policy.compact().moves] == [("q", "n0", "n1")]
    policy.check()


# -- the bound per group, over random event streams on random mixed clusters ------------------------


@st.composite
def mixed_clusters(draw):
    """Nodes of random groups: capacity 4 or 8, two or three GPU types, one to four nodes each."""
    types = TYPES[: draw(st.integers(2, 3))]
    groups = draw(st.lists(st.tuples(st.sampled_from([4, 8]), st.sampled_from(types), st.integers(1, 4)),
                           min_size=2, max_size=4, unique_by=lambda g: g[:2]))
    nodes = [Node(f"{kind}-{cap}-{k}", cap, gpu_type=kind) for cap, kind, count in groups for k in range(count)]
    return nodes


@st.composite
def typed_streams(draw, nodes: list[Node]):
    """('arrive', Job, GPU type or None) / ('depart', index of an earlier arrival) events."""
    largest = max(n.gpus for n in nodes)
    events = []
    arrived = 0
    for n in range(draw(st.integers(1, 50))):
        if arrived and draw(st.integers(0, 2)) == 0:
            events.append(("depart", draw(st.integers(0, arrived - 1)), None))
            continue
        gpus = min(draw(st.sampled_from(SIZES)), largest)
        instances = draw(st.integers(1, 3)) if gpus in (1, 4, 8) else 1
        fits = sorted({node.gpu_type for node in nodes if node.gpus >= gpus})
        kind = draw(st.sampled_from([None, *fits]))
        events.append(("arrive", Job(f"j{n}", instances, gpus), kind))
        arrived += 1
    return events


def _run_typed(name: str, nodes: list[Node], events, budget: int | None = None):
    """Drive a Scheduler(policy) through ``events``; after each: check(), jobs on their type, none lost."""
    scheduler = Scheduler(make_policy(name, nodes))
    policy = scheduler.policy
    of_type = {kind: frozenset(n.name for n in nodes if n.gpu_type == kind) for kind in TYPES}
    arrivals: list[tuple[Job, str | None]] = []
    departed: set[str] = set()
    for kind, what, gpu_type in events:
        if kind == "arrive":
            arrivals.append((what, gpu_type))
            scheduler.arrive(what, eligible=None if gpu_type is None else of_type[gpu_type], budget=budget)
        else:
            job = arrivals[what][0]
            if job.id in departed:
                continue
            departed.add(job.id)
            scheduler.depart(job.id, budget=budget)
        policy.check()
        c = policy.cluster
        for job, gpu_type in arrivals:
            if job.id in c.jobs and gpu_type is not None:  # a typed job never leaves its type, moved or not
                assert all(c.nodes[c.location[(job.id, k)]].gpu_type == gpu_type for k in range(job.instances))
            assert sum([job.id in c.jobs, job.id in scheduler.queue, job.id in departed]) == 1
        yield policy


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compass_keeps_the_bound_in_every_group_whose_wcc_holds(data):
    nodes = data.draw(mixed_clusters())
    for policy in _run_typed("compass", nodes, data.draw(typed_streams(nodes))):
        frag = measure(policy.cluster)
        for group in frag.groups:
            if group.wcc:
                assert group.partial - group.phi_star <= 2, f"{group} past its bound under its WCC"
                assert group.sif <= group.sif_bound + 1e-12
        if frag.wcc:
            assert frag.within_bound and frag.sif <= frag.sif_bound + 1e-12


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(policy_names()), st.sampled_from([None, 0, 2]))
def test_every_policy_keeps_typed_jobs_on_their_type_on_mixed_clusters(data, name, budget):
    nodes = data.draw(mixed_clusters())
    for _ in _run_typed(name, nodes, data.draw(typed_streams(nodes)), budget):
        pass


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compass_easy_keeps_each_groups_bound_while_a_job_waits_and_all_is_in_abs(data):
    """compass-easy's claim per group: while it compacts (a job waits) and nothing sits outside ABS."""
    nodes = data.draw(mixed_clusters())
    for policy in _run_typed("compass-easy", nodes, data.draw(typed_streams(nodes))):
        a = policy.abs
        if policy.wanted is None or a.foreign or a.orphaned:
            continue
        for group in measure(policy.cluster).groups:
            if group.wcc:
                assert group.partial - group.phi_star <= 2, f"{group} past its bound under its WCC"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(["compass", "compass-wc", "compass-easy"]))
def test_jobs_eligible_on_part_of_a_group_never_run_outside_their_nodes(data, name):
    """Eligible sets that cut across groups (a feature constraint): placed or moved, a job stays on them."""
    nodes = data.draw(mixed_clusters())
    scheduler = Scheduler(make_policy(name, nodes))
    policy = scheduler.policy
    eligible: dict[str, frozenset[str] | None] = {}
    arrived: list[str] = []
    for n in range(data.draw(st.integers(1, 40))):
        if arrived and data.draw(st.integers(0, 2)) == 0:
            job_id = arrived.pop(data.draw(st.integers(0, len(arrived) - 1)))
            if job_id in policy.cluster.jobs:
                scheduler.depart(job_id)
            else:
                scheduler.withdraw(job_id)
        else:
            gpus = data.draw(st.sampled_from([1, 1, 1, 2, 3, 4]))
            fits = [node.name for node in nodes if node.gpus >= gpus]
            some = data.draw(st.one_of(st.none(), st.sets(st.sampled_from(fits), min_size=1)))
            job = Job(f"j{n}", data.draw(st.integers(1, 2)) if gpus == 1 else 1, gpus)
            eligible[job.id] = None if some is None else frozenset(some)
            arrived.append(job.id)
            scheduler.arrive(job, eligible=eligible[job.id])
        policy.check()
        c = policy.cluster
        for job_id, job in c.jobs.items():
            allowed = eligible[job_id]
            if allowed is not None:
                where = {c.nodes[c.location[(job_id, k)]].name for k in range(job.instances)}
                assert where <= allowed, f"{job_id} on {where - allowed}, outside its eligible nodes"
