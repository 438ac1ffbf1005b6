"""Slurm-default-like placement: lowest-index nodes, one run of consecutive nodes per gang when possible.

This approximates select/cons_tres with default settings (equal node weights, no
topology plugin, no LLN / pack options), seen through GPUs only:

- nodes are considered in index order (Slurm's node order in slurm.conf);
- a node can take as many instances of the job as its free GPUs hold, or at most
  one when the job wants distinct nodes (``--nodes=w``), and nodes are filled
  lowest index first, the way ``--gpus=k`` takes GPUs node by node;
- a *run* is a stretch of consecutive node indexes each able to take at least one
  instance; the lowest-index run that can take the whole gang wins (so w
  whole-node instances land on the lowest-index run of w consecutive free nodes);
- when no single run can take the gang, the instances go to the lowest-index nodes
  that can take them, across runs.

Not modelled: CPUs, memory, node weights, and Slurm's own ranking of several
sufficient runs, which also weighs their sizes (we take the lowest-index one).
A single-instance job is therefore placed exactly as first fit places it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..cluster import ClusterState
from ..model import Decision, Job
from .base import Policy, register


@register
class SlurmDefault(Policy):
    name = "slurm-default"
    summary = "lowest-index nodes, one consecutive run per gang when possible (select/cons_tres defaults)"

    def _place(self, job: Job, allowed: frozenset[int] | None, budget: int | None) -> Decision | None:
        nodes = slurm_nodes(self.cluster, job, allowed)
        if nodes is None:
            return None
        c = self.cluster
        c.register(job)
        for k, i in enumerate(nodes):
            c.add((job.id, k), i)
        return Decision(job.id, self._names(nodes), job.gpus, self.name)

    def _next(self, gpus: int) -> int | None:
        nodes = slurm_nodes(self.cluster, Job("next", 1, gpus), None)
        return None if nodes is None else nodes[0]


def slurm_nodes(c: ClusterState, job: Job, allowed: frozenset[int] | None) -> list[int] | None:
    """Where Slurm's defaults put ``job`` on ``c`` now (node index per instance), or None.

    Also how the simulator places jobs that the daemon does not manage (plain sbatch).
    """
    need = job.instances
    run: list[tuple[int, int]] = []  # (node, room) of the current run
    run_room = 0
    lowest: list[tuple[int, int]] = []  # the lowest-index hosts overall, for the fallback
    lowest_room = 0
    prev = -2
    for i in _order(c, job, allowed):
        room = _room(c, i, job, allowed)
        if room == 0 or i != prev + 1:
            run, run_room = [], 0
        prev = i
        if room == 0:
            continue
        run.append((i, room))
        run_room += room
        if run_room >= need:
            return _fill(run, need)
        if lowest_room < need:
            lowest.append((i, room))
            lowest_room += room
    return _fill(lowest, need) if lowest_room >= need else None


def _room(c: ClusterState, i: int, job: Job, allowed: frozenset[int] | None) -> int:
    """How many instances of ``job`` node ``i`` can take now."""
    if not c.available[i] or (allowed is not None and i not in allowed):
        return 0
    room = max(c.free_gpus(i), 0) // job.gpus
    return min(room, 1) if job.distinct_nodes else room


def _order(c: ClusterState, job: Job, allowed: frozenset[int] | None) -> Iterable[int]:
    """Node indexes in scan order, starting at the first node that can take an instance."""
    if allowed is not None:
        return sorted(allowed)
    free = c.free
    # Nothing below the lowest node with enough free GPUs can start or extend a run.
    firsts = [m for k in range(job.gpus, free.max_key + 1) if (m := free.bucket(k).min()) is not None]
    return range(min(firsts), len(c)) if firsts else ()


def _fill(hosts: list[tuple[int, int]], need: int) -> list[int]:
    """One node per instance, taking each host's room in order until ``need`` instances are placed."""
    nodes: list[int] = []
    for i, room in hosts:
        nodes.extend([i] * min(room, need - len(nodes)))
    return nodes
