"""Fragmentation model: Phi* against a brute-force packer, the WCC closed form, slot widths, measure()."""

from __future__ import annotations

import itertools
import os
import random
from functools import lru_cache

import pytest
import scipy.optimize

from compass_slurm.engine import fragmentation
from compass_slurm.engine.fragmentation import measure, phi_star, slot_width, slot_widths, wcc_holds
from compass_slurm.engine.model import EngineError, Job, Node
from compass_slurm.engine.policies.base import make_policy


def brute_phi(items: tuple[int, ...], capacity: int, nodes: int) -> int | None:
    """Fewest non-full bins over every packing of ``items`` into at most ``nodes`` bins; None if none fits."""
    ordered = tuple(sorted(items, reverse=True))

    @lru_cache(maxsize=None)
    def best(k: int, bins: tuple[int, ...]) -> int | None:
        if k == len(ordered):
            return sum(1 for used in bins if used < capacity)
        g = ordered[k]
        options = []
        for used in set(bins):  # bins with equal load are interchangeable
            if used + g <= capacity:
                rest = list(bins)
                rest[rest.index(used)] += g
                options.append(best(k + 1, tuple(sorted(rest))))
        if len(bins) < nodes:
            options.append(best(k + 1, tuple(sorted((*bins, g)))))
        found = [o for o in options if o is not None]
        return min(found) if found else None

    return best(0, ())


def counts_of(items, capacity: int) -> list[int]:
    counts = [0] * (capacity + 1)
    for g in items:
        counts[g] += 1
    return counts


def assert_matches_brute_force(items, capacity: int, nodes: int) -> None:
    expected = brute_phi(tuple(items), capacity, nodes)
    counts = counts_of(items, capacity)
    if expected is None:
        with pytest.raises(EngineError):
            phi_star(counts, capacity, nodes)
    else:
        assert phi_star(counts, capacity, nodes) == expected, (sorted(items), capacity, nodes)


