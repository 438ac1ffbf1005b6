"""Value objects shared by the engine and every driver (replay, simulator, daemon).

The engine takes these in and hands these out; none of them knows about Slurm,
files or clocks, so a decision seen in production can be replayed bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: (job id, instance index): one gang member of a job.
InstanceKey = tuple[str, int]

#: the most nodes of a cluster, and GPUs of a node, the engine and the simulator take: far beyond any site, and
#: what keeps a typo (``--nodes 999999999999``) from exhausting the memory (the engine's indexes grow with both)
MAX_NODES = 1_000_000
MAX_NODE_GPUS = 1024


class EngineError(ValueError):
    """A request the engine cannot accept (unknown job, impossible size, ...)."""


@dataclass(frozen=True, slots=True)
class Node:
    """A node as the engine sees it: a name, a GPU capacity, whether new work may land on it, and its GPU type.

    Nodes of one (capacity, GPU type) form a group (ClusterState.groups): ABS and its
    bound hold per group, and migrations never leave one.
    """

    name: str
    gpus: int
    available: bool = True
    gpu_type: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.gpus <= MAX_NODE_GPUS:
            raise EngineError(f"node {self.name!r}: capacity must be 1 to {MAX_NODE_GPUS} GPUs, got {self.gpus}")


@dataclass(frozen=True, slots=True)
class Job:
    """A gang of ``instances`` identical instances of ``gpus`` GPUs each, all on one node each.

    ``migratable`` marks a checkpoint-restartable job that may be requeued onto other
    nodes; ``distinct_nodes`` demands one node per instance (Slurm's ``--nodes=w``).
    """

    id: str
    instances: int
    gpus: int
    migratable: bool = True
    distinct_nodes: bool = False
    user: str | None = None

    def __post_init__(self) -> None:
        if not self.id:
            raise EngineError("job id must not be empty")
        if self.instances < 1:
            raise EngineError(f"job {self.id}: instances must be at least 1, got {self.instances}")
        if self.gpus < 1:
            raise EngineError(f"job {self.id}: gpus per instance must be at least 1, got {self.gpus}")

    @property
    def total_gpus(self) -> int:
        return self.instances * self.gpus


@dataclass(frozen=True, slots=True)
class Migration:
    """Instance ``instance`` of ``job`` moves from node ``src`` to node ``dst``."""

    job: str
    instance: int
    src: str
    dst: str


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a job's instances go (``nodes[i]`` hosts instance ``i``) and why."""

    job: str
    nodes: tuple[str, ...]
    gpus: int
    rule: str
    migrations: tuple[Migration, ...] = ()
    candidates: tuple[str, ...] = ()

    def gpus_per_node(self) -> dict[str, int]:
        """Per-node GPU counts in first-use order: what Slurm must end up allocating."""
        counts: dict[str, int] = {}
        for name in self.nodes:
            counts[name] = counts.get(name, 0) + self.gpus
        return counts


@dataclass(frozen=True, slots=True)
class Placed:
    """One running instance on a node, as reported in cluster views."""

    job: str
    instance: int
    gpus: int
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class NodeView:
    """A read-only picture of one node: its capacity, role and the instances on it."""

    name: str
    gpus: int
    available: bool
    role: str  # empty | pool | slotted | other (policy-specific roles are allowed)
    instances: tuple[Placed, ...] = field(default=())

    @property
    def used(self) -> int:
        return sum(p.gpus for p in self.instances)

    @property
    def partial(self) -> bool:
        return 0 < self.used < self.gpus
