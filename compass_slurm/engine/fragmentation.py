"""Fragmentation as the spec defines it: partial nodes, inherent fragmentation Phi*, SIF and WCC.

Phi* is the fewest partial nodes any feasible placement of the running
instances could have. Under the Workload Composition Condition it has a closed
form; otherwise a greedy packing gives an upper bound, counting arguments give a
lower bound, and only when the two differ does an exact integer program run.
The answer is always exact; the bounds only decide how much work it takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .cluster import ClusterState
from .model import EngineError

# -- slot widths (shared with the ABS policy) -------------------------------------------


@lru_cache(maxsize=None)
def slot_widths(capacity: int) -> tuple[int, ...]:
    """Slot widths of a node: the powers of two from 2 that divide its capacity, and the capacity."""
    widths = {capacity}
    w = 2
    while w < capacity:
        if capacity % w == 0:
            widths.add(w)
        w *= 2
    return tuple(sorted(widths))


@lru_cache(maxsize=None)
def slot_width(gpus: int, capacity: int) -> int:
    """w*(g): the smallest slot width that holds an anchor of ``gpus`` GPUs."""
    for w in slot_widths(capacity):
        if w >= gpus:
            return w
    raise EngineError(f"{gpus} GPUs do not fit a node of {capacity}")


# -- WCC and Phi* ------------------------------------------------------------------------


def filler_demand(counts: Sequence[int], capacity: int) -> int:
    """GPUs of vacancy that the running anchors leave in their slots: sum (w*(g) - g) n_g."""
    return sum((slot_width(g, capacity) - g) * counts[g] for g in range(2, min(len(counts), capacity + 1)))


def wcc_holds(counts: Sequence[int], capacity: int) -> bool:
    """Workload Composition Condition: enough 1-GPU instances to fill every anchor's vacancy."""
    ones = counts[1] if len(counts) > 1 else 0
    return ones >= filler_demand(counts, capacity)


def phi_star(counts: Sequence[int], capacity: int, nodes: int) -> int:
    """Fewest partial nodes over all placements of ``counts[g]`` instances of g GPUs on ``nodes`` nodes."""
    key = tuple(counts[1 : capacity + 1]) + (0,) * max(0, capacity + 1 - len(counts))
    total = sum(g * n for g, n in enumerate(key, start=1))
    if total == 0:
        return 0
    if total > nodes * capacity:
        raise EngineError(f"{total} GPUs of demand exceed {nodes} nodes of {capacity}")
    low = 1 if total % capacity else 0
    if wcc_holds((0, *key), capacity):
        return low
    bins, high = _greedy_packing(key, capacity)
    if bins <= nodes:
        low = max(low, _hard_bin_bound(key, capacity))
        if high == low:
            return high
    return _exact_phi(key, capacity, nodes)