def small_cases(capacity: int, max_items: int):
    """Every multiset of sizes 1..capacity with at most ``max_items`` items, on the tightest node counts."""
    for k in range(1, max_items + 1):
        for items in itertools.combinations_with_replacement(range(1, capacity + 1), k):
            tight = -(-sum(items) // capacity)
            for nodes in (tight, tight + 1):
                yield items, nodes


@pytest.mark.parametrize(("capacity", "max_items"), [(8, 5), (4, 7), (6, 5)])
def test_phi_star_equals_brute_force_on_every_small_multiset(capacity, max_items):
    for items, nodes in small_cases(capacity, max_items):
        assert_matches_brute_force(items, capacity, nodes)


@pytest.mark.parametrize("capacity", [8, 4, 6])
def test_phi_star_equals_brute_force_on_random_larger_cases(capacity):
    rng = random.Random(capacity)
    for _ in range(150):
        nodes = rng.randint(1, 5)
        # Mostly FUF-heavy mixes, where the closed form does not apply and the exact path runs.
        items = [rng.choice([1, 2, 3, 3, 5, 5, 6, 7, capacity]) for _ in range(rng.randint(1, 10))]
        items = [min(g, capacity) for g in items]
        if sum(items) <= nodes * capacity:
            assert_matches_brute_force(items, capacity, nodes)


def test_node_limit_forces_a_cleverer_packing_or_none():
    # Best-fit decreasing needs 3 bins for these; 4+2+2 / 3+3+2 uses 2, both full.
    assert phi_star(counts_of([4, 3, 3, 2, 2, 2], 8), 8, 2) == 0
    # 15 GPUs fit 2 nodes by count, but three 5s cannot share a node.
    with pytest.raises(EngineError):
        phi_star(counts_of([5, 5, 5], 8), 8, 2)
    with pytest.raises(EngineError, match="exceed"):
        phi_star(counts_of([8, 8, 1], 8), 8, 2)
    assert phi_star(counts_of([5, 5, 5], 8), 8, 3) == 3
    assert phi_star([0] * 9, 8, 4) == 0


def test_wcc_closed_form_is_used_and_right(monkeypatch):
    def no_exact(*args):
        raise AssertionError("the exact solver ran although WCC holds")

    monkeypatch.setattr(fragmentation, "_exact_phi", no_exact)
    rng = random.Random(7)
    for _ in range(500):
        capacity = rng.choice([8, 4])
        counts = [0] + [rng.randint(0, 40) for _ in range(capacity)]
        counts[1] = max(counts[1], fragmentation.filler_demand(counts, capacity) + rng.randint(0, 5))
        assert wcc_holds(counts, capacity)
        total = sum(g * n for g, n in enumerate(counts))
        nodes = -(-total // capacity) + rng.randint(0, 3)
        assert phi_star(counts, capacity, nodes) == (1 if total % capacity else 0)


def test_wcc_closed_form_agrees_with_brute_force_on_small_wcc_cases():
    checked = 0
    for items, nodes in small_cases(8, 6):
        if wcc_holds(counts_of(items, 8), 8):
            assert_matches_brute_force(items, 8, nodes)
            checked += 1
    assert checked > 500


@pytest.mark.parametrize(
    ("items", "capacity", "holds"),
    [
        ([3, 1], 8, True),  # 3 + 1 fills a width-4 slot
        ([3], 8, False),
        ([5, 1, 1, 1], 8, True),
        ([5, 1, 1], 8, False),
        ([6, 1, 1], 8, True),
        ([6, 1], 8, False),
        ([7, 1], 8, True),
        ([7, 3, 1], 8, False),  # needs 1 + 1
        ([2, 4, 8], 8, True),  # FF sizes need no fillers
        ([3], 4, False),
        ([3, 1], 4, True),
        ([5], 6, False),  # width 6: one filler
        ([4, 1, 1], 6, True),
        ([4, 1], 6, False),
        ([], 8, True),
    ],
)
def test_wcc_check(items, capacity, holds):
    assert wcc_holds(counts_of(items, capacity), capacity) is holds


def test_slot_widths_and_slot_width():
    assert slot_widths(8) == (2, 4, 8)
    assert slot_widths(4) == (2, 4)
    assert slot_widths(6) == (2, 6)
    assert slot_widths(2) == (2,)
    assert slot_widths(12) == (2, 4, 12)
    assert [slot_width(g, 8) for g in range(1, 9)] == [2, 2, 4, 4, 8, 8, 8, 8]
    assert [slot_width(g, 4) for g in range(1, 5)] == [2, 2, 4, 4]
    assert [slot_width(g, 6) for g in range(1, 7)] == [2, 2, 6, 6, 6, 6]
    with pytest.raises(EngineError):
        slot_width(5, 4)


def mixed_policy(placements: list[tuple[Job, list[str]]]):
    nodes = [Node(f"e{i}", 8) for i in range(3)] + [Node(f"f{i}", 4) for i in range(3)]
    policy = make_policy("first-fit", nodes)
    for job, where in placements:
        policy.adopt(job, where)
    return policy


def test_measure_computes_phi_star_per_capacity_group():
    # One 4-GPU instance per group: pooled as one G=8 demand it would look full (T = 8);
    # per group, the 8-GPU node is partial and the 4-GPU node is full.
    policy = mixed_policy([(Job("a", 1, 4), ["e0"]), (Job("b", 1, 4), ["f0"])])
    frag = measure(policy.cluster)
    assert (frag.nodes, frag.gpus, frag.gpus_used) == (6, 36, 8)
    assert (frag.partial, frag.phi_star) == (1, 1)
    assert frag.sif == 0.0
    assert frag.within_bound


def test_measure_on_a_mixed_cluster_with_avoidable_fragmentation():
    # 8-GPU group: 5 and 3 apart (exact path: one 5+3 node is full). 4-GPU group: 2 and 2 apart.
    policy = mixed_policy(
        [
            (Job("five", 1, 5), ["e0"]),
            (Job("three", 1, 3), ["e1"]),
            (Job("p", 1, 2), ["f0"]),
            (Job("q", 1, 2), ["f1"]),
            (Job("r", 1, 3), ["f2"]),
        ]
    )
    frag = measure(policy.cluster)
    assert frag.partial == 5
    assert frag.phi_star == 1  # only the lone 3 in the 4-GPU group must stay partial
    assert frag.sif == pytest.approx(4 / 6)
    # two groups (4 and 8 GPUs): two partial nodes beyond Phi* each (docs/concepts.md); 4 in all here
    assert frag.sif_bound == pytest.approx(4 / 6)
    assert frag.within_bound
    assert [(g.capacity, g.partial, g.phi_star, g.within_bound) for g in frag.groups] == [
        (4, 3, 1, True), (8, 2, 0, True)]
    assert frag.as_dict()["phi_star"] == 1


def test_measure_checks_wcc_per_group():
    # Pooled, three 1-GPU instances would cover both 3s; per group, the 4-GPU group has none.
    policy = mixed_policy(
        [(Job("t8", 1, 3), ["e0"]), (Job("ones", 3, 1), ["e0", "e0", "e1"]), (Job("t4", 1, 3), ["f0"])]
    )
    assert measure(policy.cluster).wcc is False
    policy = mixed_policy([(Job("t8", 1, 3), ["e0"]), (Job("ones", 1, 1), ["e0"])])
    assert measure(policy.cluster).wcc is True
