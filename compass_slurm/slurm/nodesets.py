"""What a multi-node job asks of its set of nodes: ``--contiguous``, ``--switches``, topology/block's blocks.

These are not properties of one node, so no eligible set expresses them. The daemon
honours them by choosing, each cycle, one node set that satisfies them and has room,
and handing the policy the job's eligible nodes within it:

- ``--contiguous``: a window of consecutive nodes in Slurm's order of all its nodes (those
  without GPUs too), as many as the job has instances, each instance on its own node (a
  job whose instances may share a node could use a subset of a window that is not
  consecutive: left to Slurm);
- ``--switches=N`` under topology/tree: the nodes under N leaf switches (any N of them;
  with more leaves than that, the combinations are tried when there are few);
- topology/block: the nodes of one base block (Slurm would also accept some larger
  aggregates, by ``BlockSizes``; one block it always accepts). ``--segment`` is left to
  Slurm;
- ``-p a,b``: the nodes of one of the job's partitions. Slurm runs a job in one partition,
  so a node list spanning two is one it never starts (none need be chosen where one
  partition holds the GPU nodes of all the others).

A set with room is chosen by best fit (the fewest free GPUs that still hold the job), so
that the emptiest leaves and windows stay free for the jobs that need them whole; with no
set of room, the set closest to it, where the job waits. A job no set can ever hold is
left to Slurm (``Unhonoured``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .state import SlurmState

#: at most this many combinations of leaf switches are tried for one ``--switches=N`` job
MAX_COMBINATIONS = 256

#: a partition's nodes, by its name
NodesOf = Callable[[str], frozenset[str]]


def _no_partitions(partition: str) -> frozenset[str]:
    raise AssertionError(f"partition {partition} asked of a caller that named none")


class Unhonoured(ValueError):
    """A request on the set of nodes the daemon cannot honour exactly; the message says which."""


@dataclass(frozen=True, slots=True)
class Spread:
    """What a job asks of its set of nodes: a window of ``contiguous`` consecutive nodes (0: none), nodes under at
    most ``switches`` leaf switches (0: any), within one block (``block``), within one of ``partitions`` (names;
    empty: any)."""

    contiguous: int = 0
    switches: int = 0
    block: bool = False
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSets:
    """The cluster's node order and topology, as far as a job's set of nodes may depend on them. A job's partitions
    come by name; ``nodes_of`` gives a partition's nodes (made by the caller when first asked: most jobs have one)."""

    order: tuple[str, ...] = ()
    leaves: tuple[frozenset[str], ...] = ()
    blocks: tuple[frozenset[str], ...] = ()

    @classmethod
    def of(cls, state: SlurmState, names: Iterable[str]) -> NodeSets:
        """Of the nodes ``names`` (the engine's). The order is every node's, Slurm's: a node the engine does not
        place on (no GPUs, another partition) still breaks a window of consecutive nodes."""
        wanted = set(names)
        leaves = tuple(frozenset(s.nodes) & wanted for s in state.switches if s.level == 0)
        blocks = tuple(frozenset(b.nodes) & wanted for b in state.blocks)
        return cls(tuple(n.name for n in state.nodes), tuple(filter(None, leaves)), tuple(filter(None, blocks)))

    def spread(self, instances: int, whole: bool, contiguous: bool, switches: int, segment: int,
               partitions: Iterable[str] = (), nodes_of: NodesOf = _no_partitions) -> Spread | None:
        """The Spread a job of ``instances`` instances asks for (None: any nodes will do). ``whole``: each instance
        has a node of its own; ``partitions``: the job's partitions. Raises Unhonoured for what the daemon leaves to
        Slurm."""
        if instances <= 1:
            return None  # one node is consecutive, under one switch, in one block
        if segment:
            raise Unhonoured(f"--segment={segment} is left to Slurm")
        if contiguous and not whole:
            raise Unhonoured("--contiguous with instances that may share a node is left to Slurm")
        if switches and len(self.leaves) > switches and math.comb(len(self.leaves), switches) > MAX_COMBINATIONS:
            raise Unhonoured(f"--switches={switches} over {len(self.leaves)} leaf switches is left to Slurm")
        spread = Spread(instances if contiguous else 0,
                        switches if self.leaves and len(self.leaves) > switches else 0, bool(self.blocks),
                        _widest(partitions, nodes_of))
        return spread if spread != Spread() else None

    def candidates(self, spread: Spread, nodes_of: NodesOf = _no_partitions) -> Iterable[frozenset[str]]:
        """Every node set that satisfies ``spread``."""
        bases: Iterable[frozenset[str]] | None = None  # None: any nodes
        if spread.switches:
            bases = (frozenset().union(*c) for c in itertools.combinations(self.leaves, spread.switches))
        elif spread.block:
            bases = self.blocks
        if spread.partitions:
            parts = [nodes_of(name) for name in spread.partitions]
            bases = parts if bases is None else dict.fromkeys(
                both for base in bases for part in parts if (both := base & part))
        if not spread.contiguous:
            yield from bases or ()
            return
        within = None if bases is None else list(bases)
        w = spread.contiguous
        for at in range(len(self.order) - w + 1):
            window = frozenset(self.order[at:at + w])
            if within is None or any(window <= base for base in within):
                yield window

    def choose(self, spread: Spread, usable: Callable[[frozenset[str]], frozenset[str]], free: Mapping[str, int],
               capacity: Mapping[str, int], instances: int, gpus: int, distinct: bool,
               nodes_of: NodesOf = _no_partitions) -> frozenset[str]:
        """The node set for a job of ``instances`` x ``gpus``: of the sets with room now (``free`` GPUs per node
        among the ``usable`` of each set), the one with the fewest free GPUs; else of those that could hold it
        empty (``capacity``), the one with the most free GPUs. Raises Unhonoured when no set ever could."""
        best: tuple[int, frozenset[str]] | None = None
        closest: tuple[int, frozenset[str]] | None = None
        for candidate in self.candidates(spread, nodes_of):
            nodes = usable(candidate)
            if not fits(nodes, capacity, instances, gpus, distinct):
                continue
            room = sum(free.get(n, 0) for n in nodes)
            if fits(nodes, free, instances, gpus, distinct):
                if best is None or room < best[0]:
                    best = (room, nodes)
            elif closest is None or room > closest[0]:
                closest = (room, nodes)
        if best is not None:
            return best[1]
        if closest is not None:
            return closest[1]
        raise Unhonoured(f"no node set holds {instances} x {gpus} GPUs as {_describe(spread)} asks")