def _greedy_packing(counts: tuple[int, ...], capacity: int) -> tuple[int, int]:
    """Best-fit-decreasing of the instances >= 2 GPUs, then 1-GPU instances into the smallest gaps.

    Works on counts, not items: the bins with the same gap are filled together,
    so the cost is O(G^2) whatever the number of instances. Returns (bins used,
    partial bins): a feasible packing, hence an upper bound on Phi*.
    """
    gaps = [0] * (capacity + 1)  # gaps[d] = bins with d GPUs free
    bins = 0
    for size in range(capacity, 1, -1):
        left = counts[size - 1]
        for d in range(size, capacity + 1):
            if not left:
                break
            per_bin = d // size
            take = min(gaps[d], -(-left // per_bin))
            if not take:
                continue
            full_bins, rest = divmod(min(left, take * per_bin), per_bin)
            gaps[d] -= full_bins + (1 if rest else 0)
            gaps[d - per_bin * size] += full_bins
            if rest:
                gaps[d - rest * size] += 1
            left -= full_bins * per_bin + rest
        if left:
            per_bin = capacity // size
            full_bins, rest = divmod(left, per_bin)
            gaps[capacity - per_bin * size] += full_bins
            if rest:
                gaps[capacity - rest * size] += 1
    bins += sum(gaps[:capacity])  # every opened bin, whatever its gap (gaps[capacity] stays 0)
    ones = counts[0]
    partial = 0
    for d in range(1, capacity):
        if not gaps[d]:
            continue
        filled = min(gaps[d], ones // d)
        ones -= filled * d
        partial += gaps[d] - filled
    if ones:
        bins += -(-ones // capacity)
        if partial == 0 and ones % capacity:
            partial = 1
    return bins, partial


def _hard_bin_bound(counts: tuple[int, ...], capacity: int) -> int:
    """Lower bound for G = 8: nodes holding a 5, 6, 7 or 3 that the small instances cannot complete.

    A node with a 5, 6 or 7 holds no other instance of 5 or more, and one with 3s
    but no 5 holds at most two 3s; each such node is full only with the exact
    complement (5+3, 6+2, 7+1, 3+3+2, or 1-GPU instances). Pairing 3s and using
    every 3 on a 5 first never needs more nodes or more 1-GPU instances, and 2s
    then save two 1-GPU instances wherever they go; so buying completions
    cheapest first maximises them, and the rest must stay partial.
    """
    if capacity != 8:
        return 0
    n1, n2, n3, _, n5, n6, n7, _ = counts
    with_three = min(n5, n3)
    fives, threes = n5 - with_three, n3 - with_three
    pairs, single = divmod(threes, 2)
    zeroed = min(n2, n6 + pairs)  # a 2 completes a 6 or a pair of 3s outright
    twos = n2 - zeroed
    five_two = min(fives, twos)  # 5+2 still needs one 1-GPU instance
    costs = [
        (1, n7 + five_two + single),
        (2, n6 + pairs - zeroed),
        (3, fives - five_two),
    ]
    budget, incomplete = n1, 0
    for cost, many in costs:
        done = min(many, budget // cost)
        budget -= done * cost
        incomplete += many - done
    return incomplete


@lru_cache(maxsize=None)
def _configurations(capacity: int):
    """Every multiset of instance sizes that fits one node, as a (sizes x configs) matrix."""
    import numpy as np

    configs: list[tuple[int, ...]] = []

    def grow(largest: int, room: int, prefix: tuple[int, ...]) -> None:
        if prefix:
            configs.append(prefix)
        for g in range(min(largest, room), 0, -1):
            grow(g, room - g, prefix + (g,))

    grow(capacity, capacity, ())
    matrix = np.zeros((capacity, len(configs)))
    for j, config in enumerate(configs):
        for g in config:
            matrix[g - 1, j] += 1
    partial = np.array([0.0 if sum(c) == capacity else 1.0 for c in configs])
    return matrix, partial


@lru_cache(maxsize=4096)
def _exact_phi(counts: tuple[int, ...], capacity: int, nodes: int) -> int:
    """Configuration integer program: choose how many nodes hold each multiset, fewest partial."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    matrix, partial = _configurations(capacity)
    demand = np.array(counts, dtype=float)
    constraints = [
        LinearConstraint(matrix, demand, demand),
        LinearConstraint(np.ones((1, matrix.shape[1])), 0, nodes),
    ]
    # HiGHS may print from native code: drivers that stream to stdout keep file descriptor 1
    # away from it (compass_slurm.native_stdout); the engine itself does no I/O.
    result = milp(partial, constraints=constraints, integrality=np.ones_like(partial), bounds=Bounds(0, np.inf))
    if result.status != 0:
        raise EngineError(f"no placement of demand {counts} fits {nodes} nodes of {capacity}")
    return int(round(result.fun))


# -- a whole cluster -----------------------------------------------------------------------


class _Bounded:
    """SIF and its bound: two partial nodes beyond Phi* per node group (docs/concepts.md)."""

    # of dataclasses with fields nodes, gpus, gpus_used, partial, phi_star and wcc
    __slots__ = ()

    def _groups(self) -> int:
        return 1

    @property
    def sif(self) -> float:
        return (self.partial - self.phi_star) / self.nodes

    @property
    def sif_bound(self) -> float:
        return 2 * self._groups() / self.nodes

    @property
    def within_bound(self) -> bool:
        return self.partial - self.phi_star <= 2 * self._groups()

    def as_dict(self) -> dict[str, object]:
        return {
            "nodes": self.nodes,
            "gpus": self.gpus,
            "gpus_used": self.gpus_used,
            "partial": self.partial,
            "phi_star": self.phi_star,
            "sif": self.sif,
            "sif_bound": self.sif_bound,
            "wcc": self.wcc,
        }


@dataclass(frozen=True, slots=True)
class GroupFragmentation(_Bounded):
    """One node group's share of a measurement (ClusterState.groups: one capacity, one GPU type).

    Within a group COMPASS keeps at most one non-full slotted node and one non-full
    pool node beyond Phi* while the group's WCC holds, so its own bound is 2 / its nodes
    (docs/concepts.md, "Mixed clusters: groups and the bound").
    """

    gpu_type: str | None
    capacity: int
    nodes: int
    gpus_used: int
    partial: int
    phi_star: int
    wcc: bool

    @property
    def gpus(self) -> int:
        return self.capacity * self.nodes

    def as_dict(self) -> dict[str, object]:
        return {"gpu_type": self.gpu_type, "capacity": self.capacity, **_Bounded.as_dict(self),
                "gpus_free": self.gpus - self.gpus_used, "within_bound": self.within_bound}


@dataclass(frozen=True, slots=True)
class Fragmentation(_Bounded):
    """One measurement of a cluster: F = partial/N, F* = phi_star/N, SIF = F - F*.

    Phi* and WCC are the groups' (``groups``): Phi* their sum, WCC that of every one.
    The bound of the whole is 2 per group (2K/N over K groups); a cluster of one group
    has the paper's 2/N.
    """

    nodes: int
    gpus: int
    gpus_used: int
    partial: int
    phi_star: int
    wcc: bool
    groups: tuple[GroupFragmentation, ...] = ()

    def _groups(self) -> int:
        return max(1, len(self.groups))


def measure(c: ClusterState) -> Fragmentation:
    """Fragmentation of a cluster state (a policy's ``cluster``), per node group and in total."""
    partial = [0] * len(c.groups)
    for i in c.partial:
        partial[c.group_of[i]] += 1
    groups = tuple(
        GroupFragmentation(
            gpu_type=group.gpu_type,
            capacity=group.capacity,
            nodes=len(group.members),
            gpus_used=c.group_used[g],
            partial=partial[g],
            phi_star=phi_star(c.group_demand[g], group.capacity, len(group.members)),
            wcc=wcc_holds(c.group_demand[g], group.capacity),
        )
        for g, group in enumerate(c.groups)
    )
    return Fragmentation(
        nodes=len(c),
        gpus=c.gpus_total,
        gpus_used=c.used_total,
        partial=len(c.partial),
        phi_star=sum(f.phi_star for f in groups),
        wcc=all(f.wcc for f in groups),
        groups=groups,
    )
