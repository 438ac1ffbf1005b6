"""Classic bin-packing baselines: first fit, best fit (GFS-style), its placebo, and worst fit (Slurm's LLN).

Each picks one node per instance by free GPUs. Without restrictions the free-GPU
buckets answer in O(G); a partition restriction or a distinct-nodes job scans.
"""

from __future__ import annotations

from .base import GreedyPolicy, register


class _ByFree(GreedyPolicy):
    def _fast(self, gpus: int, taken: set[int], allowed: frozenset[int] | None, distinct: bool) -> bool:
        return allowed is None and not (distinct and taken)


@register
class FirstFit(_ByFree):
    name = "first-fit"
    summary = "lowest-index node with enough free GPUs"

    def choose(self, gpus, taken, allowed, distinct):
        if self._fast(gpus, taken, allowed, distinct):
            free = self.cluster.free
            mins = [m for k in range(gpus, free.max_key + 1) if (m := free.bucket(k).min()) is not None]
            return min(mins) if mins else None
        return next(iter(self.fitting(gpus, taken, allowed, distinct)), None)


@register
class BestFit(_ByFree):
    name = "best-fit"
    summary = "node with the fewest free GPUs that still fit (GFS-style)"

    def choose(self, gpus, taken, allowed, distinct):
        if self._fast(gpus, taken, allowed, distinct):
            hit = self.cluster.free.lowest_with_key_at_least(gpus)
            return None if hit is None else hit[1]
        return self.pick_by_free(gpus, taken, allowed, distinct, self.cluster.free_gpus)


@register
class BestFitRotate(BestFit):
    """Best fit that breaks ties in turn instead of by lowest index.

    Neither better nor worse than best-fit by design, it is the placebo of the results
    (docs/results/placebo): how far a policy moves from best-fit's figures when it decides
    otherwise only between equals.
    """

    name = "best-fit-rotate"
    summary = "best fit, ties to the first node after the last one placed on (a placebo)"

    def __init__(self, nodes, **config):
        super().__init__(nodes, **config)
        self._after = 0  # where the tie-break starts: the node after the last placement's

    def choose(self, gpus, taken, allowed, distinct):
        n, start = len(self.cluster), self._after
        return self.pick_by_free(gpus, taken, allowed, distinct,
                                 lambda i: (self.cluster.free_gpus(i), (i - start) % n))

    def _place(self, job, allowed, budget):
        decision = super()._place(job, allowed, budget)
        if decision is not None:
            self._after = (self._indexes(decision.nodes[-1:])[0] + 1) % len(self.cluster)
        return decision


@register
class WorstFit(_ByFree):
    name = "worst-fit"
    summary = "node with the most free GPUs (spread, like Slurm's LLN)"

    def choose(self, gpus, taken, allowed, distinct):
        if self._fast(gpus, taken, allowed, distinct):
            hit = self.cluster.free.highest_with_key_at_least(gpus)
            return None if hit is None else hit[1]
        return self.pick_by_free(gpus, taken, allowed, distinct, lambda i: -self.cluster.free_gpus(i))
