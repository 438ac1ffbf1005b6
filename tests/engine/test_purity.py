"""The policy contract: queries are pure, for every registered policy.

``anchor``, ``candidates``, a GreedyPolicy's ``choose`` and the views must leave the
state exactly as they found it. ``view()`` must not change, and since a policy may
keep structure that ``view()`` does not show (buddy cells, ABS slots), a twin that
is never asked anything must make the same decisions and migrations afterwards.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import streams

from compass_slurm.engine.fragmentation import measure
from compass_slurm.engine.model import Job, Node
from compass_slurm.engine.policies.base import GreedyPolicy, Policy, make_policy, policy_names
from compass_slurm.engine.scheduler import Scheduler

BUILTIN = ("compass", "compass-literal", "compass-wc", "best-fit", "first-fit", "worst-fit", "slurm-default",
           "fgd", "buddy")
#: every registered policy (the built-in ones are all registered by then; tests register theirs later)
POLICIES = tuple(policy_names())

#: (instances, GPUs per instance, distinct nodes, eligible node indexes or None)
probes = st.lists(
    st.tuples(st.integers(1, 3), st.integers(1, 8), st.booleans(),
              st.none() | st.sets(st.integers(0, 7), min_size=1, max_size=4)),
    min_size=1, max_size=4,
)


def ask_everything(policy: Policy, asked: list[tuple[int, int, bool, set[int] | None]]) -> None:
    c = policy.cluster
    names = [n.name for n in c.nodes]
    for gpus in range(1, c.max_gpus + 1):
        policy.anchor(gpus)
        if isinstance(policy, GreedyPolicy):
            policy.choose(gpus, set(), None, False)
            policy.choose(gpus, {0}, None, True)
            policy.choose(gpus, set(), frozenset({0, len(c) - 1}), False)
    for k, (instances, gpus, distinct, eligible) in enumerate(asked):
        job = Job(f"probe{k}", instances, min(gpus, c.max_gpus), distinct_nodes=distinct and instances > 1)
        policy.candidates(job, None if eligible is None else [names[i % len(names)] for i in eligible])
    policy.abs_violations()
    policy.orphans()
    measure(c)
    policy.check()
    for i in range(len(c)):
        policy.role(i)


def test_every_builtin_policy_is_registered():
    assert set(BUILTIN) <= set(policy_names())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(pinned=True, distinct=True), st.integers(2, 8), st.sampled_from(POLICIES), probes,
       st.sampled_from([None, 0, 2]))
def test_queries_change_nothing(events, n, name, asked, budget):
    nodes = [Node(f"n{i}", 8) for i in range(n)]
    quiet = Scheduler(make_policy(name, nodes))
    curious = Scheduler(make_policy(name, nodes))
    arrivals: list[Job] = []
    for kind, what in events:
        steps = []
        for scheduler in (quiet, curious):
            if kind == "arrive":
                steps.append(scheduler.arrive(what, budget=budget))
            elif arrivals[what].id in scheduler.running or arrivals[what].id in scheduler.queue:
                steps.append(scheduler.depart(arrivals[what].id, budget=budget))
        if kind == "arrive":
            arrivals.append(what)
        assert steps[:1] == steps[1:], "a query changed a later decision"
        before = curious.policy.view()
        ask_everything(curious.policy, asked)
        assert curious.policy.view() == before, "a query changed view()"
        assert curious.policy.view() == quiet.policy.view()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([p for p in POLICIES if p != "fgd"]), st.lists(st.sampled_from([1, 2, 3, 4, 8]), max_size=12))
def test_anchor_names_where_the_next_single_instance_goes(name, sizes):
    # Not fgd: an arrival joins its target mix before it is placed, so the anchor is one arrival behind.
    policy = make_policy(name, [Node(f"n{i}", 8) for i in range(4)])
    for k, gpus in enumerate(sizes):
        expected = policy.anchor(gpus)
        decision = policy.place(Job(f"j{k}", 1, gpus))
        assert (decision.nodes[0] if decision else None) == expected
        policy.compact()
