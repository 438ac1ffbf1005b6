"""Mixed clusters in the simulator: nodes from a layout file, and each job's eligible nodes.

A layout (compass_slurm/layout.py: the TOML file ``scripts/dev-cluster start --layout``
takes) gives the nodes: names, GPUs, GPU type and features; CPU-only groups are left out.
With ``eta`` the layout is a shape rather than a size: every group is scaled by one
factor so that the cluster holds p_eta GPUs, the eta-th percentile of the window's
concurrent demand (sizing.py), at least one node per group, and grown until every
job that names no type fits.

A job's eligible nodes follow from its GPU type (the trace's ``gpu_type`` column, or one
drawn for a ``typed`` share of the jobs, seeded) and its constraint (the ``constraint``
column, a Slurm -C expression over node features). A trace value that no node matches
at all (a type or feature the cluster lacks: most likely the wrong layout) is an error;
a job that the nodes matching it could never hold, even empty (8 GPUs per instance of
a type whose nodes have 4), is skipped and counted, as Slurm would refuse it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..engine.cluster import group_label
from ..engine.model import Node
from ..layout import Layout, NodeGroup
from ..slurm.constraint import parse_constraint
from .sizing import check_nodes, demand_percentile
from .workloads import SimJob, TraceRecord


@dataclass(frozen=True)
class SimCluster:
    """The simulated nodes and each node's features (what a constraint is checked against)."""

    nodes: tuple[Node, ...]
    features: dict[str, frozenset[str]]
    #: per layout group with GPUs: (its label, its nodes in the layout, its nodes here)
    sizes: tuple[tuple[str, int, int], ...] = ()

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({n.gpu_type for n in self.nodes if n.gpu_type is not None}))


def from_layout(layout: Layout, jobs: Sequence[SimJob] | None = None, eta: float | None = None) -> SimCluster:
    """The layout's GPU nodes; with ``eta`` (and ``jobs``) scaled to N(eta) as the module docstring says."""
    groups = [g for g in layout.groups if g.gpus > 0]
    if not groups:
        raise ValueError("the layout has no node with GPUs to simulate")
    if eta is None or jobs is None:
        return _cluster(groups, [len(g.names) for g in groups])
    gpus = sum(g.gpus * len(g.names) for g in groups)
    factor = max(demand_percentile(jobs, eta), 1.0) / gpus
    while True:
        counts = [max(1, round(len(g.names) * factor)) for g in groups]
        cluster = _cluster(groups, counts)
        if _largest_fits(jobs, cluster.nodes):
            return cluster
        factor *= 1.1


def _cluster(groups: Sequence[NodeGroup], counts: Sequence[int]) -> SimCluster:
    check_nodes(sum(counts), "the layout's GPU nodes")
    nodes: list[Node] = []
    features: dict[str, frozenset[str]] = {}
    for group, count in zip(groups, counts):
        for name in _names(group.names, count):
            nodes.append(Node(name, group.gpus, gpu_type=group.gpu_type))
            features[name] = frozenset(group.features)
    sizes = tuple((group_label(group.gpus, group.gpu_type), len(group.names), count) for group, count in zip(groups, counts))
    return SimCluster(tuple(nodes), features, sizes)


def _names(names: tuple[str, ...], count: int) -> list[str]:
    """``count`` names for a group: its own first, then its last one suffixed -1, -2, ..."""
    return list(names[:count]) + [f"{names[-1]}-{k}" for k in range(1, count - len(names) + 1)]


def _largest_fits(jobs: Sequence[SimJob], nodes: Sequence[Node]) -> bool:
    """Whether every job without a GPU type or constraint fits the empty cluster."""
    return all(room(sj, nodes) >= sj.job.instances for sj in jobs if sj.eligible is None)