def fits(nodes: Iterable[str], gpus_of: Mapping[str, int], instances: int, gpus: int, distinct: bool) -> bool:
    """Whether ``instances`` x ``gpus`` fit in the GPUs ``gpus_of`` says ``nodes`` have (by GPU counts alone)."""
    if distinct:
        return sum(1 for n in nodes if gpus_of.get(n, 0) >= gpus) >= instances
    return sum(gpus_of.get(n, 0) // gpus for n in nodes) >= instances


def _widest(partitions: Iterable[str], nodes_of: NodesOf) -> tuple[str, ...]:
    """Those of ``partitions`` (in their order) whose nodes no other one's hold, one of equals; none where one holds
    all the others'."""
    sets: dict[frozenset[str], str] = {}
    for name in partitions:
        sets.setdefault(nodes_of(name), name)
    widest = tuple(name for nodes, name in sets.items() if nodes and not any(nodes < wider for wider in sets))
    return widest if len(widest) > 1 else ()


def _describe(spread: Spread) -> str:
    parts = [f"{spread.contiguous} contiguous nodes"] if spread.contiguous else []
    if spread.switches:
        parts.append(f"at most {spread.switches} leaf switches")
    if spread.block:
        parts.append("one block")
    if spread.partitions:
        parts.append("one partition")
    return ", ".join(parts)
