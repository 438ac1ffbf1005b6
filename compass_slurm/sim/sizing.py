"""How big a cluster to simulate: N(eta) from the concurrent-demand curve, and node lists.

N(eta) = max(ceil(p_eta / G), N_maxjob) (spec section 5), with p_eta the eta-th
percentile of concurrent GPU demand. The demand curve assumes every job runs
from its submit time for its duration (no queueing), and the percentile is
time-weighted over the span from the first submit to the last end, so a quiet
week counts for as long as it lasted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..engine.model import MAX_NODE_GPUS, MAX_NODES, Job, Node
from .workloads import SimJob


def demand_curve(jobs: Sequence[SimJob]) -> tuple[list[float], list[int]]:
    """Step function of GPUs in use: demand[k] holds from times[k] until times[k + 1]."""
    delta: dict[float, int] = {}
    for sj in jobs:
        if sj.duration <= 0:
            continue
        gpus = sj.job.total_gpus
        delta[sj.submit] = delta.get(sj.submit, 0) + gpus
        end = sj.submit + sj.duration
        delta[end] = delta.get(end, 0) - gpus
    times = sorted(delta)
    demand, level = [], 0
    for t in times:
        level += delta[t]
        demand.append(level)
    return times, demand


def demand_percentile(jobs: Sequence[SimJob], eta: float) -> float:
    """The demand level that the curve stays at or below for a share ``eta`` of the time."""
    if not 0 < eta <= 1:
        raise ValueError(f"eta must be in (0, 1], got {eta}")
    times, demand = demand_curve(jobs)
    spans = sorted((d, t1 - t0) for t0, t1, d in zip(times, times[1:], demand))
    total = sum(s for _, s in spans)
    if total == 0:
        return 0.0
    covered = 0.0
    for level, span in spans:
        covered += span
        if covered >= eta * total * (1 - 1e-12):
            return float(level)
    return float(spans[-1][0])


def nodes_for(job: Job, node_gpus: int) -> int:
    """Fewest nodes of ``node_gpus`` that hold the whole gang at once."""
    if job.distinct_nodes:
        return job.instances
    return math.ceil(job.instances / (node_gpus // job.gpus))


def cluster_size(jobs: Sequence[SimJob], eta: float, node_gpus: int) -> int:
    """N(eta) = max(ceil(p_eta / G), N_maxjob): at least one node, and room for the largest job."""
    if not jobs:
        raise ValueError("cannot size a cluster for an empty workload")
    largest = max(nodes_for(sj.job, node_gpus) for sj in jobs)
    return check_nodes(max(math.ceil(demand_percentile(jobs, eta) / node_gpus), largest, 1),
                       f"N({eta:g}) of this workload on {node_gpus}-GPU nodes")


def check_nodes(count: int, what: str) -> int:
    """``count``, the nodes of ``what``; ValueError past MAX_NODES, before any of them is made."""
    if count > MAX_NODES:
        raise ValueError(f"{what}: {count:,} nodes, more than the {MAX_NODES:,} a simulation takes")
    return count


def parse_mix(text: str) -> list[tuple[int, int]]:
    """``"8:60,4:4"`` -> [(8, 60), (4, 4)]: GPUs per node and how many such nodes."""
    groups = []
    for part in text.split(","):
        gpus, sep, count = part.strip().partition(":")
        try:
            group = (int(gpus), int(count))
        except ValueError:
            raise ValueError(f"bad node mix {text!r}: expected GPUS:COUNT[,GPUS:COUNT...], e.g. 8:60,4:4") from None
        if not sep or not 1 <= group[0] <= MAX_NODE_GPUS or group[1] < 1:
            raise ValueError(f"bad node mix {text!r}: each part needs GPUS of 1 to {MAX_NODE_GPUS} and COUNT >= 1, "
                             "e.g. 8:60")
        groups.append(group)
    check_nodes(sum(count for _, count in groups), f"node mix {text!r}")
    return groups


def make_nodes(groups: Sequence[tuple[int, int]]) -> tuple[Node, ...]:
    """Nodes n00000, n00001, ... with the capacities of ``groups`` in order."""
    capacities = [gpus for gpus, count in groups for _ in range(count)]
    return tuple(Node(f"n{i:05d}", gpus) for i, gpus in enumerate(capacities))