def room(sj: SimJob, nodes: Sequence[Node]) -> int:
    """How many of the job's instances ``nodes`` hold when empty."""
    job = sj.job
    per_node = [n.gpus // job.gpus for n in nodes]
    return sum(min(p, 1) for p in per_node) if job.distinct_nodes else sum(per_node)


def restrict(jobs: Sequence[SimJob], records: Sequence[TraceRecord], cluster: SimCluster, typed: float | None,
             seed: int) -> tuple[list[SimJob], list[str]]:
    """Each job with its eligible nodes; returns the jobs that can run and why each other one cannot.

    ``records[i]`` is the trace row of ``jobs[i]``; its ``gpu_type`` and ``constraint`` come
    first. Of the rest, a share ``typed`` get a GPU type drawn (seeded by ``seed``) among the
    types with a node big enough for one instance, in proportion to the type's GPUs.
    """
    draw = random.Random(f"typed:{seed}")
    gpus_of: dict[str, int] = {}
    for n in cluster.nodes:
        if n.gpu_type is not None:
            gpus_of[n.gpu_type] = gpus_of.get(n.gpu_type, 0) + n.gpus
    eligible: dict[tuple[str | None, str | None], tuple[frozenset[str] | None, tuple[Node, ...]]] = {}
    kept: list[SimJob] = []
    skipped: list[str] = []
    for sj, record in zip(jobs, records):
        pick, at = draw.random(), draw.random()  # drawn for every job, so a job's draw is its own
        kind, constraint = record.gpu_type, record.constraint
        if kind is None and constraint is None and typed and pick < typed:
            kind = _weighted([t for t in sorted(gpus_of) if _has_room(cluster, t, sj.job.gpus)], gpus_of, at)
        if kind is None and constraint is None:
            kept.append(sj)
            continue
        key = (kind, constraint)
        if key not in eligible:
            eligible[key] = _eligible(cluster, kind, constraint)
        names, nodes = eligible[key]
        if not nodes:
            raise ValueError(f"job {sj.job.id} asks for {_asked(kind, constraint)}, which no node has"
                             f"{'' if cluster.gpu_types else ' (the nodes have no GPU types: give --layout)'}")
        if room(sj, nodes) < sj.job.instances:
            skipped.append(f"job {sj.job.id} ({sj.job.instances} x {sj.job.gpus} GPUs, {_asked(kind, constraint)}): "
                           f"{len(nodes)} node(s) match, room for {room(sj, nodes)} instance(s)")
            continue
        kept.append(replace(sj, eligible=names))
    return kept, skipped


def _asked(kind: str | None, constraint: str | None) -> str:
    return " and ".join(x for x in (kind and f"GPU type {kind}", constraint and f"constraint {constraint!r}") if x)


def _has_room(cluster: SimCluster, kind: str, gpus: int) -> bool:
    return any(n.gpu_type == kind and n.gpus >= gpus for n in cluster.nodes)


def _weighted(kinds: list[str], weight: dict[str, int], at: float) -> str | None:
    """The type at ``at`` (in [0, 1)) along the kinds' cumulative weights; None when there is none."""
    total = sum(weight[k] for k in kinds)
    mark = at * total
    for k in kinds:
        mark -= weight[k]
        if mark < 0:
            return k
    return kinds[-1] if kinds else None


def _eligible(cluster: SimCluster, kind: str | None, constraint: str | None
              ) -> tuple[frozenset[str] | None, tuple[Node, ...]]:
    """The names of the nodes of ``kind`` whose features satisfy ``constraint`` (None: all nodes), and the nodes."""
    need = parse_constraint(constraint)
    nodes = tuple(n for n in cluster.nodes
                  if (kind is None or n.gpu_type == kind) and need.satisfied_by(cluster.features[n.name]))
    if len(nodes) == len(cluster.nodes):
        return None, nodes  # every node: no restriction to carry
    return frozenset(n.name for n in nodes), nodes


def scale_note(cluster: SimCluster) -> str:
    """How the layout's groups were scaled: "a100x8 8 -> 27, v100x4 4 -> 14"."""
    return ", ".join(f"{name} {before} -> {after}" for name, before, after in cluster.sizes)
