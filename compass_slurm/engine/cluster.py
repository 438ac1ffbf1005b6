"""Raw GPU accounting shared by every policy: who runs where, what is free, which nodes are partial.

Policies layer their own structure on top (ABS slots, buddy cells); this module
only knows instances, GPU counts and node availability, and keeps the indexes
(free GPUs per node, partial nodes, demand per instance size) that make
per-event work independent of the cluster size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from .index import Buckets, MinSet
from .model import EngineError, InstanceKey, Job, Node


class Group(NamedTuple):
    """The nodes of one (capacity, GPU type): where ABS, Phi* and the bound are defined, and migrations stay."""

    capacity: int
    gpu_type: str | None
    members: tuple[int, ...]

    @property
    def label(self) -> str:
        return group_label(self.capacity, self.gpu_type)


def group_label(capacity: int, gpu_type: str | None) -> str:
    """A node group's name in reports: "a100x8", or "8-GPU" for untyped nodes."""
    return f"{gpu_type}x{capacity}" if gpu_type else f"{capacity}-GPU"


def group_key(capacity: int, gpu_type: str | None) -> tuple[int, bool, str]:
    """Groups come by capacity, then untyped before typed, then type name."""
    return capacity, gpu_type is not None, gpu_type or ""


class ClusterState:
    """Instances on nodes, with indexes. Mutated only through add/remove/move."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        if not nodes:
            raise EngineError("a cluster needs at least one node")
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.index: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.name in self.index:
                raise EngineError(f"duplicate node name {node.name!r}")
            self.index[node.name] = i
        self.capacity: list[int] = [n.gpus for n in self.nodes]
        self.available: list[bool] = [n.available for n in self.nodes]
        self.max_gpus: int = max(self.capacity)
        self.used: list[int] = [0] * len(self.nodes)
        self.used_total = 0
        self.gpus_total = sum(self.capacity)
        #: capacity -> number of nodes with it (Phi* is computed per equal-capacity group).
        self.group_size: dict[int, int] = {}
        for cap in self.capacity:
            self.group_size[cap] = self.group_size.get(cap, 0) + 1
        members: dict[tuple[int, str | None], list[int]] = {}
        for i, node in enumerate(self.nodes):
            members.setdefault((node.gpus, node.gpu_type), []).append(i)
        self.groups: tuple[Group, ...] = tuple(
            Group(cap, kind, tuple(idx)) for (cap, kind), idx in sorted(members.items(), key=lambda kv: group_key(*kv[0])))
        #: node index -> its group's index in ``groups``
        self.group_of: list[int] = [0] * len(self.nodes)
        for g, group in enumerate(self.groups):
            for i in group.members:
                self.group_of[i] = g
        #: per group, running instances per size (as ``demand``) and GPUs in use
        self.group_demand: list[list[int]] = [[0] * (group.capacity + 1) for group in self.groups]
        self.group_used: list[int] = [0] * len(self.groups)
        self.on_node: list[dict[InstanceKey, int]] = [{} for _ in self.nodes]
        self.location: dict[InstanceKey, int] = {}
        self.jobs: dict[str, Job] = {}
        #: available nodes by free GPUs; unavailable nodes are in no bucket.
        self.free = Buckets(self.max_gpus)
        self.partial = MinSet()
        #: capacity -> count of running instances per size (index = GPUs per instance).
        self.demand: dict[int, list[int]] = {g: [0] * (g + 1) for g in set(self.capacity)}
        #: called with a node index after its raw accounting changed (policies keep own indexes).
        self.watchers: list[Callable[[int], None]] = []
        for i in range(len(self.nodes)):
            self._reindex(i)

    # -- queries ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    def free_gpus(self, i: int) -> int:
        return self.capacity[i] - self.used[i]

    def instances_of(self, job_id: str) -> list[tuple[InstanceKey, int]]:
        """(instance, node index) for every placed instance of a job, in instance order."""
        job = self.jobs[job_id]
        return [((job_id, k), self.location[(job_id, k)]) for k in range(job.instances)]

    def is_pinned(self, key: InstanceKey) -> bool:
        return not self.jobs[key[0]].migratable

    def gpus_of(self, key: InstanceKey) -> int:
        return self.jobs[key[0]].gpus

    # -- mutations -------------------------------------------------------------------------

    def register(self, job: Job) -> None:
        if job.id in self.jobs:
            raise EngineError(f"job {job.id} is already running")
        self.jobs[job.id] = job

    def unregister(self, job_id: str) -> None:
        del self.jobs[job_id]

    def add(self, key: InstanceKey, i: int, *, allow_overcommit: bool = False) -> None:
        gpus = self.gpus_of(key)
        if not allow_overcommit and self.used[i] + gpus > self.capacity[i]:
            raise EngineError(
                f"node {self.nodes[i].name} has {self.free_gpus(i)} free GPUs, cannot add {gpus} for {key[0]}"
            )
        self.location[key] = i
        self.on_node[i][key] = gpus
        self.used[i] += gpus
        self.used_total += gpus
        self.demand[self.capacity[i]][min(gpus, self.capacity[i])] += 1
        g = self.group_of[i]
        self.group_demand[g][min(gpus, self.capacity[i])] += 1
        self.group_used[g] += gpus
        self._reindex(i)

    def remove(self, key: InstanceKey) -> int:
        i = self.location.pop(key)
        gpus = self.on_node[i].pop(key)
        self.used[i] -= gpus
        self.used_total -= gpus
        self.demand[self.capacity[i]][min(gpus, self.capacity[i])] -= 1
        g = self.group_of[i]
        self.group_demand[g][min(gpus, self.capacity[i])] -= 1
        self.group_used[g] -= gpus
        self._reindex(i)
        return i

    def move(self, key: InstanceKey, dst: int) -> int:
        src = self.remove(key)
        self.add(key, dst)
        return src

    def set_available(self, i: int, available: bool) -> None:
        self.available[i] = available
        self._reindex(i)

    def _reindex(self, i: int) -> None:
        used, cap = self.used[i], self.capacity[i]
        self.free.set(i, cap - used if self.available[i] and used <= cap else None)
        if 0 < used < cap:
            self.partial.add(i)
        else:
            self.partial.discard(i)
        for watch in self.watchers:
            watch(i)
