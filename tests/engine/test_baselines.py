"""Baseline placement policies: exact choices on hand-computed clusters, and invariants over random streams."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compass_slurm.engine.model import EngineError, Job, Node
from compass_slurm.engine.policies.base import Policy, make_policy, policy_names
from compass_slurm.engine.policies.buddy import Buddy
from compass_slurm.engine.scheduler import Scheduler

BASELINES = ("first-fit", "best-fit", "best-fit-rotate", "worst-fit", "slurm-default", "fgd", "buddy")
#: FGD with a frozen default mix (uniform over 1, 2, 4, 8), so hand-computed scores stay valid.
CONFIG: dict[str, dict[str, object]] = {"fgd": {"window": 0}}


def cluster(*caps: int) -> list[Node]:
    return [Node(f"n{i}", g) for i, g in enumerate(caps)]


def policy(name: str, *caps: int, **config: object) -> Policy:
    return make_policy(name, cluster(*caps), **(CONFIG.get(name, {}) | config))


def place(p: Policy, job_id: str, instances: int, gpus: int, eligible=None, distinct: bool = False):
    decision = p.place(Job(job_id, instances, gpus, distinct_nodes=distinct), eligible)
    return None if decision is None else decision.nodes


def used(p: Policy) -> dict[str, int]:
    return {v.name: v.used for v in p.view()}


def test_every_baseline_is_registered():
    assert set(BASELINES) <= set(policy_names())


# -- exact choices on one hand-computed state ---------------------------------------------------

# Four 8-GPU nodes holding, as adopted allocations: n0 a 4 and a 2 (free 2), n1 a 3 (free 5),
# n2 nothing (free 8), n3 a 4, a 2 and a 1 (free 1). Buddy cells: n0 has a free 2-cell,
# n1 a free 4-cell (its 3-GPU instance holds a 4-cell), n2 an 8-cell, n3 a 1-cell.
# FGD with weights 1 on sizes 1, 2, 4, 8: F(free) = 0 3 4 6 4 5 6 7 0 for free = 0..8.
STATE = {"a": ("n0", 4), "b": ("n0", 2), "c": ("n1", 3), "d": ("n3", 4), "e": ("n3", 2), "f": ("n3", 1)}

EXPECTED = {
    # policy:          1 GPU  2 GPUs 3 GPUs 5 GPUs
    "first-fit": ("n0", "n0", "n1", "n1"),
    "best-fit": ("n3", "n0", "n1", "n1"),
    # no placement yet, so its ties start at n0: best-fit's choices
    "best-fit-rotate": ("n3", "n0", "n1", "n1"),
    "worst-fit": ("n2", "n2", "n2", "n2"),
    "slurm-default": ("n0", "n0", "n1", "n1"),
    # 1 GPU: n0 4->3 (-1), n1 5->4 (-1), n2 0->7 (+7), n3 3->0 (-3). 2 GPUs: n0 -4, n1 +1, n2 +6.
    # 3 GPUs: n1 5->4 (-1), n2 0->5 (+5). 5 GPUs: n1 5->0 (-5), n2 0->6 (+6).
    "fgd": ("n3", "n0", "n1", "n1"),
    # Exact cell first: 1 -> n3's 1-cell, 2 -> n0's 2-cell, 3 -> n1's 4-cell; 5 needs an 8-cell.
    "buddy": ("n3", "n0", "n1", "n2"),
}


def prepared(name: str) -> Policy:
    p = policy(name, 8, 8, 8, 8)
    for job_id, (node, gpus) in STATE.items():
        p.adopt(Job(job_id, 1, gpus), [node])
    return p


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("column,gpus", [(0, 1), (1, 2), (2, 3), (3, 5)])
def test_exact_choice_on_hand_computed_state(name, column, gpus):
    p = prepared(name)
    assert place(p, "new", 1, gpus) == (EXPECTED[name][column],)


def test_best_fit_rotate_breaks_ties_from_the_node_after_its_last_placement():
    # free 4, 8, 4, 8: the 8-GPU job takes n1 (both), then the 4-GPU jobs tie between n0 and n2
    rotate, best = (policy(name, 8, 8, 8, 8) for name in ("best-fit-rotate", "best-fit"))
    for p in (rotate, best):
        p.adopt(Job("a", 1, 4), ["n0"])
        p.adopt(Job("b", 1, 4), ["n2"])
        assert place(p, "whole", 1, 8) == ("n1",)
    assert place(best, "x", 1, 4) == ("n0",)
    assert place(rotate, "x", 1, 4) == ("n2",)
    # the fullest node still wins over the turn: n3 is empty, n0 has 4 free
    assert place(rotate, "y", 1, 2) == ("n0",)


def test_best_fit_rotate_keeps_its_turn_when_a_gang_does_not_fit():
    # free 4, 4, 8, 4: the gang's first instance takes n2, its second finds no node; had the turn followed
    # that claim, the next tie among n0, n1 and n3 would go to n3
    p = policy("best-fit-rotate", 8, 8, 8, 8)
    for job_id, node in (("a", "n0"), ("b", "n1"), ("c", "n3")):
        p.adopt(Job(job_id, 1, 4), [node])
    assert place(p, "big", 2, 8) is None
    assert place(p, "x", 1, 4) == ("n0",)


def test_fgd_fragmentation_scores_are_exact():
    p = prepared("fgd")
    assert p.mix() == {1: 0.25, 2: 0.25, 4: 0.25, 8: 0.25}
    assert [p.fragmentation(n) for n in ("n0", "n1", "n2", "n3")] == [1.0, 1.25, 0.0, 0.75]
    place(p, "new", 1, 1)  # lands on n3, which becomes full
    assert p.fragmentation("n3") == 0.0


def test_buddy_cells_of_the_hand_computed_state():
    p = prepared("buddy")
    assert [p.free_cells(n) for n in ("n0", "n1", "n2", "n3")] == [[2], [4], [8], [1]]
    assert {v.name: v.role for v in p.view()} == {"n0": "used", "n1": "used", "n2": "empty", "n3": "used"}


# -- slurm-default ------------------------------------------------------------------------------


def slurm_state() -> Policy:
    """Six 8-GPU nodes; n1 holds 1 GPU, n3 is full: whole free nodes are n0, n2, n4, n5."""
    p = policy("slurm-default", 8, 8, 8, 8, 8, 8)
    p.adopt(Job("x", 1, 1), ["n1"])
    p.adopt(Job("y", 1, 8), ["n3"])
    return p


def test_slurm_default_takes_the_lowest_consecutive_run_where_first_fit_does_not():
    assert place(slurm_state(), "j", 2, 8) == ("n4", "n5")
    ff = policy("first-fit", 8, 8, 8, 8, 8, 8)
    ff.adopt(Job("x", 1, 1), ["n1"])
    ff.adopt(Job("y", 1, 8), ["n3"])
    assert place(ff, "j", 2, 8) == ("n0", "n2")


def test_slurm_default_falls_back_to_lowest_nodes_across_runs():
    assert place(slurm_state(), "j", 3, 8) == ("n0", "n2", "n4")


def test_slurm_default_stacks_instances_unless_distinct():
    assert place(slurm_state(), "j", 2, 4) == ("n0", "n0")
    assert place(slurm_state(), "k", 3, 4, distinct=True) == ("n0", "n1", "n2")


def test_slurm_default_runs_follow_node_indexes_inside_a_partition():
    assert place(slurm_state(), "j", 2, 8, eligible={"n0", "n2", "n4", "n5"}) == ("n4", "n5")
    assert place(slurm_state(), "k", 2, 8, eligible={"n0", "n2"}) == ("n0", "n2")


# -- FGD ----------------------------------------------------------------------------------------


def test_fgd_learns_the_mix_of_recent_arrivals_once_per_job():
    p = make_policy("fgd", cluster(8), window=2)
    assert place(p, "a", 1, 8) == ("n0",)
    assert p.mix() == {8: 1.0}
    assert place(p, "b", 1, 8) is None  # observed although it does not fit
    assert place(p, "b", 1, 8) is None  # a retry is not a new arrival
    assert place(p, "c", 2, 1) is None  # window now holds b and c; a has left it
    assert p.mix() == pytest.approx({1: 2 / 3, 8: 1 / 3})
    assert place(p, "c", 2, 1) is None
    assert p.mix() == pytest.approx({1: 2 / 3, 8: 1 / 3})


@pytest.mark.parametrize("eligible", [None, ["n0", "n1", "n2"]])
def test_fgd_equal_increases_go_to_the_lowest_index(eligible):
    # Uniform mix: 1 GPU from free 5, 2 or 7 raises F by -1 alike (5->4, 4->3, 7->6).
    p = policy("fgd", 8, 8, 8)
    for name, gpus in (("n0", 3), ("n1", 6), ("n2", 1)):
        p.adopt(Job(f"on-{name}", 1, gpus), [name])
    assert place(p, "j", 1, 1, eligible=eligible) == ("n0",)


def test_fgd_mix_drives_the_choice():
    # Free 3 (n0) and 8 (n1). Mostly 8-GPU work: a 2-GPU job should not break the empty node.
    p = make_policy("fgd", cluster(8, 8), window=0, mix={8: 3, "1": 1})
    p.adopt(Job("x", 1, 5), ["n0"])
    assert p.mix() == {1: 0.25, 8: 0.75}
    assert place(p, "j", 1, 2) == ("n0",)
    # All-2-GPU work: leaving 1 free GPU on n0 strands it, an empty node stays usable.
    q = make_policy("fgd", cluster(8, 8), window=0, mix={2: 1})
    q.adopt(Job("x", 1, 5), ["n0"])
    assert place(q, "j", 1, 2) == ("n1",)


@pytest.mark.parametrize(
    "config,fragment",
    [
        ({"window": -1}, "window"),
        ({"window": 1.5}, "window"),
        ({"mix": {9: 1}}, "mix size 9"),
        ({"mix": {1: -1}}, "negative"),
        ({"mix": {1: 0}}, "all be zero"),
        ({"mix": {"x": 1}}, "'x'"),
        ({"mix": {}}, "non-empty"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_fgd_rejects_bad_configuration(config, fragment):
    with pytest.raises(EngineError, match=fragment):
        make_policy("fgd", cluster(8), **config)


# -- buddy --------------------------------------------------------------------------------------


def test_buddy_splits_and_merges_cells():
    p = policy("buddy", 8)
    assert place(p, "one", 1, 1) == ("n0",)
    assert p.free_cells("n0") == [4, 2, 1]
    assert place(p, "three", 1, 3) == ("n0",)  # an exact 4-cell: the split one stays untouched
    assert p.free_cells("n0") == [2, 1]
    p.remove("one")
    assert p.free_cells("n0") == [4]
    p.remove("three")
    assert p.free_cells("n0") == [8]


def test_buddy_prefers_an_exact_cell_over_a_lower_index_split():
    p = policy("buddy", 8, 8)
    p.adopt(Job("x", 1, 4), ["n0"])  # n0: a free 4-cell
    p.adopt(Job("y", 1, 4), ["n1"])
    p.adopt(Job("z", 1, 2), ["n1"])  # n1: a free 2-cell
    assert p.free_cells("n0") == [4] and p.free_cells("n1") == [2]
    assert place(p, "j", 1, 2) == ("n1",)
    assert place(p, "k", 1, 2) == ("n0",)  # no exact cell left: split n0's 4-cell


def test_buddy_cell_rounding_costs_raw_gpus():
    p = policy("buddy", 8)
    assert place(p, "a", 1, 3) == ("n0",)
    assert place(p, "b", 1, 4) == ("n0",)
    assert used(p) == {"n0": 7}
    assert place(p, "c", 1, 1) is None  # one raw GPU is free but it lies in a's 4-cell


def test_buddy_adopts_foreign_instances_as_loose_and_frees_their_cells():
    p = policy("buddy", 8, 8)
    p.adopt(Job("two", 1, 2), ["n0"])
    p.adopt(Job("five", 1, 5), ["n0"])  # no 8-cell left on n0: loose, holds the 4- and 2-cells
    assert p.free_cells("n0") == []
    assert p.view()[0].role == "loose"
    assert p.abs_violations() == {"n0": "instances outside a buddy cell: five#0 (5 GPUs)"}
    p.remove("five")
    assert p.free_cells("n0") == [4, 2]
    assert p.view()[0].role == "used" and p.abs_violations() == {}
    p.remove("two")
    assert p.free_cells("n0") == [8]


def test_buddy_splits_a_non_power_of_two_node_into_binary_trees():
    p = policy("buddy", 6)
    assert p.free_cells("n0") == [4, 2]
    assert place(p, "five", 1, 5) is None  # would need an 8-cell
    assert place(p, "three", 1, 3) == ("n0",)
    assert place(p, "two", 1, 2) == ("n0",)
    assert p.free_cells("n0") == []
    p.remove("three")
    p.remove("two")
    assert p.free_cells("n0") == [4, 2]


def test_buddy_gives_back_the_cells_of_a_gang_that_did_not_fit():
    p = policy("buddy", 8, 8)
    assert place(p, "big", 3, 4, distinct=True) is None
    assert [p.free_cells(n) for n in ("n0", "n1")] == [[8], [8]]
    assert place(p, "fits", 4, 4) == ("n0", "n0", "n1", "n1")


# -- contracts shared by every baseline ---------------------------------------------------------


@pytest.mark.parametrize("name", BASELINES)
def test_inputs_are_not_mutated(name):
    nodes = cluster(8, 8, 4)
    before = list(nodes)
    p = make_policy(name, nodes, **CONFIG.get(name, {}))
    job = Job("j", 2, 4, distinct_nodes=True)
    eligible = {"n1", "n2"}
    decision = p.place(job, eligible)
    assert decision is not None and set(decision.nodes) == {"n1", "n2"}
    assert nodes == before
    assert job == Job("j", 2, 4, distinct_nodes=True)
    assert eligible == {"n1", "n2"}


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("instances,gpus,distinct", [(4, 4, False), (3, 4, True), (2, 8, False)])
def test_gang_is_all_or_nothing(name, instances, gpus, distinct):
    p = policy(name, 8, 8)
    p.adopt(Job("x", 1, 4), ["n0"])
    before = p.view()
    assert place(p, "j", instances, gpus, distinct=distinct) is None
    assert p.view() == before
    assert "j" not in p.cluster.jobs
    assert place(p, "k", 3, 4) is not None  # nothing leaked: the free space is still usable


@pytest.mark.parametrize("name", BASELINES)
def test_distinct_nodes_are_honoured(name):
    p = policy(name, 8, 8, 8)
    nodes = place(p, "j", 3, 2, distinct=True)
    assert nodes is not None and len(set(nodes)) == 3
    assert place(p, "k", 4, 1, distinct=True) is None


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("eligible", [None, {"n0", "n1", "n2"}])
def test_unavailable_nodes_are_never_chosen(name, eligible):
    p = policy(name, 8, 8, 8)
    p.set_available("n0", False)
    chosen = []
    for k in range(20):
        nodes = place(p, f"j{k}", 1, 2, eligible=eligible)
        if nodes is None:
            break
        chosen.extend(nodes)
    assert len(chosen) == 8 and "n0" not in chosen
    p.set_available("n0", True)
    assert place(p, "back", 1, 2, eligible=eligible) == ("n0",)


@pytest.mark.parametrize("name", BASELINES)
def test_partition_restriction_is_honoured(name):
    p = policy(name, 8, 8, 8, 8)
    for k in range(2):
        nodes = place(p, f"j{k}", 2, 4, eligible=["n1", "n3"])
        assert nodes is not None and set(nodes) <= {"n1", "n3"}
    assert place(p, "j4", 1, 1, eligible=["n1", "n3"]) is None
    assert used(p) == {"n0": 0, "n1": 8, "n2": 0, "n3": 8}


@pytest.mark.parametrize("name", BASELINES)
def test_remove_frees_exactly(name):
    p = policy(name, 8, 4, 8)
    place(p, "a", 2, 3)
    after_a = p.view()
    place(p, "b", 3, 2)
    assert p.view() != after_a
    assert p.remove("b") == ()
    assert p.view() == after_a
    p.remove("a")
    assert used(p) == {"n0": 0, "n1": 0, "n2": 0}
    with pytest.raises(EngineError, match="not running"):
        p.remove("a")


# Nodes n0 4, n1 8, n2 4, n3 8, all empty; then 1x4, 1x8, 1x2 in that order.
MIXED = {
    "first-fit": ("n0", "n1", "n2"),
    "best-fit": ("n0", "n1", "n2"),
    "best-fit-rotate": ("n0", "n1", "n2"),
    "worst-fit": ("n1", "n3", "n0"),
    "slurm-default": ("n0", "n1", "n2"),
    "fgd": ("n0", "n1", "n2"),  # 4: n0 F 4->0 (-4) vs n1 0->4; 2: n2 F 4->4 (0) vs n3 0->6
    "buddy": ("n0", "n1", "n2"),  # the 4-GPU root cells first; the 2 splits n2's 4-cell
}


@pytest.mark.parametrize("name", BASELINES)
def test_mixed_capacities(name):
    p = policy(name, 4, 8, 4, 8)
    got = tuple(place(p, job_id, 1, gpus)[0] for job_id, gpus in (("a", 4), ("b", 8), ("c", 2)))
    assert got == MIXED[name]
    assert place(p, "big", 1, 8) == (("n3",) if name != "worst-fit" else None)


# -- random streams through the scheduler -------------------------------------------------------

CAPS = st.lists(st.sampled_from([4, 8]), min_size=1, max_size=5)


@st.composite
def streams(draw):
    caps = draw(CAPS)
    names = [f"n{i}" for i in range(len(caps))]
    events = draw(
        st.lists(
            st.one_of(
                st.tuples(
                    st.just("arrive"),
                    st.integers(1, 3),
                    st.integers(1, max(caps)),
                    st.booleans(),
                    st.none() | st.sets(st.sampled_from(names), min_size=1),
                ),
                st.tuples(st.just("depart"), st.integers(0, 50)),
                st.tuples(st.just("avail"), st.sampled_from(names), st.booleans()),
            ),
            max_size=40,
        )
    )
    return caps, events


def check_state(p: Policy, sched: Scheduler, arrived: dict[str, Job], departed: set[str]) -> None:
    per_job: dict[str, list[tuple[str, int, int]]] = {}
    for v in p.view():
        assert v.used <= v.gpus, f"{v.name} over capacity"
        if isinstance(p, Buddy):  # a free cell must always be free raw GPUs
            assert sum(p.free_cells(v.name)) <= v.gpus - v.used
        for placed in v.instances:
            per_job.setdefault(placed.job, []).append((v.name, placed.instance, placed.gpus))
    assert set(per_job) == set(sched.running)
    for job_id, where in per_job.items():
        job = arrived[job_id]
        assert sorted(k for _, k, _ in where) == list(range(job.instances))
        assert all(g == job.gpus for _, _, g in where)
        if job.distinct_nodes:
            assert len({n for n, _, _ in where}) == job.instances
    queued, running = set(sched.queue), set(sched.running)
    assert not (queued & running) and not (queued & departed) and not (running & departed)
    assert queued | running | departed == set(arrived)


@pytest.mark.parametrize("name", BASELINES)
@settings(max_examples=60, deadline=None)
@given(stream=streams())
def test_random_streams_keep_the_invariants(name, stream):
    caps, events = stream
    p = make_policy(name, cluster(*caps), **({"window": 5} if name == "fgd" else {}))
    sched = Scheduler(p)
    arrived: dict[str, Job] = {}
    eligible_of: dict[str, set[str] | None] = {}
    departed: set[str] = set()
    for n, event in enumerate(events):
        down = {v.name for v in p.view() if not v.available}
        if event[0] == "arrive":
            _, instances, gpus, distinct, eligible = event
            job = Job(f"j{n}", instances, gpus, distinct_nodes=distinct)
            arrived[job.id] = job
            eligible_of[job.id] = eligible
            step = sched.arrive(job, eligible)
        elif event[0] == "depart":
            live = sorted(set(arrived) - departed)
            if not live:
                continue
            job_id = live[event[1] % len(live)]
            departed.add(job_id)
            step = sched.depart(job_id)
        else:
            p.set_available(event[1], event[2])
            continue
        for decision in step.decisions:
            job = arrived[decision.job]
            assert len(decision.nodes) == job.instances
            assert not set(decision.nodes) & down
            if eligible_of[decision.job] is not None:
                assert set(decision.nodes) <= eligible_of[decision.job]
        assert step.migrations == []
        check_state(p, sched, arrived, departed)


@pytest.mark.parametrize("name", ["fgd", "buddy", "slurm-default"])
@settings(max_examples=40, deadline=None)
@given(stream=streams())
def test_fast_path_agrees_with_the_scan(name, stream):
    """Naming every node as eligible takes the scan; it must choose what the index path chooses."""
    caps, events = stream
    p = make_policy(name, cluster(*caps), **CONFIG.get(name, {}))
    everyone = [f"n{i}" for i in range(len(caps))]
    for n, event in enumerate(events):
        if event[0] == "arrive":
            job = Job(f"j{n}", event[1], event[2], distinct_nodes=event[3])
            scanned = copy.deepcopy(p).place(job, everyone)
            assert p.place(job) == scanned
        elif event[0] == "avail":
            p.set_available(event[1], event[2])
        elif p.cluster.jobs:
            p.remove(sorted(p.cluster.jobs)[event[1] % len(p.cluster.jobs)])


def test_the_indexes_of_a_frozenset_of_eligible_nodes_are_kept_for_the_next_job():
    policy = make_policy("first-fit", [Node(f"n{i}", 8) for i in range(4)])
    eligible = frozenset({"n1", "n3"})
    allowed = policy._allowed(eligible)
    assert allowed == frozenset({1, 3}) and policy._allowed(eligible) is allowed
    assert policy._allowed(frozenset({"n1", "n3"})) == allowed  # an equal set: worked out again, the same
    assert policy._allowed(["n2"]) == frozenset({2}) and policy._allowed(None) is None
    assert policy.place(Job("a", 1, 8), eligible=eligible).nodes == ("n1",)
    with pytest.raises(EngineError, match="unknown node 'n9'"):
        policy._allowed(frozenset({"n9"}))
