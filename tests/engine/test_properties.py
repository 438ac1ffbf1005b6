"""Property tests: random event streams through every policy, invariants after every event."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compass_slurm.engine.fragmentation import measure, wcc_holds
from compass_slurm.engine.model import Job, Node
from compass_slurm.engine.policies.base import make_policy, policy_names
from compass_slurm.engine.scheduler import Scheduler

SIZES = [1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8]


@st.composite
def streams(draw, *, pinned: bool = False, distinct: bool = False, sizes=SIZES, capacity: int = 8):
    """A list of ('arrive', Job) / ('depart', index of an earlier arrival) events."""
    events = []
    arrived = 0
    for n in range(draw(st.integers(1, 60))):
        if arrived and draw(st.integers(0, 2)) == 0:
            events.append(("depart", draw(st.integers(0, arrived - 1))))
            continue
        gpus = min(draw(st.sampled_from(sizes)), capacity)
        instances = draw(st.integers(1, 3)) if gpus in (1, capacity) or distinct else 1
        job = Job(
            f"j{n}",
            instances,
            gpus,
            migratable=not (pinned and draw(st.booleans())),
            distinct_nodes=distinct and instances > 1 and draw(st.booleans()),
        )
        events.append(("arrive", job))
        arrived += 1
    return events


def run(policy_name: str, nodes: list[Node], events, check_each=None, budget: int | None = None):
    scheduler = Scheduler(make_policy(policy_name, nodes))
    policy = scheduler.policy
    arrivals: list[Job] = []
    departed: set[str] = set()
    for kind, what in events:
        if kind == "arrive":
            arrivals.append(what)
            step = scheduler.arrive(what, budget=budget)
        else:
            job = arrivals[what]
            if job.id in departed:
                continue
            departed.add(job.id)
            step = scheduler.depart(job.id, budget=budget)
        if budget is not None:
            assert len(step.migrations) <= step.spent <= budget
        c = policy.cluster
        # capacity and gang placement
        assert all(0 <= u <= cap for u, cap in zip(c.used, c.capacity))
        for job_id, job in c.jobs.items():
            where = [c.location[(job_id, k)] for k in range(job.instances)]
            if job.distinct_nodes:
                assert len(set(where)) == job.instances, f"{job_id} shares a node"
        # nothing lost: every arrival is running, queued or departed, exactly once
        for job in arrivals:
            states = [job.id in c.jobs, job.id in scheduler.queue, job.id in departed]
            assert sum(states) == 1, f"{job.id} lost or duplicated"
        policy.check()
        if check_each:
            check_each(policy)
    return policy


def assert_bound(policy) -> None:
    frag = measure(policy.cluster)
    counts = policy.cluster.demand[8]
    if wcc_holds(counts, 8):
        assert frag.partial <= 2, f"{frag.partial} partial nodes under WCC"
        assert frag.sif <= frag.sif_bound + 1e-12


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(2, 8))
def test_compass_keeps_the_bound_under_wcc(events, n):
    run("compass", [Node(f"n{i}", 8) for i in range(n)], events, assert_bound)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(pinned=True, distinct=True), st.integers(2, 8), st.sampled_from(policy_names()))
def test_every_policy_keeps_capacity_gangs_and_jobs(events, n, name):
    run(name, [Node(f"n{i}", 8) for i in range(n)], events)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(capacity=4), st.integers(2, 6))
def test_compass_on_four_gpu_nodes(events, n):
    def bound4(policy):
        frag = measure(policy.cluster)
        if wcc_holds(policy.cluster.demand[4], 4):
            assert frag.partial <= 2

    run("compass", [Node(f"n{i}", 4) for i in range(n)], events, bound4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(pinned=True), st.integers(2, 6), st.integers(0, 4), st.sampled_from(["compass", "compass-easy"]))
def test_compass_with_pinned_jobs_and_a_budget_stays_consistent(events, n, budget, name):
    run(name, [Node(f"n{i}", 8) for i in range(n)], events, budget=budget)


def _state(policy) -> tuple:
    """Everything a query could disturb: placements, free-GPU indexes and, for ABS policies, the structure."""
    c = policy.cluster
    abs_state = getattr(policy, "abs", None)
    structure = () if abs_state is None else (
        [[(s.width, s.anchor, tuple(s.fillers)) for s in slots] for slots in abs_state.slots],
        [tuple(o) for o in abs_state.ones], [tuple(e) for e in abs_state.extras], abs_state.vacancy_total,
    )
    return dict(c.location), list(c.used), [c.free.key(i) for i in range(len(c))], structure


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(pinned=True, distinct=True), st.integers(2, 6), st.sampled_from(policy_names()))
def test_queries_are_pure(events, n, name):
    def ask(policy):
        before = _state(policy)
        for g in range(1, 9):
            policy.anchor(g)
            policy.candidates(Job("q", 2, g))
        policy.view()
        policy.abs_violations()
        measure(policy.cluster)
        assert _state(policy) == before

    run(name, [Node(f"n{i}", 8) for i in range(n)], events, ask)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(2, 8))
def test_compass_easy_keeps_the_bound_while_a_job_waits_and_all_is_in_abs(events, n):
    """The claim of compass-easy: while it compacts (a job waits) and nothing sits outside ABS, Theorem 1."""

    def bound_when_claimed(policy):
        a = policy.abs
        if policy.wanted is not None and not a.foreign and not a.orphaned:
            assert_bound(policy)

    run("compass-easy", [Node(f"n{i}", 8) for i in range(n)], events, bound_when_claimed)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(distinct=True), st.integers(2, 6), st.sampled_from(["fifo", "backfill"]))
def test_compass_easy_places_jobs_that_may_not_move_as_best_fit_does(events, n, queue):
    """Issue 32: ABS keeps room for moves that a pinned job never makes, so compass-easy places such a job where
    best fit would; with no job movable the two make the very same decisions, event by event."""
    pinned = [(kind, replace(what, migratable=False) if kind == "arrive" else what) for kind, what in events]
    decided = {}
    for name in ("compass-easy", "best-fit"):
        scheduler = Scheduler(make_policy(name, [Node(f"n{i}", 8) for i in range(n)]), queue)
        arrivals: list[Job] = []
        steps = []
        for t, (kind, what) in enumerate(pinned):
            if kind == "arrive":
                arrivals.append(what)
                step = scheduler.arrive(what, now=float(t), limit=float(10 + t % 7))
            elif arrivals[what].id in scheduler.running or arrivals[what].id in scheduler.queue:
                step = scheduler.depart(arrivals[what].id, now=float(t))
            else:
                continue
            assert not step.migrations
            steps.append([(d.job, d.nodes) for d in step.decisions])
        decided[name] = steps
    assert decided["compass-easy"] == decided["best-fit"]
