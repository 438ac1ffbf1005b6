"""HiveD-style buddy cells: every node is a buddy tree, every instance takes one power-of-two cell.

A node of G GPUs (G a power of two) is a tree of cells of G, G/2, ..., 1 GPUs. An
instance of g GPUs takes a free cell of the smallest power of two >= g, so a
3-GPU instance occupies a 4-cell and its spare GPU stays unused. The cell comes
from the lowest-index node holding a free cell of exactly that size; failing that,
the smallest larger free cell anywhere is split (best fit, lowest index among
equals). Freeing a cell merges it with its buddy whenever both are free.

The cell structure is this policy's own: ClusterState still counts raw GPUs (g per
instance). The policy keeps, per cell size, the set of nodes with a free cell of
exactly that size, so a placement looks at O(log G) index minima, not at N nodes.
Partition restrictions and distinct-node gangs scan the candidate nodes.

Capacities that are not a power of two are split into their binary digits, each
an independent buddy tree (6 GPUs: a 4-tree and a 2-tree), so such a node never
offers a cell larger than its largest digit.

Adopted allocations (made elsewhere) get a cell by the same rule when the node
has one large enough. Otherwise the instance is *loose*: it takes the node's
largest free cells until they cover its GPUs (or none are left), so a free cell
always means free raw GPUs; such nodes have role ``loose`` and are listed by
``abs_violations``. Cells held by a loose instance are freed when it ends.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..index import MinSet
from ..model import InstanceKey, Job, Migration, Node
from .base import GreedyPolicy, register

#: a cell: (offset of its first GPU on the node, level); it spans 2**level GPUs.
Cell = tuple[int, int]


def level_of(gpus: int) -> int:
    """Level of the smallest cell that holds ``gpus`` GPUs."""
    return (gpus - 1).bit_length()


@register
class Buddy(GreedyPolicy):
    name = "buddy"
    summary = "HiveD-style buddy cells: power-of-two cells per node, exact size first, else split best fit"

    def __init__(self, nodes: Sequence[Node], **config: object) -> None:
        super().__init__(nodes, **config)
        c = self.cluster
        #: node -> level -> offsets of its maximal free cells at that level.
        self._free: list[list[set[int]]] = []
        for cap in c.capacity:
            levels: list[set[int]] = [set() for _ in range(cap.bit_length())]
            offset = 0
            for level in reversed(range(cap.bit_length())):
                if cap >> level & 1:
                    levels[level].add(offset)
                    offset += 1 << level
            self._free.append(levels)
        #: level -> available nodes with a free cell of exactly that level.
        self._with_level = [MinSet() for _ in range(c.max_gpus.bit_length())]
        self._cells: dict[InstanceKey, list[Cell]] = {}
        self._loose: set[InstanceKey] = set()
        for i in range(len(c)):
            self._reindex(i)

    # -- cells -----------------------------------------------------------------------------

    def free_cells(self, node: str) -> list[int]:
        """Sizes (GPUs) of the node's free cells, largest first."""
        levels = self._free[self._indexes([node])[0]]
        return [1 << level for level in reversed(range(len(levels))) for _ in levels[level]]

    def _best_level(self, i: int, level: int) -> int | None:
        """The smallest level >= ``level`` at which node ``i`` has a free cell."""
        levels = self._free[i]
        return next((lv for lv in range(level, len(levels)) if levels[lv]), None)

    def _take(self, i: int, level: int) -> Cell:
        """Allocate a cell of ``level`` on node ``i``, splitting the smallest larger free cell if needed."""
        levels = self._free[i]
        top = self._best_level(i, level)
        assert top is not None, "caller checked that the node has a large enough free cell"
        offset = min(levels[top])
        levels[top].discard(offset)
        for lv in range(top - 1, level - 1, -1):
            levels[lv].add(offset + (1 << lv))  # the upper half stays free
        self._reindex(i)
        return offset, level

    def _release(self, i: int, cell: Cell) -> None:
        offset, level = cell
        levels = self._free[i]
        while level + 1 < len(levels) and (buddy := offset ^ (1 << level)) in levels[level]:
            levels[level].discard(buddy)
            offset = min(offset, buddy)
            level += 1
        levels[level].add(offset)
        self._reindex(i)

    def _reindex(self, i: int) -> None:
        levels = self._free[i]
        available = self.cluster.available[i]
        for level, nodes in enumerate(self._with_level):
            if available and level < len(levels) and levels[level]:
                nodes.add(i)
            else:
                nodes.discard(i)

    # -- placement -------------------------------------------------------------------------

    def choose(self, gpus: int, taken: set[int], allowed: frozenset[int] | None, distinct: bool) -> int | None:
        return self._pick(level_of(gpus), taken, allowed, distinct)

    def _next(self, gpus: int) -> int | None:
        # choose() takes a cell for the gang being placed; a query must not.
        return self._pick(level_of(gpus), set(), None, False)

    def _pick(self, level: int, taken: set[int], allowed: frozenset[int] | None, distinct: bool) -> int | None:
        if allowed is None and not (distinct and taken):
            for nodes in self._with_level[level:]:
                i = nodes.min()
                if i is not None:
                    return i
            return None
        c = self.cluster
        pool = range(len(c)) if allowed is None else sorted(allowed)
        ranked = (
            (lv, i)
            for i in pool
            if c.available[i] and not (distinct and i in taken) and (lv := self._best_level(i, level)) is not None
        )
        return min(ranked, default=(None, None))[1]

    def _claim(self, key: InstanceKey, i: int) -> None:
        super()._claim(key, i)
        self._cells[key] = [self._take(i, level_of(self.cluster.gpus_of(key)))]

    def _unclaim(self, key: InstanceKey) -> None:
        i = self.cluster.location[key]
        for cell in self._cells.pop(key):
            self._release(i, cell)
        super()._unclaim(key)

    def _remove(self, job_id: str) -> tuple[Migration, ...]:
        c = self.cluster
        for key, i in c.instances_of(job_id):
            for cell in self._cells.pop(key):
                self._release(i, cell)
            self._loose.discard(key)
        return super()._remove(job_id)

    def _adopted(self, job: Job, nodes: list[int], allowed: frozenset[int] | None) -> None:
        level = level_of(job.gpus)
        for k, i in enumerate(nodes):
            key = (job.id, k)
            if self._best_level(i, level) is not None:
                self._cells[key] = [self._take(i, level)]
                continue
            # No cell fits: every free cell is smaller than the instance, take the largest until covered.
            self._loose.add(key)
            cells: list[Cell] = []
            while sum(1 << lv for _, lv in cells) < job.gpus and (lv := self._largest_level(i)) is not None:
                cells.append(self._take(i, lv))
            self._cells[key] = cells

    def _largest_level(self, i: int) -> int | None:
        levels = self._free[i]
        return next((lv for lv in reversed(range(len(levels))) if levels[lv]), None)

    def _availability_changed(self, i: int) -> None:
        self._reindex(i)

    # -- views -----------------------------------------------------------------------------

    def role(self, i: int) -> str:
        if any(key in self._loose for key in self.cluster.on_node[i]):
            return "loose"
        return super().role(i)

    def abs_violations(self) -> dict[str, str]:
        """Nodes holding adopted instances that do not sit in one buddy cell."""
        out: dict[str, list[str]] = {}
        for key in sorted(self._loose):
            i = self.cluster.location[key]
            out.setdefault(self.cluster.nodes[i].name, []).append(
                f"{key[0]}#{key[1]} ({self.cluster.gpus_of(key)} GPUs)"
            )
        return {name: "instances outside a buddy cell: " + ", ".join(keys) for name, keys in out.items()}
