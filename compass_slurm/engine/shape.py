"""How a job's GPUs become a gang of identical instances: one rule for the daemon and the simulator.

The engine places w instances of g GPUs, each on one node (``Job``). A job of k GPUs
on nodes of G GPUs, which asks for ``nodes`` nodes (Slurm's ``--nodes``; None when
it does not say), becomes:

- w > 1 nodes asked for and k/w fits a node: w instances of k/w, on distinct nodes
  when k/w < G (what ``--nodes=w`` means);
- else k <= G: one instance of k;
- else k a multiple of G: k/G instances of G (whole nodes);
- else the largest divisor d <= G of k: k/d instances of d on distinct nodes (12 GPUs
  on 8-GPU nodes: 2 x 6). Each node then holds the same count, which is what Slurm can
  be told (``NumNodes=k/d TresPerNode=gres:gpu:d``), and the job keeps its k GPUs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

#: the rule that made the shape (the simulator counts them per run)
PER_NODE, SINGLE, WHOLE_NODES, DIVISOR = "per_node", "single", "whole_nodes", "divisor"


@dataclass(frozen=True, slots=True)
class Shape:
    instances: int
    gpus: int
    distinct_nodes: bool
    rule: str


@functools.lru_cache(maxsize=4096)  # asked for every pending job every daemon cycle; few distinct requests
def instance_shape(gpus: int, capacity: int, nodes: int | None = None) -> Shape:
    """The gang for ``gpus`` GPUs on nodes of ``capacity``; ``gpus`` and ``capacity`` are at least 1."""
    if nodes is not None and nodes > 1 and gpus % nodes == 0 and gpus // nodes <= capacity:
        per = gpus // nodes
        return Shape(nodes, per, per < capacity, PER_NODE)
    if gpus <= capacity:
        return Shape(1, gpus, False, SINGLE)
    if gpus % capacity == 0:
        return Shape(gpus // capacity, capacity, False, WHOLE_NODES)
    d = next(d for d in range(capacity, 0, -1) if gpus % d == 0)
    return Shape(gpus // d, d, d < capacity, DIVISOR)
