"""Per cycle, the CPUs and memory that jobs Slurm has not started yet will take on each node.

A pending job pinned to exactly its nodes (the daemon's decision, not started yet) will
take its CPUs and memory there: other jobs see those as taken already (``pin``); so does a
job decided earlier in the same cycle (``decide``, ``narrowed``: the daemon tells the
Scheduler, whose engine counts GPUs only, before it places the next job). Memory is
``--mem``, ``--mem-per-cpu`` or ``--mem-per-gpu`` times the instance's GPUs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from ..engine.model import Job
from .requests import Request
from .state import SlurmJob, SlurmNode

#: a set of node names, or None for "every node the engine knows" (the policies' fast path)
Eligible = frozenset[str] | None
#: a pinned job's nodes and the (CPUs, MB) one instance takes there; the claim of a job that pins none
Claim = tuple[frozenset[str], int, int]
NO_CLAIM: Claim = (frozenset(), 0, 0)
#: one instance's memory need that is all of its node's (``--mem=0``): it fits only where none is taken
ALL_MEMORY = -1


class Claims:
    """The claims on the nodes of one translation (``slurm_nodes``, of which ``available`` take new work)."""

    def __init__(self, slurm_nodes: Mapping[str, SlurmNode], available: frozenset[str]) -> None:
        self.slurm_nodes = slurm_nodes
        self.available = available
        #: per pinned pending job, its claim; per node, the (CPUs, MB) of all of them and the GPUs they will take
        self.pins: dict[str, Claim] = {}
        self.on_node: dict[str, tuple[int, int]] = {}
        self.pinned_gpus: Counter[str] = Counter()
        #: nodes where Slurm counts more GPUs in use than the jobs read hold (see Translator._crowded)
        self.crowded: frozenset[str] = frozenset()
        #: per (eligible nodes, short nodes, how many): what narrowed made of them, the same object while they last
        self._narrowed: dict[tuple[int, int, int], tuple[frozenset[str], frozenset[str]]] = {}
        #: per node, the (CPUs, MB) of the jobs decided this cycle (see decide); per instance need (CPUs, MB), the
        #: nodes they leave too short for it
        self._decided: dict[str, tuple[int, int]] = {}
        self._short: dict[tuple[int, int], set[str]] = {}

    def pin(self, jobs: Iterable[SlurmJob], request_of: Callable[[SlurmJob], Request | None]) -> None:
        """The CPUs and memory that pending jobs pinned to exactly their nodes will take there."""
        claimed: Counter[str] = Counter()
        memory_claimed: Counter[str] = Counter()
        for job in jobs:
            if not job.required_nodes and job.num_nodes:
                continue  # pins nothing (the test below, without building a set per pending job)
            nodes = frozenset(job.required_nodes)
            if job.held or len(nodes) != job.num_nodes or not nodes <= self.slurm_nodes.keys():
                continue
            req = request_of(job)
            if req is None:
                continue
            cpus, memory = instance_needs(job, req)
            self.pins[job.id] = (nodes, cpus, memory)
            gpus = req.instances * req.gpus // len(nodes)
            for name in nodes:
                claimed[name] += cpus
                memory_claimed[name] += taken(self.slurm_nodes[name], memory)
                self.pinned_gpus[name] += gpus
        self.on_node = {name: (claimed[name], memory_claimed[name]) for name in claimed}

    def decide(self, job: SlurmJob, engine: Job, nodes: Iterable[str]) -> None:
        """``job`` was decided onto ``nodes`` (a name per instance) this cycle: it takes its CPUs and memory there
        from the jobs decided after it (``narrowed``), as its pin will in the next cycle's translation."""
        cpus, memory = instance_needs(job, Request(engine.instances, engine.gpus, engine.distinct_nodes))
        for name in nodes:
            if name not in self.slurm_nodes:
                continue
            taken_cpus, taken_memory = self._decided.get(name, (0, 0))
            self._decided[name] = (taken_cpus + cpus, taken_memory + taken(self.slurm_nodes[name], memory))
            for needs, short in self._short.items():
                if not self._fits_now(name, needs):
                    short.add(name)

    def narrowed(self, job: SlurmJob, engine: Job, eligible: Eligible) -> Eligible:
        """``eligible`` (the job's nodes as read) without the crowded nodes and those the jobs decided this cycle
        left too short of CPUs or memory for one instance of ``job``: the engine counts GPUs only, and not those of
        a job it has not read yet. ``eligible`` itself when none is; else the same object for the same inputs (the
        policy keeps the node indexes of the last set it was handed)."""
        if self._decided:
            needs = instance_needs(job, Request(engine.instances, engine.gpus, engine.distinct_nodes))
            short = self._short.get(needs)
            if short is None:
                short = self._short[needs] = {name for name in self._decided if not self._fits_now(name, needs)}
                short |= self.crowded
        elif self.crowded:
            short = self.crowded
        else:
            return eligible
        nodes = self.available if eligible is None else eligible
        if short.isdisjoint(nodes):
            return eligible
        key = (id(nodes), id(short), len(short))  # a short set only grows within a cycle
        kept = self._narrowed.get(key)
        if kept is None or kept[0] is not nodes:
            kept = self._narrowed[key] = (nodes, nodes.difference(short))
        return kept[1]

    def _fits_now(self, name: str, needs: tuple[int, int]) -> bool:
        claimed_cpus, claimed_memory = self.on_node.get(name, (0, 0))
        decided_cpus, decided_memory = self._decided.get(name, (0, 0))
        return fits(self.slurm_nodes[name], *needs, claimed_cpus + decided_cpus, claimed_memory + decided_memory)


def fits(node: SlurmNode, cpus: int, memory: int, taken_cpus: int, taken_memory: int) -> bool:
    """Whether an instance of ``cpus`` CPUs and ``memory`` MB (or ALL_MEMORY) fits on ``node`` beside its
    allocations and what the jobs Slurm has not started yet will take there (``taken_``)."""
    if node.cpus - node.cpus_alloc - taken_cpus < cpus:
        return False
    return not node.memory_mb or node.memory_mb - node.memory_alloc_mb - taken_memory >= taken(node, memory)


def taken(node: SlurmNode, memory: int) -> int:
    """The MB an instance needing ``memory`` (or ALL_MEMORY) takes on ``node``."""
    return node.memory_mb if memory == ALL_MEMORY else memory


def instance_needs(job: SlurmJob, req: Request) -> tuple[int, int]:
    """The CPUs and MB of memory (or ALL_MEMORY) one instance of ``job`` needs on its node."""
    cpus = -(-job.cpus // req.instances)
    if job.memory_per_gpu_mb is not None:  # Slurm lists the default --mem-per-cpu beside it: this one counts
        return cpus, job.memory_per_gpu_mb * req.gpus
    if job.memory_per_node_mb is not None:
        return cpus, job.memory_per_node_mb or ALL_MEMORY
    return cpus, (job.memory_per_cpu_mb or 0) * cpus
